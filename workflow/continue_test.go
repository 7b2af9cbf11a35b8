package workflow_test

import (
	"context"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	tactivity "go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/worker"
	tworkflow "go.temporal.io/sdk/workflow"

	"github.com/idemguard/idemguard/activity"
	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/testing/temporaltest"
	"github.com/idemguard/idemguard/workflow"
)

// wfShips records the workflow that ran each shipment.
type wfShips struct{ ledger }

func (s *wfShips) Ship(ctx context.Context, o Order) (Receipt, error) {
	s.add(tactivity.GetInfo(ctx).WorkflowExecution.ID)
	return Receipt{ChargeID: randomID(), Amount: o.Amount}, nil
}

// shipInTwoRuns continues as new once, 3 s later, and then ships the
// order.
func shipInTwoRuns(ctx tworkflow.Context, o Order) (Receipt, error) {
	if o.Note == "first run" {
		o.Note = "second run"
		return Receipt{}, tworkflow.NewContinueAsNewErrorWithOptions(ctx,
			tworkflow.ContinueAsNewErrorOptions{BackoffStartInterval: 3 * time.Second}, "shipInTwoRuns", o)
	}
	var r Receipt
	err := tworkflow.ExecuteActivity(activityCtx(ctx), "Ship", o).Get(ctx, &r)
	return r, err
}

// A guarded workflow that continues as new keeps its key: the next run
// holds the claim, so a duplicate started between the two runs does not
// run the body, and gets the result of the run that did. With the
// interceptor the claim is handed over in the next run's header, even when
// the next run's input gives another key (here the whole input is the key,
// and the note changes); without it, the next run re-claims the same key
// under its chain's token.
func TestGuardedWorkflowKeepsKeyAcrossContinueAsNew(t *testing.T) {
	c := temporaltest.Client(t, client.Options{})
	for _, tc := range []struct {
		name        string
		interceptor bool
		opts        []guard.CallOption
	}{
		{"handed over, another key", true, nil},
		{"same key, no interceptor", false, []guard.CallOption{guard.WithKeyPath("order_id")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGuard(t)
			ships := &wfShips{}
			tq := temporaltest.Name(t, "tq")
			var wopts worker.Options
			if tc.interceptor {
				wopts.Interceptors = []interceptor.WorkerInterceptor{activity.Must(activity.Interceptor(nil))}
			}
			temporaltest.Worker(t, c, tq, wopts, func(r worker.Registry) {
				workflow.Register(r, shipInTwoRuns, workflow.MustWrap(g, shipInTwoRuns, workflow.WithGuardOptions(tc.opts...)))
				r.RegisterActivityWithOptions(ships.Ship, tactivity.RegisterOptions{Name: "Ship"})
			})
			idA, idB := temporaltest.Name(t, "a"), temporaltest.Name(t, "b")
			o := Order{OrderID: "o-can", Amount: 4, Note: "first run"}
			runA := temporaltest.Start(t, c, client.StartWorkflowOptions{ID: idA, TaskQueue: tq}, "shipInTwoRuns", o)
			ctx := t.Context()
			// Wait for the first run to continue as new.
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
				h := temporaltest.History(t, c, idA, runA.GetRunID())
				if temporaltest.Count(h, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW) == 1 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the first run never continued as new")
				}
			}
			runB := temporaltest.Start(t, c, client.StartWorkflowOptions{ID: idB, TaskQueue: tq}, "shipInTwoRuns", o)
			var a, b Receipt
			if err := c.GetWorkflow(ctx, idA, "").Get(ctx, &a); err != nil {
				t.Fatalf("the continued workflow: %v", err)
			}
			if err := runB.Get(ctx, &b); err != nil {
				t.Fatalf("the duplicate: %v", err)
			}
			if ships.count(idB) != 0 || ships.count(idA) != 1 || a != b {
				t.Errorf("the duplicate shipped %d times, the continued workflow %d; results %+v, %+v; want 0, 1 and equal results",
					ships.count(idB), ships.count(idA), b, a)
			}
		})
	}
}
