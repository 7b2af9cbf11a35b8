package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	tworkflow "go.temporal.io/sdk/workflow"

	"github.com/idemguard/idemguard/activity"
	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/store"
)

// Order is the Payment workflow's input; its order_id is the idempotency key.
type Order struct {
	OrderID  string `json:"order_id"`
	Amount   int    `json:"amount"` // in cents
	Currency string `json:"currency"`
}

// Receipt is the Charge activity's result: what the guard stores and
// replays.
type Receipt struct {
	ChargeID string `json:"charge_id"`
	Amount   int    `json:"amount"`
	Currency string `json:"currency"`
}

// newOrder returns an order with an ID of its own, so that runs against a
// server or table that outlives the program do not replay each other.
func newOrder() Order {
	var b [3]byte
	rand.Read(b[:])
	return Order{OrderID: "order-" + hex.EncodeToString(b[:]), Amount: 4200, Currency: "EUR"}
}

// Provider stands in for a payment provider and counts the charges that
// reach it.
type Provider struct{ charges atomic.Int64 }

// Charge charges o. A real provider would deduplicate on idempotencyKey too
// (an Idempotency-Key header), which closes the window between the charge
// and the guard's completion write; this one only counts.
func (p *Provider) Charge(ctx context.Context, o Order, idempotencyKey string) (Receipt, error) {
	n := p.charges.Add(1)
	return Receipt{ChargeID: fmt.Sprintf("ch_%s_%d", o.OrderID, n), Amount: o.Amount, Currency: o.Currency}, nil
}

// Charges returns the number of charges made.
func (p *Provider) Charges() int64 { return p.charges.Load() }

// Activities holds the activities' dependencies.
type Activities struct{ Provider *Provider }

// Charge is the activity with the side effect. It knows nothing of retries;
// the guard around it (see newWorker) does.
func (a *Activities) Charge(ctx context.Context, o Order) (Receipt, error) {
	key, _ := guard.KeyFromContext(ctx) // the same on every retry
	return a.Provider.Charge(ctx, o, key)
}

// Payment is the workflow: it charges the order and returns the receipt.
func Payment(ctx tworkflow.Context, o Order) (Receipt, error) {
	ctx = tworkflow.WithActivityOptions(ctx, tworkflow.ActivityOptions{
		StartToCloseTimeout: 10 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: 200 * time.Millisecond, MaximumAttempts: 5},
	})
	var a *Activities
	var r Receipt
	err := tworkflow.ExecuteActivity(ctx, a.Charge, o).Get(ctx, &r)
	return r, err
}

// errCrash is what the crashed attempt fails with.
var errCrash = errors.New("worker crashed after charging, before reporting to Temporal")

// crashOnce is fault injection: the first time an activity succeeds, it
// throws the result away and fails the attempt, as a worker that dies after
// the side effect and before reporting to Temporal would. Temporal retries
// the activity.
type crashOnce struct {
	interceptor.WorkerInterceptorBase
	crashed atomic.Bool
}

func (c *crashOnce) InterceptActivity(ctx context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	i := &crashActivity{crashed: &c.crashed}
	i.Next = next
	return i
}

type crashActivity struct {
	interceptor.ActivityInboundInterceptorBase
	crashed *atomic.Bool
}

func (a *crashActivity) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
	res, err := a.Next.ExecuteActivity(ctx, in)
	if err == nil && a.crashed.CompareAndSwap(false, true) {
		return nil, errCrash
	}
	return res, err
}

// workerSetup is what every way of running Temporal needs: the tracing
// interceptor (for the client too), the worker's interceptors in order, and
// the registrations.
type workerSetup struct {
	tracing      interceptor.Interceptor
	interceptors []interceptor.WorkerInterceptor // after tracing
	register     func(worker.Registry)
}

func newWorker(s store.Store, tp *sdktrace.TracerProvider, p *Provider) (*workerSetup, error) {
	tracing, err := temporalotel.NewTracingInterceptor(temporalotel.TracerOptions{Tracer: tp.Tracer("temporal-sdk-go")})
	if err != nil {
		return nil, err
	}
	g, err := guard.New(s, guard.WithTracerProvider(tp))
	if err != nil {
		return nil, err
	}
	a := &Activities{Provider: p}
	return &workerSetup{
		tracing:      tracing,
		interceptors: []interceptor.WorkerInterceptor{&crashOnce{}},
		register: func(r worker.Registry) {
			r.RegisterWorkflow(Payment)
			// The guarded activity, registered under the name "Charge".
			activity.Register(r, a.Charge, activity.Guard(g, a.Charge, activity.WithKeyPath("order_id")))
		},
	}, nil
}
