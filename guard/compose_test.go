package guard_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/memory"
	"github.com/idemguard/idemguard/telemetry"
)

// Features meet here: steps inside transactions, with payload validation,
// result filters, a rotating key secret and telemetry; the cache and
// operators; batches and filters. Each test failed on the engine before
// the change that made it pass.

// ledgerTx is a transaction over a memory store that holds the
// completions and a ledger of writes until it commits, as a database's
// would.
type ledgerTx struct {
	s           *memory.Store
	completions []*store.Record
	writes      []string
	applied     *[]string
	rolledBack  bool
}

type ledgerStore struct {
	*memory.Store
	ledger []string
	txs    atomic.Int32
}

func (s *ledgerStore) Begin(context.Context) (store.Tx[*ledgerTx], error) {
	s.txs.Add(1)
	return &ledgerTx{s: s.Store, applied: &s.ledger}, nil
}

func (t *ledgerTx) Handle() *ledgerTx { return t }

func (t *ledgerTx) Complete(ctx context.Context, rec *store.Record) error {
	old, err := t.s.Get(ctx, rec.Key)
	if err != nil || old.Token != rec.Token || old.Status != store.StatusInProgress {
		return store.ErrTokenMismatch
	}
	t.completions = append(t.completions, rec)
	return nil
}

func (t *ledgerTx) Commit(ctx context.Context) error {
	for _, rec := range t.completions {
		if err := t.s.Complete(ctx, rec); err != nil {
			return err
		}
	}
	*t.applied = append(*t.applied, t.writes...)
	return nil
}

func (t *ledgerTx) Rollback(context.Context) error { t.rolledBack = true; return nil }

// A step inside a transactional call completes inside the call's
// transaction: when the call fails after the step and rolls back, the
// step's write and its record roll back together, its claim is released,
// and the retry runs the step again and commits both. Before, the step
// completed outside the transaction: the retry replayed it and committed a
// transfer with a credit and no debit.
func TestStepInsideDoTxCompletesInTheTransaction(t *testing.T) {
	s := &ledgerStore{Store: memory.New()}
	g := mustGuard(t, s)
	var debits int
	fail := true
	transfer := func(ctx context.Context, tx *ledgerTx) (string, error) {
		_, err := guard.Step(ctx, "debit", func(context.Context) (string, error) {
			debits++
			tx.writes = append(tx.writes, "debit alice 100")
			return "debited", nil
		})
		if err != nil {
			return "", err
		}
		if fail {
			fail = false
			return "", errors.New("connection reset") // rolls back
		}
		tx.writes = append(tx.writes, "credit bob 100")
		return "moved", nil
	}
	if _, err := guard.DoTx(ctx, g, "transfer", "t-1", transfer); err == nil {
		t.Fatal("the first attempt did not fail")
	}
	if len(s.ledger) != 0 {
		t.Fatalf("ledger after the rolled-back attempt: %v", s.ledger)
	}
	v, err := guard.DoTx(ctx, g, "transfer", "t-1", transfer)
	if err != nil || v != "moved" {
		t.Fatalf("retry = %q, %v", v, err)
	}
	if want := []string{"debit alice 100", "credit bob 100"}; fmt.Sprint(s.ledger) != fmt.Sprint(want) {
		t.Errorf("ledger = %v, want %v: every write of the call once, the step's among them", s.ledger, want)
	}
	if debits != 2 {
		t.Errorf("the debit step ran %d times; want twice, once per transaction", debits)
	}
	// A replay of the whole call begins no transaction and runs nothing.
	txs := s.txs.Load()
	if v, err := guard.DoTx(ctx, g, "transfer", "t-1", transfer); err != nil || v != "moved" || s.txs.Load() != txs {
		t.Errorf("replay = %q, %v after %d new transactions", v, err, s.txs.Load()-txs)
	}
}

// A step's record carries its call's payload hash: a new request with the
// same key and another payload fails with ErrPayloadMismatch at the step,
// never getting the step's earlier result.
func TestStepChecksTheCallsPayload(t *testing.T) {
	m, _ := newMemory()
	g := mustGuard(t, m, guard.WithKeyPath("id"), guard.WithPayloadValidation("amount"))
	var charged []int
	call := func(in order) func(context.Context) (string, error) {
		return func(ctx context.Context) (string, error) {
			r, err := guard.Step(ctx, "charge", func(context.Context) (string, error) {
				charged = append(charged, in.Amount)
				return fmt.Sprint("charged ", in.Amount), nil
			})
			if err != nil {
				return "", err
			}
			if in.Amount == 100 {
				return "", errors.New("mailer down") // releases the call
			}
			return r, nil
		}
	}
	first := order{ID: "o-1", Amount: 100}
	if _, err := guard.Do(ctx, g, "checkout", first, call(first)); err == nil {
		t.Fatal("the first request did not fail")
	}
	second := order{ID: "o-1", Amount: 200}
	v, err := guard.Do(ctx, g, "checkout", second, call(second))
	if !errors.Is(err, guard.ErrPayloadMismatch) {
		t.Errorf("second request = %q, %v; want ErrPayloadMismatch", v, err)
	}
	if len(charged) != 1 {
		t.Errorf("charges %v; want the first only", charged)
	}
}

// A call whose result the filter refuses releases its steps with it: the
// next call runs them again instead of replaying the same filtered value.
func TestResultFilterReleasesSteps(t *testing.T) {
	m, _ := newMemory()
	g := mustGuard(t, m)
	var quotes int
	call := func(ctx context.Context) (int, error) {
		return guard.Step(ctx, "quote", func(context.Context) (int, error) {
			quotes++
			return quotes, nil
		})
	}
	keepEven := guard.WithResultFilter(func(v any) bool { return v.(int)%2 == 0 })
	v, out, err := adapt.Execute(ctx, g, "quote", "q-1", call, keepEven)
	if err != nil || v != 1 || out != guard.OutcomeReleased {
		t.Fatalf("first = %d, %v, %v; want 1, released", v, out, err)
	}
	v, out, err = adapt.Execute(ctx, g, "quote", "q-1", call, keepEven)
	if err != nil || v != 2 || out != guard.OutcomeExecuted {
		t.Fatalf("second = %d, %v, %v; want the step run again (2), executed", v, out, err)
	}
	if v, out, err := adapt.Execute(ctx, g, "quote", "q-1", call, keepEven); v != 2 || out != guard.OutcomeReplayed || err != nil {
		t.Errorf("third = %d, %v, %v; want the stored 2", v, out, err)
	}
}

// Rotating the key secret as documented never runs a completed step again:
// a call that failed after a step under the old secret, retried by a guard
// that claims under the new secret and looks under the old one, replays the
// step.
func TestKeySecretRotationKeepsSteps(t *testing.T) {
	m, _ := newMemory()
	old, next := []byte("old secret"), []byte("new secret")
	before := mustGuard(t, m, guard.WithKeySecret(old))
	after := mustGuard(t, m, guard.WithKeySecret(next, old))
	var charges int
	fail := true
	call := func(ctx context.Context) (string, error) {
		r, err := guard.Step(ctx, "charge", func(context.Context) (string, error) {
			charges++
			return "ch_1", nil
		})
		if err != nil {
			return "", err
		}
		if fail {
			fail = false
			return "", errors.New("mailer down")
		}
		return r, nil
	}
	if _, err := guard.Do(ctx, before, "checkout", "o-1", call); err == nil {
		t.Fatal("the first attempt did not fail")
	}
	if v, err := guard.Do(ctx, after, "checkout", "o-1", call); err != nil || v != "ch_1" {
		t.Fatalf("retry under the new secret = %q, %v", v, err)
	}
	if charges != 1 {
		t.Errorf("charged %d times across the rotation", charges)
	}
}

// During a rotation, a guard on the new secret replays what a guard on the
// old one completed (and copies it under the new key), and gives way to a
// claim the old one holds.
func TestKeySecretRotation(t *testing.T) {
	m, _ := newMemory()
	old, next := []byte("old secret"), []byte("new secret")
	oldOnly := mustGuard(t, m, guard.WithKeySecret(old))
	rotating := mustGuard(t, m, guard.WithKeySecret(next, old))
	runs := 0
	fn := func(context.Context) (int, error) { runs++; return 7, nil }
	if _, err := guard.Do(ctx, oldOnly, "job", "done", fn); err != nil {
		t.Fatal(err)
	}
	if v, out, err := adapt.Execute(ctx, rotating, "job", "done", fn); v != 7 || out != guard.OutcomeReplayed || err != nil || runs != 1 {
		t.Fatalf("rotating guard = %d, %v, %v after %d runs; want the old record replayed", v, out, err, runs)
	}
	newKey, _, _ := rotating.Key("job", "done")
	if rec, err := m.Get(ctx, newKey); err != nil || rec.Status != store.StatusCompleted {
		t.Errorf("record under the new key: %+v, %v; want the copy", rec, err)
	}

	// The old guard holds a claim: the rotating guard gives way.
	inside, release := make(chan struct{}), make(chan struct{})
	go guard.Do(ctx, oldOnly, "job", "held", func(context.Context) (int, error) {
		close(inside)
		<-release
		return 1, nil
	})
	<-inside
	if _, err := guard.Do(ctx, rotating, "job", "held", fn); !errors.Is(err, guard.ErrInProgress) {
		t.Errorf("rotating guard on a key the old one holds = %v; want ErrInProgress", err)
	}
	close(release)
	newHeld, _, _ := rotating.Key("job", "held")
	if _, err := m.Get(ctx, newHeld); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the rotating guard's claim was not released: %v", err)
	}
	if _, err := guard.New(m, guard.WithKeySecret(next, nil)); !errors.Is(err, guard.ErrInvalidOption) {
		t.Errorf("an empty previous secret = %v; want ErrInvalidOption", err)
	}
}

// Step names do not become metric labels: a step counts under its call's
// scope, its name only on its span.
func TestStepTelemetryKeepsScopesBounded(t *testing.T) {
	h := newOtel()
	m, _ := newMemory()
	g := mustGuard(t, m, h.opts...)
	call := func(ctx context.Context) (int, error) {
		for i := range 3 {
			if _, err := guard.Step(ctx, fmt.Sprint("charge-", i), func(context.Context) (int, error) { return i, nil }); err != nil {
				return 0, err
			}
		}
		return 3, nil
	}
	if _, err := guard.Do(ctx, g, "batch", "b-1", call); err != nil {
		t.Fatal(err)
	}
	sum := h.metrics(t)[telemetry.MetricCalls].(metricdata.Sum[int64])
	for _, dp := range sum.DataPoints {
		if s, _ := dp.Attributes.Value(telemetry.ScopeKey); s.AsString() != "batch" {
			t.Errorf("a call was counted under scope %q", s.AsString())
		}
	}
	if n := callCount(t, h, "batch", telemetry.OutcomeExecuted); n != 4 {
		t.Errorf("%d executed calls under the call's scope; want 4 (the call and its 3 steps)", n)
	}
	var steps []string
	for _, s := range h.ended() {
		if v, ok := attr(s, telemetry.StepKey); ok {
			steps = append(steps, v.AsString())
		}
	}
	if fmt.Sprint(steps) != "[charge-0 charge-1 charge-2]" {
		t.Errorf("step spans name %v", steps)
	}
}

// A waiter that takes the key over and runs the function is labelled
// executed in idemguard.lock.wait, not replayed.
func TestLockWaitLabelsWhatHappened(t *testing.T) {
	h := newOtel()
	m, cs := newMemory()
	clock := newFakeClock()
	holder := mustGuard(t, m, adapt.WithClock(clock), guard.WithLease(2*time.Second))
	inside, release := make(chan struct{}), make(chan struct{})
	go guard.Do(ctx, holder, "job", "k", func(ctx context.Context) (int, error) {
		close(inside)
		<-release
		return 0, errors.New("gave up") // releases the key
	})
	<-inside
	waiter := mustGuard(t, cs, append(h.opts, adapt.WithClock(clock), guard.WithWait(time.Minute), adapt.WithWaitBackoff(time.Millisecond, time.Millisecond))...)
	done := make(chan error, 1)
	var out guard.Outcome
	go func() {
		var err error
		_, out, err = adapt.Execute(ctx, waiter, "job", "k", func(context.Context) (int, error) { return 1, nil })
		done <- err
	}()
	waitFor(t, "the waiter to find the key held", func() bool { return cs.acquires.Load() >= 1 })
	close(release)
	var err error
	waitFor(t, "the waiter to finish", func() bool {
		clock.Advance(time.Millisecond)
		select {
		case err = <-done:
			return true
		default:
			return false
		}
	})
	if err != nil || out != guard.OutcomeExecuted {
		t.Fatalf("waiter = %v, %v; want it to run the function", out, err)
	}
	hist, _ := h.metrics(t)[telemetry.MetricLockWait].(metricdata.Histogram[float64])
	var labels []string
	for _, dp := range hist.DataPoints {
		o, _ := dp.Attributes.Value(telemetry.OutcomeKey)
		labels = append(labels, o.AsString())
	}
	if fmt.Sprint(labels) != "[executed]" {
		t.Errorf("lock.wait outcomes %v; want [executed]", labels)
	}
}

// The local cache replays a record an operator deleted for at most its
// age; then the next call runs again.
func TestCacheAgeBoundsDeletedRecords(t *testing.T) {
	m, _ := newMemory()
	clock := newFakeClock()
	g := mustGuard(t, m, adapt.WithClock(clock), guard.WithCache(16, time.Minute), guard.WithTTL(time.Hour))
	runs := 0
	fn := func(context.Context) (int, error) { runs++; return runs, nil }
	if _, err := guard.Do(ctx, g, "job", "k", fn); err != nil {
		t.Fatal(err)
	}
	key, _, _ := g.Key("job", "k")
	if err := m.Delete(ctx, key); err != nil { // an operator's release --force
		t.Fatal(err)
	}
	if v, out, _ := adapt.Execute(ctx, g, "job", "k", fn); v != 1 || out != guard.OutcomeReplayed {
		t.Fatalf("within the cache age = %d, %v; want the cached replay", v, out)
	}
	clock.Advance(time.Minute)
	if v, out, _ := adapt.Execute(ctx, g, "job", "k", fn); v != 2 || out != guard.OutcomeExecuted {
		t.Errorf("after the cache age = %d, %v; want the function to run again", v, out)
	}
}

// A batch item whose result the filter refused is not done: it is
// reported as released, so a caller that checkpoints done items (a Temporal
// heartbeat) does not resume past it.
func TestBatchFilteredItemIsNotDone(t *testing.T) {
	m, _ := newMemory()
	g := mustGuard(t, m)
	var outcomes []guard.Outcome
	res := guard.DoBatch(ctx, g, "send", []string{"a", "b"}, func(_ context.Context, in string) (string, error) { return in, nil },
		guard.WithResultFilter(func(v any) bool { return v != "a" }),
		guard.WithConcurrency(1),
		adapt.WithItemDone(func(_ int, out guard.Outcome, _ error) { outcomes = append(outcomes, out) }))
	if res[0].Outcome != guard.OutcomeReleased || res[1].Outcome != guard.OutcomeExecuted {
		t.Errorf("outcomes %v, %v; want released, executed", res[0].Outcome, res[1].Outcome)
	}
	if fmt.Sprint(outcomes) != "[released executed]" {
		t.Errorf("WithItemDone saw %v", outcomes)
	}
}

// A caller (a message consumer deciding to ack or nack) tells a released
// error from a recorded definite one by the outcome.
func TestOutcomeOfErrors(t *testing.T) {
	m, _ := newMemory()
	g := mustGuard(t, m)
	_, out, err := adapt.Execute(ctx, g, "job", "transient", func(context.Context) (int, error) { return 0, errors.New("timeout") })
	if err == nil || out != guard.OutcomeReleased {
		t.Errorf("a released error: %v, %v; want OutcomeReleased", out, err)
	}
	_, out, err = adapt.Execute(ctx, g, "job", "definite", func(context.Context) (int, error) { return 0, guard.Definite(errors.New("declined")) })
	if err == nil || out != guard.OutcomeExecuted {
		t.Errorf("a recorded definite error: %v, %v; want OutcomeExecuted", out, err)
	}
	_, out, err = adapt.Execute(ctx, g, "job", "definite", func(context.Context) (int, error) { return 1, nil })
	if err == nil || out != guard.OutcomeReplayed {
		t.Errorf("its replay: %v, %v; want OutcomeReplayed", out, err)
	}
}
