package workflow_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	tactivity "go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	tworkflow "go.temporal.io/sdk/workflow"
	"google.golang.org/protobuf/proto"

	"github.com/idemguard/idemguard/activity"
	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/internal/testing/temporaltest"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/memory"
	"github.com/idemguard/idemguard/workflow"
)

// Defaults given to guard.New reach the workflow guard, over its own: a
// lease of 2 s (not an hour) that the holder extends, a wait budget of
// 1.5 s after which a duplicate fails with IdempotencyInProgress (rather
// than wait for as long as the holder holds the key), a TTL of 48 h on the
// extended and the completed record (not the guard's hour); and
// guard.WithWait(0), given to guard.New, makes a duplicate fail at once.
// WithGuardOptions wins over guard.New: a lease of 3 s.
func TestGuardDefaultsReachWorkflow(t *testing.T) {
	c := temporaltest.Client(t, client.Options{})
	s := memory.New()
	const ttl = 48 * time.Hour
	g, err := guard.New(s, guard.WithTTL(ttl), guard.WithLease(2*time.Second), guard.WithWait(1500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	rejecting, err := guard.New(s, guard.WithWait(0))
	if err != nil {
		t.Fatal(err)
	}
	var ships ledger
	tq := shipWorker(t, c, g, &ships)
	rejectTQ := shipWorker(t, c, rejecting, &ships)
	overTQ := shipWorker(t, c, g, &ships, workflow.WithGuardOptions(guard.WithLease(3*time.Second)))
	ctx := t.Context()

	o := Order{OrderID: "o-defaults", Amount: 1, Note: "hold"}
	key, _, err := g.Key("shipOrder", o, guard.WithKeyPath("order_id"))
	if err != nil {
		t.Fatal(err)
	}
	idA := temporaltest.Name(t, "holder")
	runA := temporaltest.Start(t, c, client.StartWorkflowOptions{ID: idA, TaskQueue: tq}, "shipOrder", o)
	for deadline := time.Now().Add(30 * time.Second); len(localActivities(t, temporaltest.History(t, c, idA, ""))) < 2; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the holder never extended its claim")
		}
	}
	rec, err := s.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if lease := time.Until(rec.LeaseExpiresAt); lease > 2*time.Second || lease < time.Second {
		t.Errorf("the extended lease ends in %v, want within guard.New's 2 s", lease)
	}
	if life := rec.ExpiresAt.Sub(rec.LeaseExpiresAt); life < ttl-time.Minute {
		t.Errorf("the extended record lives %v past its lease, want guard.New's TTL %v", life, ttl)
	}

	idB := temporaltest.Name(t, "waiter")
	err = temporaltest.Run(t, c, tq, idB, time.Minute, nil, "shipOrder", Order{OrderID: "o-defaults", Amount: 1})
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.Type() != activity.ErrorTypeInProgress {
		t.Errorf("duplicate with a wait budget: %v, want %s", err, activity.ErrorTypeInProgress)
	}
	// It waited its budget (in its claim's wait slice) before giving up.
	if hB := temporaltest.History(t, c, idB, ""); len(hB.Events) < 2 || hB.Events[len(hB.Events)-1].GetEventTime().AsTime().Sub(hB.Events[0].GetEventTime().AsTime()) < 1500*time.Millisecond {
		t.Errorf("the duplicate gave up before its wait budget of 1.5 s")
	}

	idC := temporaltest.Name(t, "rejected")
	err = temporaltest.Run(t, c, rejectTQ, idC, time.Minute, nil, "shipOrder", Order{OrderID: "o-defaults", Amount: 1})
	if !errors.As(err, &ae) || ae.Type() != activity.ErrorTypeInProgress || ae.NonRetryable() {
		t.Errorf("duplicate under guard.WithWait(0): %v, want a retryable %s", err, activity.ErrorTypeInProgress)
	}
	if n := temporaltest.Count(temporaltest.History(t, c, idC, ""), enumspb.EVENT_TYPE_TIMER_STARTED); n != 0 {
		t.Errorf("the rejected duplicate slept %d times, want 0", n)
	}

	if err := c.SignalWorkflow(ctx, idA, "", "release", nil); err != nil {
		t.Fatal(err)
	}
	if err := runA.Get(ctx, nil); err != nil {
		t.Fatalf("holder: %v", err)
	}
	if rec, err = s.Get(ctx, key); err != nil {
		t.Fatal(err)
	}
	if life := time.Until(rec.ExpiresAt); life < ttl-time.Minute {
		t.Errorf("the completed record lives %v more, want guard.New's TTL %v", life, ttl)
	}

	// WithGuardOptions wins over guard.New.
	o2 := Order{OrderID: "o-override", Amount: 1, Note: "hold"}
	key2, _, err := g.Key("shipOrder", o2, guard.WithKeyPath("order_id"))
	if err != nil {
		t.Fatal(err)
	}
	idD := temporaltest.Name(t, "override")
	runD := temporaltest.Start(t, c, client.StartWorkflowOptions{ID: idD, TaskQueue: overTQ}, "shipOrder", o2)
	for deadline := time.Now().Add(30 * time.Second); len(localActivities(t, temporaltest.History(t, c, idD, ""))) < 1; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the workflow never claimed its key")
		}
	}
	if rec, err = s.Get(ctx, key2); err != nil {
		t.Fatal(err)
	}
	if lease := time.Until(rec.LeaseExpiresAt); lease <= 2*time.Second || lease > 3*time.Second {
		t.Errorf("the claim's lease ends in %v, want WithGuardOptions' 3 s", lease)
	}
	if err := c.SignalWorkflow(ctx, idD, "", "release", nil); err != nil {
		t.Fatal(err)
	}
	if err := runD.Get(ctx, nil); err != nil {
		t.Fatalf("override: %v", err)
	}
}

// WithDataConverter: a guarded workflow's stored result is encoded by the
// data converter given, so that its payload codec applies to the stored
// record (the payload has the codec's encoding and none of the result's
// plaintext), and a second workflow with the key decodes it back to the
// first one's result. The control, without the option, stores the
// plaintext, which shows the check can fail.
func TestDataConverterEncodesStoredResult(t *testing.T) {
	dc := temporaltest.XORDataConverter()
	c := temporaltest.Client(t, client.Options{DataConverter: dc})
	for _, tc := range []struct {
		name    string
		opts    []workflow.Option
		encoded bool
	}{
		{"codec", []workflow.Option{workflow.WithDataConverter(dc)}, true},
		{"control without the option", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := memory.New()
			g, err := guard.New(s)
			if err != nil {
				t.Fatal(err)
			}
			var ships ledger
			tq := shipWorker(t, c, g, &ships, tc.opts...)
			o := Order{OrderID: "o-dc", Amount: 12, Note: "web"}
			var first Receipt
			if err := temporaltest.Run(t, c, tq, temporaltest.Name(t, "a"), time.Minute, &first, "shipOrder", o); err != nil {
				t.Fatalf("first workflow: %v", err)
			}

			key, _, err := g.Key("shipOrder", o, guard.WithKeyPath("order_id"))
			if err != nil {
				t.Fatal(err)
			}
			rec, err := s.Get(t.Context(), key)
			if err != nil {
				t.Fatalf("the stored record: %v", err)
			}
			var p commonpb.Payloads
			if err := proto.Unmarshal(rec.Result, &p); err != nil || len(p.Payloads) != 1 {
				t.Fatalf("stored result is not one Temporal payload: %v", err)
			}
			enc := string(p.Payloads[0].GetMetadata()[converter.MetadataEncoding])
			if (enc == temporaltest.XOREncoding) != tc.encoded {
				t.Errorf("stored payload encoding %q; want the codec's: %v", enc, tc.encoded)
			}
			if plain := bytes.Contains(rec.Result, []byte(first.ChargeID)); plain == tc.encoded {
				t.Errorf("stored result holds the plaintext charge ID: %v, want %v", plain, !tc.encoded)
			}
			var stored Receipt
			if err := (activity.PayloadCodec{DataConverter: dc}).Unmarshal(rec.Result, &stored); err != nil || stored != first {
				t.Errorf("stored result decodes to %+v (%v), want %+v", stored, err, first)
			}

			o.Note = "phone"
			var second Receipt
			if err := temporaltest.Run(t, c, tq, temporaltest.Name(t, "b"), time.Minute, &second, "shipOrder", o); err != nil {
				t.Fatalf("second workflow: %v", err)
			}
			if second != first || ships.count("ship") != 1 {
				t.Errorf("second workflow: %+v after %d shipments, want %+v after 1", second, ships.count("ship"), first)
			}
		})
	}
}

// refusing is a store whose claims fail, as a store that is down does. It
// notes the local activity attempt of each claim and the time its context
// had left.
type refusing struct {
	store.Store
	mu       sync.Mutex
	attempts []int32         // protected by mu
	budgets  []time.Duration // protected by mu
}

func (r *refusing) Acquire(ctx context.Context, _ *store.Record, _ time.Time) (*store.Record, error) {
	var attempt int32
	if tactivity.IsActivity(ctx) {
		attempt = tactivity.GetInfo(ctx).Attempt
	}
	var budget time.Duration
	if dl, ok := ctx.Deadline(); ok {
		budget = time.Until(dl)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.attempts = append(r.attempts, attempt)
	r.budgets = append(r.budgets, budget)
	return nil, errors.New("connection refused")
}

// WithLocalActivityOptions sets the timeout and retry policy of the local
// activities that claim the key: with a 2 s start-to-close timeout and 3
// attempts, a claim the store refuses is tried 3 times, each with 2 s,
// and the workflow then fails with the store error, well before the
// default policy (30 s per attempt, retried for 10 minutes) would give up.
func TestLocalActivityOptions(t *testing.T) {
	c := temporaltest.Client(t, client.Options{})
	st := &refusing{Store: memory.New()}
	g, err := guard.New(st, guard.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	var ships ledger
	tq := shipWorker(t, c, g, &ships, workflow.WithLocalActivityOptions(tworkflow.LocalActivityOptions{
		StartToCloseTimeout: 2 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: 50 * time.Millisecond, BackoffCoefficient: 1, MaximumAttempts: 3},
	}))
	err = temporaltest.Run(t, c, tq, temporaltest.Name(t, "wf"), 15*time.Second, nil, "shipOrder", Order{OrderID: "o-la", Amount: 1})
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.Type() != activity.ErrorTypeStore {
		t.Errorf("workflow error %v, want the claim's %s", err, activity.ErrorTypeStore)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if !slices.Equal(st.attempts, []int32{1, 2, 3}) {
		t.Errorf("the claim ran attempts %v, want [1 2 3]", st.attempts)
	}
	for i, b := range st.budgets {
		if b <= time.Second || b > 2*time.Second {
			t.Errorf("attempt %d had %v left, want the 2 s start-to-close timeout", i+1, b)
		}
	}
	if n := ships.count("ship"); n != 0 {
		t.Errorf("shipped %d times without a claim", n)
	}
}

// A TTL given with WithGuardOptions is the record's on every step of the
// claim: while the body runs (the claim's extensions) and once it
// completed, not the guard's default of an hour.
func TestGuardedWorkflowTTLOnEveryStep(t *testing.T) {
	c := temporaltest.Client(t, client.Options{})
	s := memory.New()
	g, err := guard.New(s)
	if err != nil {
		t.Fatal(err)
	}
	const ttl = 48 * time.Hour
	var ships ledger
	tq := shipWorker(t, c, g, &ships, workflow.WithGuardOptions(guard.WithTTL(ttl)), workflow.WithGuardOptions(guard.WithLease(2*time.Second)))
	o := Order{OrderID: "o-ttl", Amount: 1, Note: "hold"}
	key, _, err := g.Key("shipOrder", o, guard.WithKeyPath("order_id"))
	if err != nil {
		t.Fatal(err)
	}
	id := temporaltest.Name(t, "wf")
	run := temporaltest.Start(t, c, client.StartWorkflowOptions{ID: id, TaskQueue: tq}, "shipOrder", o)
	ctx := t.Context()
	// Wait for an extension: claim, extend.
	for deadline := time.Now().Add(30 * time.Second); len(localActivities(t, temporaltest.History(t, c, id, ""))) < 2; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the holder never extended its claim")
		}
	}
	rec, err := s.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if life := rec.ExpiresAt.Sub(rec.LeaseExpiresAt); life < ttl-time.Minute {
		t.Errorf("after an extension the record lives %v past its lease end, want the TTL %v", life, ttl)
	}
	if err := c.SignalWorkflow(ctx, id, "", "release", nil); err != nil {
		t.Fatal(err)
	}
	if err := run.Get(ctx, nil); err != nil {
		t.Fatal(err)
	}
	rec, err = s.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if life := time.Until(rec.ExpiresAt); life < ttl-time.Minute {
		t.Errorf("the completed record lives %v more, want the TTL %v", life, ttl)
	}
}

// The result filter, definite errors, outcome hook and codec given with
// WithGuardOptions take effect when the workflow's outcome is recorded and
// when a duplicate replays it: a refused result is not stored, so the next
// workflow runs the body again; a definite error is stored and replayed
// with its type, without running the body; the hook sees the recorded and
// the replayed outcome; the codec is the one the record is written with.
func TestGuardOptionsOnEveryStep(t *testing.T) {
	c := temporaltest.Client(t, client.Options{})
	s := memory.New()
	g, err := guard.New(s)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var hooked []guard.Outcome // protected by mu
	var ships ledger
	tq := shipWorker(t, c, g, &ships, workflow.WithGuardOptions(
		guard.WithResultFilter(func(v any) bool { r, ok := v.(Receipt); return !ok || r.Amount != 0 }),
		guard.WithDefiniteErrors(func(err error) bool {
			var ae *temporal.ApplicationError
			return errors.As(err, &ae) && ae.Type() == "WarehouseClosed"
		}),
		guard.WithOutcomeHook(func(_ context.Context, _ string, _ *store.Record, o guard.Outcome) {
			mu.Lock()
			hooked = append(hooked, o)
			mu.Unlock()
		}),
		guard.WithCodec(adapt.JSON),
	))
	run := func(o Order) (Receipt, error) {
		var r Receipt
		err := temporaltest.Run(t, c, tq, temporaltest.Name(t, "wf"), time.Minute, &r, "shipOrder", o)
		return r, err
	}

	// Filtered: an amount of 0 is not kept, so the duplicate runs again.
	if _, err := run(Order{OrderID: "o-zero"}); err != nil {
		t.Fatal(err)
	}
	if _, err := run(Order{OrderID: "o-zero"}); err != nil || ships.count("ship") != 2 {
		t.Errorf("refused result: %v after %d shipments, want a second run", err, ships.count("ship"))
	}

	// Definite: stored and replayed with its type, without a second run.
	for i := range 2 {
		_, err := run(Order{OrderID: "o-closed", Amount: 3, Fail: true})
		var ae *temporal.ApplicationError
		if !errors.As(err, &ae) || ae.Type() != "WarehouseClosed" {
			t.Errorf("definite error, run %d: %v, want WarehouseClosed", i+1, err)
		}
	}
	if n := ships.count("ship"); n != 3 {
		t.Errorf("%d shipments, want 3: the definite error's duplicate did not run", n)
	}

	// The codec and the hook.
	mu.Lock()
	hooked = nil
	mu.Unlock()
	o := Order{OrderID: "o-json", Amount: 5}
	first, err := run(o)
	if err != nil {
		t.Fatal(err)
	}
	second, err := run(o)
	if err != nil || second != first {
		t.Errorf("duplicate: %+v, %v; want %+v", second, err, first)
	}
	key, _, err := g.Key("shipOrder", o, guard.WithKeyPath("order_id"))
	if err != nil {
		t.Fatal(err)
	}
	rec, err := s.Get(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	var stored Receipt
	if err := json.Unmarshal(rec.Result, &stored); err != nil || stored != first {
		t.Errorf("stored result %q is not the JSON of %+v: %v", rec.Result, first, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(hooked, []guard.Outcome{guard.OutcomeExecuted, guard.OutcomeReplayed}) {
		t.Errorf("the outcome hook saw %v, want [executed replayed]", hooked)
	}
}

// guard.WithKey and adapt.WithClaimToken name one call: given to every run
// of a workflow they would give every run one key, or one claimant. Wrap
// refuses them, as it refuses any invalid option, by panicking.
func TestWrapRefusesOneCallOptions(t *testing.T) {
	g, err := guard.New(memory.New())
	if err != nil {
		t.Fatal(err)
	}
	wf := func(ctx tworkflow.Context, in string) (string, error) { return in, nil }
	for name, opt := range map[string]guard.CallOption{
		"an explicit key": guard.WithKey("k"),
		"a claim token":   adapt.WithClaimToken("t"),
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Wrap with %s did not panic", name)
				}
			}()
			workflow.MustWrap(g, wf, workflow.WithGuardOptions(opt))
		}()
	}
}
