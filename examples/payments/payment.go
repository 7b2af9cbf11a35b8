package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	tactivity "go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	tworkflow "go.temporal.io/sdk/workflow"

	"github.com/idemguard/idemguard/guard"
)

// Order is the Payment workflow's input; its order_id is the idempotency key.
type Order struct {
	OrderID  string `json:"order_id"`
	Amount   int    `json:"amount"` // in cents
	Currency string `json:"currency"`
}

// Receipt is the Charge activity's result: what the guard stores in
// DynamoDB and replays.
type Receipt struct {
	ChargeID string `json:"charge_id"`
	Amount   int    `json:"amount"`
	Currency string `json:"currency"`
}

// Provider stands in for a payment provider (Stripe, Adyen, …) and counts
// the charges that reach it, per order.
type Provider struct {
	mu      sync.Mutex
	charges map[string]int // order ID -> charges; protected by mu
}

// Charge charges o. A real provider takes idempotencyKey as its
// Idempotency-Key header and deduplicates on it, which closes the window
// between the charge and the guard's completion write.
func (p *Provider) Charge(ctx context.Context, o Order, idempotencyKey string) (Receipt, error) {
	if idempotencyKey == "" {
		return Receipt{}, errors.New("charge without an idempotency key")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.charges == nil {
		p.charges = make(map[string]int)
	}
	p.charges[o.OrderID]++
	return Receipt{
		ChargeID: fmt.Sprintf("ch_%s_%d", o.OrderID, p.charges[o.OrderID]),
		Amount:   o.Amount,
		Currency: o.Currency,
	}, nil
}

// Charges returns the number of charges made for an order.
func (p *Provider) Charges(orderID string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.charges[orderID]
}

// Activities holds the activities' dependencies.
type Activities struct{ Provider *Provider }

// Charge is the activity with the side effect; the guard around it is set
// up where the worker registers it.
func (a *Activities) Charge(ctx context.Context, o Order) (Receipt, error) {
	key, _ := guard.KeyFromContext(ctx) // the same on every retry and duplicate
	return a.Provider.Charge(ctx, o, key)
}

// Payment is the workflow: it charges the order and returns the receipt.
func Payment(ctx tworkflow.Context, o Order) (Receipt, error) {
	ctx = tworkflow.WithActivityOptions(ctx, tworkflow.ActivityOptions{
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: 500 * time.Millisecond, MaximumAttempts: 10},
	})
	var a *Activities
	var r Receipt
	err := tworkflow.ExecuteActivity(ctx, a.Charge, o).Get(ctx, &r)
	return r, err
}

// errCrash is what a crashed attempt fails with.
var errCrash = errors.New("worker crashed after charging, before reporting to Temporal")

// crashFirstAttempt is fault injection for the demo (-crash): every
// activity's first attempt runs, and then its result is thrown away and the
// attempt fails, as if the worker died just before reporting. Temporal
// retries the activity, and the guard replays the stored receipt.
type crashFirstAttempt struct {
	interceptor.WorkerInterceptorBase
}

func (*crashFirstAttempt) InterceptActivity(ctx context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	i := &crashActivity{}
	i.Next = next
	return i
}

type crashActivity struct {
	interceptor.ActivityInboundInterceptorBase
}

func (a *crashActivity) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
	res, err := a.Next.ExecuteActivity(ctx, in)
	if err == nil && tactivity.GetInfo(ctx).Attempt == 1 {
		return nil, errCrash
	}
	return res, err
}
