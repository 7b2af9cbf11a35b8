package workflow_test

import (
	"encoding/json"
	"strings"
	"testing"

	tactivity "go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	tworkflow "go.temporal.io/sdk/workflow"

	"github.com/idemguard/idemguard/activity"
	"github.com/idemguard/idemguard/internal/testing/temporaltest"
	"github.com/idemguard/idemguard/workflow"
)

// orderV1 charges the order under the step key "charge".
func orderV1(ctx tworkflow.Context, o Order) (Receipt, error) {
	ctx = activityCtx(ctx)
	var r Receipt
	err := tworkflow.ExecuteActivity(workflow.ContextWithKey(ctx, workflow.StepKey(ctx, "charge")), "Charge", o).Get(ctx, &r)
	return r, err
}

// orderV2 is the next version of orderV1: it inserts an audit activity
// before the charge, which shifts the charge's activity ID.
func orderV2(ctx tworkflow.Context, o Order) (Receipt, error) {
	ctx = activityCtx(ctx)
	if err := tworkflow.ExecuteActivity(ctx, "Audit", o).Get(ctx, nil); err != nil {
		return Receipt{}, err
	}
	var r Receipt
	err := tworkflow.ExecuteActivity(workflow.ContextWithKey(ctx, workflow.StepKey(ctx, "charge")), "Charge", o).Get(ctx, &r)
	return r, err
}

// orderV1NoKey and orderV2NoKey are the same two versions without step
// keys, for the contrast with execution scope.
func orderV1NoKey(ctx tworkflow.Context, o Order) (Receipt, error) {
	ctx = activityCtx(ctx)
	var r Receipt
	err := tworkflow.ExecuteActivity(ctx, "Charge", o).Get(ctx, &r)
	return r, err
}

func orderV2NoKey(ctx tworkflow.Context, o Order) (Receipt, error) {
	ctx = activityCtx(ctx)
	if err := tworkflow.ExecuteActivity(ctx, "Audit", o).Get(ctx, nil); err != nil {
		return Receipt{}, err
	}
	var r Receipt
	err := tworkflow.ExecuteActivity(ctx, "Charge", o).Get(ctx, &r)
	return r, err
}

// Acceptance 5: version 2 of a workflow inserts an activity before the
// charge. Run under the same workflow ID after version 1, its charge keeps
// its step key and replays version 1's charge. Keyed by execution scope
// (workflow ID + activity ID) instead, the inserted activity shifts the
// charge's activity ID and the charge runs again.
func TestStepKeySurvivesInsertedActivity(t *testing.T) {
	c := temporaltest.Client(t, client.Options{})
	for _, tc := range []struct {
		name        string
		v1, v2      any
		opts        []activity.Option
		wantCharges int
	}{
		{"step key", orderV1, orderV2, nil, 1},
		{"execution scope", orderV1NoKey, orderV2NoKey, []activity.Option{activity.WithExecutionScope()}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGuard(t)
			var effects ledger
			tq := temporaltest.Name(t, "tq")
			temporaltest.Worker(t, c, tq, worker.Options{Interceptors: []interceptor.WorkerInterceptor{activity.Must(activity.Interceptor(nil))}}, func(r worker.Registry) {
				r.RegisterWorkflowWithOptions(tc.v1, tworkflow.RegisterOptions{Name: "OrderV1"})
				r.RegisterWorkflowWithOptions(tc.v2, tworkflow.RegisterOptions{Name: "OrderV2"})
				r.RegisterActivityWithOptions(chargeActivity(g, &effects, tc.opts...))
				r.RegisterActivityWithOptions(sideEffect(&effects, "audit"), tactivity.RegisterOptions{Name: "Audit"})
			})

			id := temporaltest.Name(t, "order")
			o := Order{OrderID: "o-5", Amount: 5}
			var r1, r2 Receipt
			run1 := temporaltest.Start(t, c, client.StartWorkflowOptions{ID: id, TaskQueue: tq}, "OrderV1", o)
			if err := run1.Get(t.Context(), &r1); err != nil {
				t.Fatalf("version 1: %v", err)
			}
			run2 := temporaltest.Start(t, c, client.StartWorkflowOptions{ID: id, TaskQueue: tq}, "OrderV2", o)
			if err := run2.Get(t.Context(), &r2); err != nil {
				t.Fatalf("version 2: %v", err)
			}
			if n := effects.count("charge"); n != tc.wantCharges {
				t.Errorf("charges = %d, want %d", n, tc.wantCharges)
			}
			if (r1 == r2) != (tc.wantCharges == 1) {
				t.Errorf("receipts %+v and %+v", r1, r2)
			}

			if tc.opts != nil {
				return
			}
			// The step key is in the charge's header in both histories.
			want := mustJSON(t, []string{"default", id, "charge"})
			h1 := scheduledKeys(t, temporaltest.History(t, c, id, run1.GetRunID()))
			h2 := scheduledKeys(t, temporaltest.History(t, c, id, run2.GetRunID()))
			if len(h1) != 1 || h1[0] != [2]string{"Charge", want} {
				t.Errorf("version 1 scheduled %v, want [[Charge %s]]", h1, want)
			}
			if len(h2) != 2 || h2[0] != [2]string{"Audit", ""} || h2[1] != [2]string{"Charge", want} {
				t.Errorf("version 2 scheduled %v, want [[Audit ] [Charge %s]]", h2, want)
			}
		})
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// StepKey is deterministic and WithKey refuses to work without the
// interceptor, which would otherwise drop the key silently.
func TestWithKeyNeedsInterceptor(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	s.SetLogger(temporaltest.Logger())
	wf := func(ctx tworkflow.Context) (string, error) {
		k := workflow.StepKey(ctx, "charge")
		workflow.ContextWithKey(ctx, k)
		return k, nil
	}

	env := s.NewTestWorkflowEnvironment()
	env.ExecuteWorkflow(wf)
	if err := env.GetWorkflowError(); err == nil || !strings.Contains(err.Error(), "Interceptor") {
		t.Errorf("WithKey without the interceptor: workflow error %v, want a panic naming Interceptor", err)
	}

	env = s.NewTestWorkflowEnvironment()
	env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{activity.Must(activity.Interceptor(nil))}})
	env.ExecuteWorkflow(wf)
	var k string
	if err := env.GetWorkflowResult(&k); err != nil {
		t.Fatal(err)
	}
	if want := `["default-test-namespace","default-test-workflow-id","charge"]`; k != want {
		t.Errorf("StepKey = %s, want %s", k, want)
	}
}
