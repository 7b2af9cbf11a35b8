// Package payment is the payment domain the examples share: an order, the
// receipt a charge returns, a payment provider that counts what reaches it,
// the Charge activity, the Payment workflow, and the fault injection that
// makes a worker "crash" after the charge. examples/quickstart and
// examples/payments guard the same Charge activity, each in its own way.
package payment

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
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

// NewOrder returns an order of amount cents in EUR whose ID, prefix plus
// random hex, is its own, so that runs against a server or table that
// outlives the program do not replay each other.
func NewOrder(prefix string, amount int) Order {
	var b [3]byte
	rand.Read(b[:])
	return Order{OrderID: prefix + hex.EncodeToString(b[:]), Amount: amount, Currency: "EUR"}
}

// Receipt is the Charge activity's result: what the guard stores and
// replays.
type Receipt struct {
	ChargeID string `json:"charge_id"`
	Amount   int    `json:"amount"`
	Currency string `json:"currency"`
}

// String is the receipt as the examples print it: "ch_…, 42.00 EUR".
func (r Receipt) String() string {
	return fmt.Sprintf("%s, %d.%02d %s", r.ChargeID, r.Amount/100, r.Amount%100, r.Currency)
}

// Provider stands in for a payment provider (Stripe, Adyen, …). Like
// them, it takes an idempotency key with every charge (an Idempotency-Key
// header) and answers a request whose key it has seen with the earlier
// receipt instead of charging again: that closes the window no guard can
// close, a crash between the charge and the guard's completion write. It
// counts the requests and the charges that reach it, per order.
type Provider struct {
	mu       sync.Mutex
	requests map[string]int     // order ID -> charge requests; protected by mu
	charges  map[string]int     // order ID -> charges made; protected by mu
	byKey    map[string]Receipt // idempotency key -> receipt; protected by mu
}

// Charge charges o, unless a charge with idempotencyKey was made before,
// whose receipt it returns. A charge without a key is refused.
func (p *Provider) Charge(ctx context.Context, o Order, idempotencyKey string) (Receipt, error) {
	if idempotencyKey == "" {
		return Receipt{}, errors.New("charge without an idempotency key")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.charges == nil {
		p.requests, p.charges, p.byKey = map[string]int{}, map[string]int{}, map[string]Receipt{}
	}
	p.requests[o.OrderID]++
	if r, ok := p.byKey[idempotencyKey]; ok {
		return r, nil
	}
	p.charges[o.OrderID]++
	r := Receipt{ChargeID: fmt.Sprintf("ch_%s_%d", o.OrderID, p.charges[o.OrderID]), Amount: o.Amount, Currency: o.Currency}
	p.byKey[idempotencyKey] = r
	return r, nil
}

// Charges returns the number of charges made for an order.
func (p *Provider) Charges(orderID string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.charges[orderID]
}

// Requests returns the number of charge requests that reached the provider
// for an order, those it answered from an earlier charge included.
func (p *Provider) Requests(orderID string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.requests[orderID]
}

// Activities holds the activities' dependencies.
type Activities struct{ Provider *Provider }

// Charge is the activity with the side effect. It knows nothing of retries;
// the guard the worker wraps around it does.
func (a *Activities) Charge(ctx context.Context, o Order) (Receipt, error) {
	key, _ := guard.KeyFromContext(ctx) // the same on every retry and duplicate
	return a.Provider.Charge(ctx, o, key)
}

// ActivityOptions are the options the workflows give their activities: a
// fast retry policy, so that the examples' retries take a fraction of a
// second.
var ActivityOptions = tworkflow.ActivityOptions{
	StartToCloseTimeout: 30 * time.Second,
	RetryPolicy:         &temporal.RetryPolicy{InitialInterval: 200 * time.Millisecond, MaximumAttempts: 10},
}

// Payment is the workflow: it charges the order and returns the receipt.
func Payment(ctx tworkflow.Context, o Order) (Receipt, error) {
	ctx = tworkflow.WithActivityOptions(ctx, ActivityOptions)
	var a *Activities
	var r Receipt
	err := tworkflow.ExecuteActivity(ctx, a.Charge, o).Get(ctx, &r)
	return r, err
}

// ErrCrash is what a crashed attempt fails with.
var ErrCrash = errors.New("worker crashed after charging, before reporting to Temporal")

// CrashAfterCharge is fault injection, a worker interceptor: the first
// attempt of the Charge activity runs, and then, if it succeeded, its
// result is thrown away and the attempt fails with [ErrCrash], as if the
// worker died just before reporting to Temporal. Temporal retries the
// activity, and the guard replays the stored receipt.
type CrashAfterCharge struct {
	interceptor.WorkerInterceptorBase
	// Once crashes only the first such attempt in the process, not the
	// first attempt of every Charge.
	Once    bool
	crashed atomic.Bool
}

// InterceptActivity implements interceptor.WorkerInterceptor.
func (c *CrashAfterCharge) InterceptActivity(ctx context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	i := &crashActivity{c: c}
	i.Next = next
	return i
}

type crashActivity struct {
	interceptor.ActivityInboundInterceptorBase
	c *CrashAfterCharge
}

func (a *crashActivity) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
	res, err := a.Next.ExecuteActivity(ctx, in)
	info := tactivity.GetInfo(ctx)
	if err != nil || info.ActivityType.Name != "Charge" || info.Attempt != 1 {
		return res, err
	}
	if a.c.Once && !a.c.crashed.CompareAndSwap(false, true) {
		return res, err
	}
	return nil, ErrCrash
}
