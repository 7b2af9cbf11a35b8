package activity_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	historypb "go.temporal.io/api/history/v1"
	tactivity "go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"

	"github.com/idemguard/idemguard/activity"
	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/temporaltest"
)

// completedPayloads returns the result payloads of every completed
// activity in h.
func completedPayloads(h *historypb.History) []*commonpb.Payload {
	var out []*commonpb.Payload
	for _, e := range h.Events {
		if a := e.GetActivityTaskCompletedEventAttributes(); a != nil {
			out = append(out, a.GetResult().GetPayloads()...)
		}
	}
	return out
}

// The client's payload codec applies to what a guarded activity sends to
// the history, whether it ran or replayed, as it applies to the same
// activity unguarded, although the interceptor was given no data
// converter.
func TestInterceptorKeepsClientCodecInHistory(t *testing.T) {
	c := temporaltest.Client(t, client.Options{DataConverter: temporaltest.XORDataConverter()})
	g := newGuard(t)
	var effects ledger
	charge := func(ctx context.Context, o Order) (Receipt, error) {
		effects.add(o.OrderID)
		return newReceipt(ctx, o), nil
	}
	tq := temporaltest.Name(t, "tq")
	temporaltest.Worker(t, c, tq, worker.Options{Interceptors: []interceptor.WorkerInterceptor{
		activity.NewInterceptor(g, activity.Policy{Activity: "Charge", Options: []activity.Option{activity.WithGuardOptions(guard.WithKeyPath("order_id"))}}),
	}}, func(r worker.Registry) {
		r.RegisterWorkflow(chargeWorkflow)
		r.RegisterActivityWithOptions(charge, tactivity.RegisterOptions{Name: "Charge"})
		r.RegisterActivityWithOptions(charge, tactivity.RegisterOptions{Name: "Unguarded"})
	})
	var results [3]Receipt
	for i, p := range []chargeParams{
		{Order: Order{OrderID: "o-codec", Amount: 3}},                        // runs
		{Order: Order{OrderID: "o-codec", Amount: 3, Note: "duplicate"}},     // replays
		{Order: Order{OrderID: "o-plain", Amount: 3}, Activity: "Unguarded"}, // the control
	} {
		id := temporaltest.Name(t, "wf")
		if err := temporaltest.Run(t, c, tq, id, time.Minute, &results[i], chargeWorkflow, p); err != nil {
			t.Fatalf("workflow %d: %v", i, err)
		}
		ps := completedPayloads(temporaltest.History(t, c, id, ""))
		if len(ps) != 1 {
			t.Fatalf("workflow %d: %d result payloads in the history, want 1", i, len(ps))
		}
		if enc := string(ps[0].GetMetadata()[converter.MetadataEncoding]); enc != temporaltest.XOREncoding {
			t.Errorf("workflow %d (%s): the history's result payload has encoding %q, want the client codec's %q",
				i, []string{"ran", "replayed", "unguarded"}[i], enc, temporaltest.XOREncoding)
		}
	}
	if results[0] != results[1] || effects.count("o-codec") != 1 {
		t.Errorf("the duplicate got %+v after %d charges, want the first result %+v after 1", results[1], effects.count("o-codec"), results[0])
	}
}

// A guarded activity that calls another guarded activity's function
// directly does not claim its own key a second time: the inner call is
// guarded as a call of its own (its function's name as scope, its own
// input as key) and the outer activity completes, whether the outer key
// was stamped by the workflow, taken from the execution or from the input.
func TestNestedGuardedCall(t *testing.T) {
	g := newGuard(t)
	var outer ledger
	cards := &cardCharger{}
	chargeCard := activity.Wrap(g, cards.ChargeCard, activity.WithGuardOptions(guard.WithKeyPath("order_id")))
	stamped, err := activity.EncodeKeyHeader("order-7/checkout")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		opts  []activity.Option
		setup func(*testsuite.TestActivityEnvironment)
	}{
		{"input key", []activity.Option{activity.WithGuardOptions(guard.WithKeyPath("order_id"))}, nil},
		{"execution scope", []activity.Option{activity.WithExecutionScope()}, nil},
		{"stamped key", nil, func(env *testsuite.TestActivityEnvironment) {
			env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{activity.NewInterceptor(g)}})
			env.SetHeader(&commonpb.Header{Fields: map[string]*commonpb.Payload{activity.KeyHeader: stamped}})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := "o-" + tc.name
			checkout := activity.Wrap(g, func(ctx context.Context, o Order) (Receipt, error) {
				outer.add(id)
				r, err := chargeCard(ctx, o)
				if err != nil {
					return Receipt{}, err
				}
				again, err := chargeCard(ctx, o) // the same inner call replays
				if err != nil || again != r {
					return Receipt{}, errors.Join(errors.New("the second inner call did not replay the first"), err)
				}
				return r, nil
			}, tc.opts...)
			o := Order{OrderID: id, Amount: 5}
			got, err := runActivity(t, tc.setup, checkout, o)
			if err != nil {
				t.Fatalf("outer activity: %v", err)
			}
			if cards.charges.count(id) != 1 || outer.count(id) != 1 {
				t.Errorf("inner ran %d times, outer %d; want 1 and 1", cards.charges.count(id), outer.count(id))
			}
			// The inner call's record is its own: calling the inner
			// function's activity directly with the same order replays it.
			direct, err := runActivityAs(t, "ChargeCard", nil, chargeCard, o)
			if err != nil || direct != got {
				t.Errorf("the inner activity run directly: %+v, %v; want the nested call's %+v", direct, err, got)
			}
		})
	}
}

// cardCharger's ChargeCard is an activity that other activities also call
// directly.
type cardCharger struct{ charges ledger }

func (c *cardCharger) ChargeCard(ctx context.Context, o Order) (Receipt, error) {
	c.charges.add(o.OrderID)
	return newReceipt(ctx, o), nil
}

// runActivityAs runs fn once as the activity type name in a test
// activity environment prepared by setup.
func runActivityAs(t *testing.T, name string, setup func(*testsuite.TestActivityEnvironment), fn any, args ...any) (Receipt, error) {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	s.SetLogger(temporaltest.Logger())
	env := s.NewTestActivityEnvironment()
	if setup != nil {
		setup(env)
	}
	env.RegisterActivityWithOptions(fn, tactivity.RegisterOptions{Name: name})
	v, err := env.ExecuteActivity(name, args...)
	var r Receipt
	if err == nil && v != nil && v.HasValue() {
		if derr := v.Get(&r); derr != nil {
			t.Fatalf("decoding the result: %v", derr)
		}
	}
	return r, err
}

// A batch item whose result the result filter refuses is not done: its
// record was released, so the heartbeat progress does not count it, and
// Temporal's retry runs it again instead of failing it for good with
// IdempotencyResultUnavailable.
func TestBatchFilteredItemRunsAgainOnRetry(t *testing.T) {
	c := temporaltest.Client(t, client.Options{})
	g := newGuard(t)
	var l sends
	pending := func(v any) bool { // inv-001's first answer is "pending": not kept
		s, ok := v.(Sent)
		return !ok || s.ID != "inv-001" || s.Attempt != 1
	}
	var mu sync.Mutex
	resumedAt := map[int32]int{} // protected by mu
	sendInvoices := func(ctx context.Context, invs []Invoice) ([]Sent, error) {
		mu.Lock()
		resumedAt[tactivity.GetInfo(ctx).Attempt] = progressDone(ctx)
		mu.Unlock()
		return activity.DoBatch(ctx, g, invs, sender(&l, "inv-002"),
			activity.WithGuardOptions(guard.WithKeyPath("id")),
			activity.WithGuardOptions(guard.WithResultFilter(pending)),
			activity.WithBatchOptions(guard.WithConcurrency(1)))
	}
	tq := temporaltest.Name(t, "tq")
	temporaltest.Worker(t, c, tq, worker.Options{}, func(r worker.Registry) {
		r.RegisterWorkflow(batchWorkflow)
		r.RegisterActivityWithOptions(sendInvoices, tactivity.RegisterOptions{Name: "SendInvoices"})
	})
	var got []Sent
	if err := temporaltest.Run(t, c, tq, temporaltest.Name(t, "wf"), time.Minute, &got, batchWorkflow,
		batchParams{Invoices: invoices(3), MaxAttempts: 3}); err != nil {
		t.Fatalf("workflow failed: %v", err)
	}
	if len(got) != 3 || got[0].ID != "inv-001" || got[0].Attempt != 2 {
		t.Errorf("results %+v, want inv-001 sent again on attempt 2", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if resumedAt[2] > 0 {
		t.Errorf("attempt 2 resumed past %d items, want 0: the first item's result was filtered", resumedAt[2])
	}
	if s := l.get("inv-001"); !slices.Equal(s, []int32{1, 2}) {
		t.Errorf("inv-001 sent in attempts %v, want [1 2]", s)
	}
}
