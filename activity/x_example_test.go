package activity_test

import (
	"context"
	"errors"
	"fmt"

	tactivity "go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"

	"github.com/idemguard/idemguard/activity"
	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/testing/temporaltest"
	"github.com/idemguard/idemguard/store/memory"
)

// Payment is the example activities' input.
type Payment struct {
	OrderID string `json:"order_id"`
	Cents   int    `json:"cents"`
}

var charges int

// Pay charges a payment; its side effect is counted in charges.
func Pay(ctx context.Context, p Payment) (string, error) {
	charges++
	key, _ := guard.KeyFromContext(ctx) // pass it to the payment provider too
	_ = key
	return fmt.Sprintf("charged %d cents for %s", p.Cents, p.OrderID), nil
}

// A guarded activity, registered under its original name. The SDK's test
// environment stands in for a worker; with a real worker, pass it to
// activity.Register instead.
func ExampleWrap() {
	charges = 0
	g, _ := guard.New(memory.New())
	guarded := activity.Must(activity.Wrap(g, Pay, activity.WithGuardOptions(guard.WithKeyPath("order_id"))))

	var s testsuite.WorkflowTestSuite
	s.SetLogger(temporaltest.Logger())
	env := s.NewTestActivityEnvironment()
	env.RegisterActivityWithOptions(guarded, tactivity.RegisterOptions{Name: activity.Name(Pay)})
	// activity.Register(w, Pay, guarded) does the same on a worker.

	for range 2 { // a retry, or a second workflow for the same order
		v, err := env.ExecuteActivity(Pay, Payment{OrderID: "o-1", Cents: 500})
		if err != nil {
			fmt.Println(err)
			return
		}
		var receipt string
		_ = v.Get(&receipt)
		fmt.Println(receipt)
	}
	fmt.Println("charges:", charges)
	// Output:
	// charged 500 cents for o-1
	// charged 500 cents for o-1
	// charges: 1
}

var refunds int

// Refund is an activity that knows nothing of idemguard.
func Refund(ctx context.Context, p Payment) (string, error) {
	refunds++
	return fmt.Sprintf("refunded %d cents for %s", p.Cents, p.OrderID), nil
}

// The interceptor guards activities by type name, leaving their code and
// registration as they are.
func ExampleInterceptor() {
	refunds = 0
	g, _ := guard.New(memory.New())

	var s testsuite.WorkflowTestSuite
	s.SetLogger(temporaltest.Logger())
	env := s.NewTestActivityEnvironment()
	env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{
		activity.Must(activity.Interceptor(g, activity.Policy{Activity: "Refund", Options: []activity.Option{activity.WithGuardOptions(guard.WithKeyPath("order_id"))}})),
	}})
	env.RegisterActivity(Refund)

	for range 2 {
		v, err := env.ExecuteActivity(Refund, Payment{OrderID: "o-2", Cents: 300})
		if err != nil {
			fmt.Println(err)
			return
		}
		var receipt string
		_ = v.Get(&receipt)
		fmt.Println(receipt)
	}
	fmt.Println("refunds:", refunds)
	// Output:
	// refunded 300 cents for o-2
	// refunded 300 cents for o-2
	// refunds: 1
}

// mailUp says whether the example's mail server works.
var mailUp bool

// SendInvoice renders an invoice and e-mails it, each side effect a
// guard.Step of the guarded activity.
func SendInvoice(ctx context.Context, p Payment) (string, error) {
	pdf, err := guard.Step(ctx, "render", func(ctx context.Context) (string, error) {
		fmt.Println("rendering the invoice for", p.OrderID)
		return p.OrderID + ".pdf", nil
	})
	if err != nil {
		return "", err
	}
	return guard.Step(ctx, "email", func(ctx context.Context) (string, error) {
		if !mailUp {
			return "", errors.New("mail server unavailable")
		}
		fmt.Println("e-mailing", pdf)
		return "sent " + pdf, nil
	})
}

// An activity of two side effects fails in the second. The activity's error
// releases its key, so Temporal's retry runs it again; its first step
// replays from its record, and only the second runs.
func Example_steps() {
	mailUp = false
	g, _ := guard.New(memory.New())
	guarded := activity.Must(activity.Wrap(g, SendInvoice, activity.WithGuardOptions(guard.WithKeyPath("order_id"))))

	var s testsuite.WorkflowTestSuite
	s.SetLogger(temporaltest.Logger())
	env := s.NewTestActivityEnvironment()
	activity.Register(env, SendInvoice, guarded)

	_, err := env.ExecuteActivity(SendInvoice, Payment{OrderID: "o-3", Cents: 700})
	fmt.Println("attempt 1:", err != nil)

	mailUp = true // Temporal retries the activity
	v, err := env.ExecuteActivity(SendInvoice, Payment{OrderID: "o-3", Cents: 700})
	var res string
	if err == nil {
		err = v.Get(&res)
	}
	fmt.Println("attempt 2:", res, err)
	// Output:
	// rendering the invoice for o-3
	// attempt 1: true
	// e-mailing o-3.pdf
	// attempt 2: sent o-3.pdf <nil>
}
