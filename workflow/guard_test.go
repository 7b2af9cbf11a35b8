package workflow_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	tactivity "go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	tworkflow "go.temporal.io/sdk/workflow"

	"github.com/idemguard/idemguard/activity"
	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/internal/testing/temporaltest"
	"github.com/idemguard/idemguard/workflow"
)

// shipOrder is the guarded workflows' body: it ships the order through the
// counted Ship activity. An order with Note "hold" first waits for the
// "release" signal; one with Fail set fails after shipping.
func shipOrder(ctx tworkflow.Context, o Order) (Receipt, error) {
	if o.Note == "hold" {
		tworkflow.GetSignalChannel(ctx, "release").Receive(ctx, nil)
	}
	var r Receipt
	if err := tworkflow.ExecuteActivity(activityCtx(ctx), "Ship", o).Get(ctx, &r); err != nil {
		return r, err
	}
	if o.Fail {
		return Receipt{}, temporal.NewApplicationError("warehouse closed", "WarehouseClosed")
	}
	return r, nil
}

// shipWorker starts a worker on a fresh task queue that runs shipOrder
// guarded with g and opts, and returns the task queue.
func shipWorker(t *testing.T, c client.Client, g *guard.Guard, ships *ledger, opts ...workflow.Option) string {
	t.Helper()
	tq := temporaltest.Name(t, "tq")
	guarded := workflow.MustWrap(g, shipOrder, append([]workflow.Option{workflow.WithGuardOptions(guard.WithKeyPath("order_id"))}, opts...)...)
	temporaltest.Worker(t, c, tq, worker.Options{Interceptors: []interceptor.WorkerInterceptor{activity.Must(activity.Interceptor(nil))}}, func(r worker.Registry) {
		workflow.Register(r, shipOrder, guarded)
		r.RegisterActivityWithOptions(sideEffect(ships, "ship"), tactivity.RegisterOptions{Name: "Ship"})
	})
	return tq
}

// replay replays each history with shipOrder guarded as the workers ran it,
// failing the test on any nondeterminism.
func replay(t *testing.T, wf any, histories ...*historypb.History) error {
	t.Helper()
	r, err := worker.NewWorkflowReplayerWithOptions(worker.WorkflowReplayerOptions{
		Interceptors: []interceptor.WorkerInterceptor{activity.Must(activity.Interceptor(nil))},
	})
	if err != nil {
		t.Fatal(err)
	}
	r.RegisterWorkflowWithOptions(wf, tworkflow.RegisterOptions{Name: "shipOrder"})
	for _, h := range histories {
		if err := r.ReplayWorkflowHistory(temporaltest.Logger(), h); err != nil {
			return err
		}
	}
	return nil
}

// Acceptance 6: a second workflow (another workflow ID) with the same key
// returns the first one's stored result without running its body, and both
// histories pass the replayer.
func TestGuardedWorkflowReplaysStoredResult(t *testing.T) {
	c := temporaltest.Client(t, client.Options{})
	g := newGuard(t)
	var ships ledger
	tq := shipWorker(t, c, g, &ships)

	idA, idB := temporaltest.Name(t, "a"), temporaltest.Name(t, "b")
	var a, b Receipt
	if err := temporaltest.Run(t, c, tq, idA, time.Minute, &a, "shipOrder", Order{OrderID: "o-6", Amount: 6, Note: "web"}); err != nil {
		t.Fatalf("first workflow: %v", err)
	}
	if err := temporaltest.Run(t, c, tq, idB, time.Minute, &b, "shipOrder", Order{OrderID: "o-6", Amount: 6, Note: "phone"}); err != nil {
		t.Fatalf("second workflow: %v", err)
	}
	if a != b || ships.count("ship") != 1 {
		t.Errorf("results %+v, %+v after %d shipments; want equal results after 1", a, b, ships.count("ship"))
	}
	hA, hB := temporaltest.History(t, c, idA, ""), temporaltest.History(t, c, idB, "")
	if n := temporaltest.Count(hB, enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED); n != 0 {
		t.Errorf("the second workflow scheduled %d activities; its body ran", n)
	}
	if las := localActivities(t, hB); !slices.Equal(las, []string{"IdempotencyClaim"}) {
		t.Errorf("the second workflow ran local activities %v, want [IdempotencyClaim]", las)
	}
	if las := localActivities(t, hA); !slices.Equal(las, []string{"IdempotencyClaim", "IdempotencyComplete"}) {
		t.Errorf("the first workflow ran local activities %v, want [IdempotencyClaim IdempotencyComplete]", las)
	}

	guarded := workflow.MustWrap(g, shipOrder, workflow.WithGuardOptions(guard.WithKeyPath("order_id")))
	if err := replay(t, guarded, hA, hB); err != nil {
		t.Errorf("replaying the guarded workflows: %v", err)
	}
	// The replayer does check: the unguarded body does not match.
	if err := replay(t, shipOrder, hA); err == nil {
		t.Error("the unguarded workflow replayed the guarded history without error")
	}
}

// A workflow whose key is held by a running workflow waits for it and
// returns its result; the holder's lease, shorter than its run, is kept
// alive by extensions; with WithWait(0) a duplicate fails at once.
// The histories, with their wait slices, timers and extensions, replay.
func TestGuardedWorkflowWaitsForHolder(t *testing.T) {
	c := temporaltest.Client(t, client.Options{})
	g := newGuard(t)
	var ships ledger
	const lease = 2 * time.Second
	tq := shipWorker(t, c, g, &ships, workflow.WithGuardOptions(guard.WithLease(lease)), workflow.WithGuardOptions(adapt.WithWaitBackoff(time.Second, time.Second)))
	rejectTQ := shipWorker(t, c, g, &ships, workflow.WithGuardOptions(guard.WithWait(0)))

	idA, idB := temporaltest.Name(t, "holder"), temporaltest.Name(t, "waiter")
	runA := temporaltest.Start(t, c, client.StartWorkflowOptions{ID: idA, TaskQueue: tq}, "shipOrder", Order{OrderID: "o-w", Amount: 1, Note: "hold"})
	for deadline := time.Now().Add(30 * time.Second); temporaltest.Count(temporaltest.History(t, c, idA, ""), enumspb.EVENT_TYPE_MARKER_RECORDED) == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the holder never claimed its key")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// A workflow task timeout of 2 s gives the waiter wait slices of 1 s,
	// with a timer between them.
	runB := temporaltest.Start(t, c, client.StartWorkflowOptions{ID: idB, TaskQueue: tq, WorkflowTaskTimeout: 2 * time.Second}, "shipOrder", Order{OrderID: "o-w", Amount: 1})

	err := temporaltest.Run(t, c, rejectTQ, temporaltest.Name(t, "rejected"), time.Minute, nil, "shipOrder", Order{OrderID: "o-w", Amount: 1})
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.Type() != activity.ErrorTypeInProgress || ae.NonRetryable() {
		t.Errorf("duplicate with WithWait(0): %v, want a retryable %s", err, activity.ErrorTypeInProgress)
	}

	// Hold past two leases: without extensions the waiter would take over.
	time.Sleep(2*lease + 500*time.Millisecond)
	if n := ships.count("ship"); n != 0 {
		t.Fatalf("shipped %d times while the holder held the key", n)
	}
	ctx := t.Context()
	if err := c.SignalWorkflow(ctx, idA, "", "release", nil); err != nil {
		t.Fatal(err)
	}
	var a, b Receipt
	if err := runA.Get(ctx, &a); err != nil {
		t.Fatalf("holder: %v", err)
	}
	if err := runB.Get(ctx, &b); err != nil {
		t.Fatalf("waiter: %v", err)
	}
	if a != b || ships.count("ship") != 1 {
		t.Errorf("results %+v, %+v after %d shipments; want equal results after 1", a, b, ships.count("ship"))
	}
	hA, hB := temporaltest.History(t, c, idA, ""), temporaltest.History(t, c, idB, "")
	las := localActivities(t, hA)
	if len(las) < 4 || las[0] != "IdempotencyClaim" || las[1] != "IdempotencyExtend" || las[len(las)-1] != "IdempotencyComplete" {
		t.Errorf("the holder ran local activities %v, want claim, 2+ extensions, complete", las)
	}
	if n := temporaltest.Count(hB, enumspb.EVENT_TYPE_TIMER_FIRED); n < 2 {
		t.Errorf("the waiter slept %d times, want 2+", n)
	}
	guarded := workflow.MustWrap(g, shipOrder, workflow.WithGuardOptions(guard.WithKeyPath("order_id")), workflow.WithGuardOptions(guard.WithLease(lease)), workflow.WithGuardOptions(adapt.WithWaitBackoff(time.Second, time.Second)))
	if err := replay(t, guarded, hA, hB); err != nil {
		t.Errorf("replaying: %v", err)
	}
}

// A body that fails releases the key: the next workflow with the key runs
// the body again.
func TestGuardedWorkflowFailureReleases(t *testing.T) {
	c := temporaltest.Client(t, client.Options{})
	g := newGuard(t)
	var ships ledger
	tq := shipWorker(t, c, g, &ships)

	err := temporaltest.Run(t, c, tq, temporaltest.Name(t, "a"), time.Minute, nil, "shipOrder", Order{OrderID: "o-f", Fail: true})
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.Type() != "WarehouseClosed" {
		t.Fatalf("failing body: %v, want WarehouseClosed", err)
	}
	var r Receipt
	if err := temporaltest.Run(t, c, tq, temporaltest.Name(t, "b"), time.Minute, &r, "shipOrder", Order{OrderID: "o-f"}); err != nil {
		t.Fatalf("second workflow: %v", err)
	}
	if n := ships.count("ship"); n != 2 {
		t.Errorf("shipments = %d, want 2 (the failed body released the key)", n)
	}
	// And now the key is completed: a third replays.
	var r3 Receipt
	if err := temporaltest.Run(t, c, tq, temporaltest.Name(t, "c"), time.Minute, &r3, "shipOrder", Order{OrderID: "o-f"}); err != nil || r3 != r || ships.count("ship") != 2 {
		t.Errorf("third workflow: %+v, %v after %d shipments; want %+v after 2", r3, err, ships.count("ship"), r)
	}
}
