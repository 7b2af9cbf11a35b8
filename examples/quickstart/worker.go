package main

import (
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/worker"

	"github.com/idemguard/idemguard/activity"
	"github.com/idemguard/idemguard/examples/internal/payment"
	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/store"
)

// workerSetup is what every way of running Temporal needs: the tracing
// interceptor (for the client too), the worker's interceptors in order, and
// the registrations.
type workerSetup struct {
	tracing      interceptor.Interceptor
	interceptors []interceptor.WorkerInterceptor // after tracing
	register     func(worker.Registry)
}

// newWorker sets up the worker of both stories: the Payment workflow's
// Charge activity, whose first attempt crashes after charging, and the
// Purchase workflow's Checkout and CheckoutInSteps activities, whose first
// attempts fail after charging. Each activity is guarded with
// activity.Wrap and keyed on order_id.
func newWorker(s store.Store, tp *sdktrace.TracerProvider, p *payment.Provider, m *Mailer) (*workerSetup, error) {
	tracing, err := temporalotel.NewTracingInterceptor(temporalotel.TracerOptions{Tracer: tp.Tracer("temporal-sdk-go")})
	if err != nil {
		return nil, err
	}
	g, err := guard.New(s, guard.WithTracerProvider(tp))
	if err != nil {
		return nil, err
	}
	a := &payment.Activities{Provider: p}
	c := &Checkouts{Provider: p, Mailer: m}
	byOrder := activity.WithGuardOptions(guard.WithKeyPath("order_id"))
	return &workerSetup{
		tracing:      tracing,
		interceptors: []interceptor.WorkerInterceptor{&payment.CrashAfterCharge{Once: true}},
		register: func(r worker.Registry) {
			r.RegisterWorkflow(payment.Payment)
			r.RegisterWorkflow(Purchase)
			// The guarded activities, each registered under its own name
			// ("Charge", "Checkout", "CheckoutInSteps").
			activity.Register(r, a.Charge, activity.Must(activity.Wrap(g, a.Charge, byOrder)))
			activity.Register(r, c.Checkout, activity.Must(activity.Wrap(g, c.Checkout, byOrder)))
			activity.Register(r, c.CheckoutInSteps, activity.Must(activity.Wrap(g, c.CheckoutInSteps, byOrder)))
		},
	}, nil
}
