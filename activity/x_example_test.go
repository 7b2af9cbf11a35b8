package activity_test

import (
	"context"
	"fmt"

	tactivity "go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"

	"github.com/idemguard/idemguard/activity"
	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/temporaltest"
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
func ExampleGuard() {
	charges = 0
	g, _ := guard.New(memory.New())
	guarded := activity.Guard(g, Pay, activity.WithKeyPath("order_id"))

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
func ExampleNewInterceptor() {
	refunds = 0
	g, _ := guard.New(memory.New())

	var s testsuite.WorkflowTestSuite
	s.SetLogger(temporaltest.Logger())
	env := s.NewTestActivityEnvironment()
	env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{
		activity.NewInterceptor(g, activity.Policy{Activity: "Refund", Options: []activity.Option{activity.WithKeyPath("order_id")}}),
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
