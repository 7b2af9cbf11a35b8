package workflow_test

import (
	"context"
	"fmt"
	"time"

	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	tworkflow "go.temporal.io/sdk/workflow"

	"github.com/idemguard/idemguard/activity"
	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/testing/temporaltest"
	"github.com/idemguard/idemguard/store/memory"
	"github.com/idemguard/idemguard/workflow"
)

// Invoice is the example workflow's input.
type Invoice struct {
	InvoiceID string `json:"invoice_id"`
	Cents     int    `json:"cents"`
}

var sent int

// SendInvoice is the example activity: its side effect is counted in sent.
func SendInvoice(ctx context.Context, inv Invoice) (string, error) {
	sent++
	key, _ := guard.KeyFromContext(ctx)
	return "sent under key " + key[:len("SendInvoice#")] + "…", nil
}

// InvoiceWorkflow sends an invoice under the step key "send": retries of
// the workflow's runs, and new versions that insert steps before it, keep
// the key.
func InvoiceWorkflow(ctx tworkflow.Context, inv Invoice) (string, error) {
	ctx = tworkflow.WithActivityOptions(ctx, tworkflow.ActivityOptions{StartToCloseTimeout: time.Minute})
	ctx = workflow.ContextWithKey(ctx, workflow.StepKey(ctx, "send"))
	var out string
	err := tworkflow.ExecuteActivity(ctx, SendInvoice, inv).Get(ctx, &out)
	return out, err
}

// A step key travels from the workflow to the guarded activity through the
// interceptor, registered on the worker. The SDK's test environment stands
// in for a worker.
func ExampleStepKey() {
	sent = 0
	g, _ := guard.New(memory.New())

	var s testsuite.WorkflowTestSuite
	s.SetLogger(temporaltest.Logger())
	for range 2 { // two runs of one workflow ID
		env := s.NewTestWorkflowEnvironment()
		env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{activity.Must(activity.Interceptor(nil))}})
		activity.Register(env, SendInvoice, activity.Must(activity.Wrap(g, SendInvoice)))
		env.ExecuteWorkflow(InvoiceWorkflow, Invoice{InvoiceID: "inv-1", Cents: 900})
		var out string
		if err := env.GetWorkflowResult(&out); err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(out)
	}
	fmt.Println("invoices sent:", sent)
	// Output:
	// sent under key SendInvoice#…
	// sent under key SendInvoice#…
	// invoices sent: 1
}

var welcomed int

// Onboard is a workflow whose body must run once per customer.
func Onboard(ctx tworkflow.Context, customerID string) (string, error) {
	welcomed++ // stands in for the body's activities
	return "welcome, " + customerID, nil
}

// A guarded workflow: a second workflow with the same key returns the first
// one's result without running the body.
func ExampleWrap() {
	welcomed = 0
	g, _ := guard.New(memory.New())
	guarded := workflow.MustWrap(g, Onboard)

	var s testsuite.WorkflowTestSuite
	s.SetLogger(temporaltest.Logger())
	for range 2 {
		env := s.NewTestWorkflowEnvironment()
		workflow.Register(env, Onboard, guarded)
		env.ExecuteWorkflow("Onboard", "customer-42")
		var out string
		if err := env.GetWorkflowResult(&out); err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(out)
	}
	fmt.Println("bodies run:", welcomed)
	// Output:
	// welcome, customer-42
	// welcome, customer-42
	// bodies run: 1
}
