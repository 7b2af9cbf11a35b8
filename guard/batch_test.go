package guard_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/internal/telemetry"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/memory"
)

// bulkStore is a counting memory store that implements store.BatchGetter,
// counting GetMany calls and the keys they ask for.
type bulkStore struct {
	*countingStore
	mem *memory.Store

	getManys, keysAsked atomic.Int64

	mu          sync.Mutex
	failGetMany error // returned by GetMany while set, with the records it would return
}

func newBulk() *bulkStore {
	m := memory.New()
	return &bulkStore{countingStore: newCounting(m), mem: m}
}

func (b *bulkStore) GetMany(ctx context.Context, keys []string) (map[string]*store.Record, error) {
	b.getManys.Add(1)
	b.keysAsked.Add(int64(len(keys)))
	recs, err := b.mem.GetMany(ctx, keys)
	b.mu.Lock()
	fail := b.failGetMany
	b.mu.Unlock()
	if fail != nil {
		// Half the records, as a store that failed part-way would return.
		half := map[string]*store.Record{}
		for _, k := range keys[:len(keys)/2] {
			if r, ok := recs[k]; ok {
				half[k] = r
			}
		}
		return half, fail
	}
	return recs, err
}

func (b *bulkStore) writes() int64 {
	return b.acquires.Load() + b.completes.Load() + b.releases.Load() + b.extends.Load()
}

// effects counts calls of the batch function by item.
type effects struct {
	mu sync.Mutex
	n  map[string]int // protected by mu
}

func (e *effects) add(id string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.n == nil {
		e.n = map[string]int{}
	}
	e.n[id]++
}

func (e *effects) get(id string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n[id]
}

func (e *effects) total() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	t := 0
	for _, n := range e.n {
		t += n
	}
	return t
}

func orders(n int) []order {
	in := make([]order, n)
	for i := range in {
		in[i] = order{ID: fmt.Sprintf("o-%03d", i), Amount: i}
	}
	return in
}

// batchCharge is a batch function that counts its side effects and returns a
// charge for the order.
func batchCharge(e *effects) func(context.Context, order) (charge, error) {
	return func(_ context.Context, o order) (charge, error) {
		e.add(o.ID)
		return charge{ChargeID: "ch-" + o.ID, Amount: o.Amount}, nil
	}
}

// checkResults fails the test unless every result is the charge for its
// order, with the outcome want(i).
func checkResults(t *testing.T, in []order, res []guard.ItemResult[charge], want func(i int) guard.Outcome) {
	t.Helper()
	if len(res) != len(in) {
		t.Fatalf("%d results for %d inputs", len(res), len(in))
	}
	for i, r := range res {
		if r.Err != nil {
			t.Errorf("item %d: %v", i, r.Err)
			continue
		}
		if w := (charge{ChargeID: "ch-" + in[i].ID, Amount: in[i].Amount}); r.Value != w {
			t.Errorf("item %d = %+v, want %+v (results out of order?)", i, r.Value, w)
		}
		if w := want(i); r.Outcome != w {
			t.Errorf("item %d outcome %v, want %v", i, r.Outcome, w)
		}
	}
}

func always(o guard.Outcome) func(int) guard.Outcome { return func(int) guard.Outcome { return o } }

func TestDoBatchRunsEachItemOnceInOrder(t *testing.T) {
	s := newBulk()
	g := mustGuard(t, s, guard.WithKeyPath("id"))
	in := orders(40)
	var e effects
	res := guard.DoBatch(t.Context(), g, "charge", in, batchCharge(&e))
	checkResults(t, in, res, always(guard.OutcomeExecuted))
	if n := e.total(); n != 40 {
		t.Errorf("first batch ran %d items, want 40", n)
	}
	if a, c, gm := s.acquires.Load(), s.completes.Load(), s.getManys.Load(); a != 40 || c != 40 || gm != 1 {
		t.Errorf("first batch: %d acquires, %d completes, %d GetMany; want 40, 40, 1", a, c, gm)
	}

	// Again: everything replays from one bulk lookup, with no write.
	s.acquires.Store(0)
	s.completes.Store(0)
	s.getManys.Store(0)
	res = guard.DoBatch(t.Context(), g, "charge", in, batchCharge(&e))
	checkResults(t, in, res, always(guard.OutcomeReplayed))
	if n := e.total(); n != 40 {
		t.Errorf("the replayed batch ran items: %d side effects in all, want 40", n)
	}
	if w, gm, gets := s.writes(), s.getManys.Load(), s.gets.Load(); w != 0 || gm != 1 || gets != 0 {
		t.Errorf("replayed batch: %d writes, %d GetMany, %d Get; want 0, 1, 0", w, gm, gets)
	}
}

// Acceptance 3: items completed by earlier single calls with the same scope
// and key replay without running; the rest run.
func TestDoBatchMixedWithSingleCalls(t *testing.T) {
	s := newBulk()
	g := mustGuard(t, s, guard.WithKeyPath("id"))
	in := orders(30)
	var e effects
	done := map[int]bool{}
	for i := 0; i < len(in); i += 3 {
		o := in[i]
		if _, err := guard.Do(t.Context(), g, "charge", o, func(ctx context.Context) (charge, error) { return batchCharge(&e)(ctx, o) }); err != nil {
			t.Fatal(err)
		}
		done[i] = true
	}
	s.acquires.Store(0)
	res := guard.DoBatch(t.Context(), g, "charge", in, batchCharge(&e))
	checkResults(t, in, res, func(i int) guard.Outcome {
		if done[i] {
			return guard.OutcomeReplayed
		}
		return guard.OutcomeExecuted
	})
	for i, o := range in {
		if n := e.get(o.ID); n != 1 {
			t.Errorf("item %d ran %d times, want 1", i, n)
		}
	}
	if a, want := s.acquires.Load(), int64(len(in)-len(done)); a != want {
		t.Errorf("%d claims, want %d: only the items not done before are claimed", a, want)
	}
}

// Without a BatchGetter every item is claimed; completed ones replay
// through their claim.
func TestDoBatchFallsBackToClaims(t *testing.T) {
	_, s := newMemory() // countingStore hides the memory store's GetMany
	if _, ok := any(s).(store.BatchGetter); ok {
		t.Fatal("the test store implements BatchGetter")
	}
	g := mustGuard(t, s, guard.WithKeyPath("id"))
	in := orders(12)
	var e effects
	for _, o := range in[:4] {
		if _, err := guard.Do(t.Context(), g, "charge", o, func(ctx context.Context) (charge, error) { return batchCharge(&e)(ctx, o) }); err != nil {
			t.Fatal(err)
		}
	}
	s.acquires.Store(0)
	res := guard.DoBatch(t.Context(), g, "charge", in, batchCharge(&e))
	checkResults(t, in, res, func(i int) guard.Outcome {
		if i < 4 {
			return guard.OutcomeReplayed
		}
		return guard.OutcomeExecuted
	})
	if a := s.acquires.Load(); a != 12 {
		t.Errorf("%d claims, want 12 (one per item)", a)
	}
	if n := e.total(); n != 12 {
		t.Errorf("%d side effects, want 12", n)
	}
}

// A store whose BatchGetter declines at run time (ErrSkip) is used as one
// without it.
func TestDoBatchErrSkip(t *testing.T) {
	s := newBulk()
	s.failGetMany = store.ErrSkip
	g := mustGuard(t, s, guard.WithKeyPath("id"))
	in := orders(5)
	var e effects
	checkResults(t, in, guard.DoBatch(t.Context(), g, "charge", in, batchCharge(&e)), always(guard.OutcomeExecuted))
	checkResults(t, in, guard.DoBatch(t.Context(), g, "charge", in, batchCharge(&e)), always(guard.OutcomeReplayed))
	if a := s.acquires.Load(); a != 10 {
		t.Errorf("%d claims, want 10: ErrSkip means claim every item", a)
	}
}

func TestDoBatchDuplicates(t *testing.T) {
	s := newBulk()
	g := mustGuard(t, s, guard.WithKeyPath("id"), guard.WithPayloadValidation("amount"))
	in := []order{{"a", 1}, {"b", 2}, {"a", 1}, {"c", 3}, {"a", 1}, {"b", 99}, {"b", 2}}
	var e effects
	res := guard.DoBatch(t.Context(), g, "charge", in, batchCharge(&e))
	want := []struct {
		out guard.Outcome
		err error
	}{
		{guard.OutcomeExecuted, nil}, {guard.OutcomeExecuted, nil}, {guard.OutcomeShared, nil}, {guard.OutcomeExecuted, nil},
		{guard.OutcomeShared, nil}, {0, guard.ErrPayloadMismatch}, {guard.OutcomeShared, nil},
	}
	for i, w := range want {
		if res[i].Outcome != w.out || !errors.Is(res[i].Err, w.err) || (w.err == nil && res[i].Err != nil) {
			t.Errorf("item %d (%+v) = %v, %v; want %v, %v", i, in[i], res[i].Outcome, res[i].Err, w.out, w.err)
		}
		if w.err == nil && res[i].Value.ChargeID != "ch-"+in[i].ID {
			t.Errorf("item %d value %+v", i, res[i].Value)
		}
	}
	for _, id := range []string{"a", "b", "c"} {
		if n := e.get(id); n != 1 {
			t.Errorf("%s ran %d times, want 1", id, n)
		}
	}
	if a := s.acquires.Load(); a != 4 {
		t.Errorf("%d claims, want 4: a, b, c and b's other payload, which meets b's record", a)
	}
}

// One item's failure leaves the others' results, and releases only its
// own key.
func TestDoBatchFailureIsolated(t *testing.T) {
	s := newBulk()
	g := mustGuard(t, s, guard.WithKeyPath("id"))
	in := orders(10)
	boom := errors.New("downstream said no")
	var e effects
	fn := func(ctx context.Context, o order) (charge, error) {
		if o.Amount%4 == 1 {
			return charge{}, boom
		}
		return batchCharge(&e)(ctx, o)
	}
	res := guard.DoBatch(t.Context(), g, "charge", in, fn)
	for i, r := range res {
		if fails := i%4 == 1; fails != errors.Is(r.Err, boom) {
			t.Errorf("item %d: %v", i, r.Err)
		}
		if i%4 != 1 && (r.Outcome != guard.OutcomeExecuted || r.Value.ChargeID != "ch-"+in[i].ID) {
			t.Errorf("item %d = %+v, %v", i, r.Value, r.Outcome)
		}
	}
	if rel := s.releases.Load(); rel != 3 {
		t.Errorf("%d releases, want 3", rel)
	}
	// The retry runs only the items that failed.
	before := e.total()
	checkResults(t, in, guard.DoBatch(t.Context(), g, "charge", in, batchCharge(&e)), func(i int) guard.Outcome {
		if i%4 == 1 {
			return guard.OutcomeExecuted
		}
		return guard.OutcomeReplayed
	})
	if ran := e.total() - before; ran != 3 {
		t.Errorf("the retry ran %d items, want the 3 that failed", ran)
	}
}

func TestDoBatchStopOnError(t *testing.T) {
	s := newBulk()
	g := mustGuard(t, s, guard.WithKeyPath("id"))
	in := orders(10)
	boom := errors.New("boom")
	var e effects
	fn := func(ctx context.Context, o order) (charge, error) {
		if o.Amount == 3 {
			return charge{}, boom
		}
		return batchCharge(&e)(ctx, o)
	}
	var doneIdx []int
	res := guard.DoBatch(t.Context(), g, "charge", in, fn, guard.WithConcurrency(1), guard.WithStopOnError(),
		adapt.WithItemDone(func(i int, _ guard.Outcome, _ error) { doneIdx = append(doneIdx, i) }))
	for i, r := range res {
		switch {
		case i < 3 && (r.Err != nil || r.Outcome != guard.OutcomeExecuted):
			t.Errorf("item %d = %v, %v; want executed", i, r.Outcome, r.Err)
		case i == 3 && !errors.Is(r.Err, boom):
			t.Errorf("item 3 error %v, want boom", r.Err)
		case i > 3 && (!errors.Is(r.Err, guard.ErrBatchStopped) || r.Outcome != 0):
			t.Errorf("item %d = %v, %v; want ErrBatchStopped", i, r.Outcome, r.Err)
		}
	}
	if n := e.total(); n != 3 {
		t.Errorf("%d items ran, want 3", n)
	}
	sort.Ints(doneIdx)
	if len(doneIdx) != 10 || doneIdx[0] != 0 || doneIdx[9] != 9 {
		t.Errorf("WithItemDone saw %v, want every index once", doneIdx)
	}
}

func TestDoBatchConcurrency(t *testing.T) {
	for _, n := range []int{1, 3, adapt.DefaultConcurrency} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			g := mustGuard(t, newBulk(), guard.WithKeyPath("id"))
			var running, peak atomic.Int32
			gate := make(chan struct{})
			var once sync.Once
			fn := func(ctx context.Context, o order) (charge, error) {
				r := running.Add(1)
				defer running.Add(-1)
				for {
					p := peak.Load()
					if r <= p || peak.CompareAndSwap(p, r) {
						break
					}
				}
				if r == int32(n) {
					once.Do(func() { close(gate) })
				}
				select { // hold until n run at once, so the peak is reached
				case <-gate:
				case <-time.After(5 * time.Second):
				}
				return charge{ChargeID: o.ID}, nil
			}
			opts := []guard.BatchOption{}
			if n != adapt.DefaultConcurrency {
				opts = append(opts, guard.WithConcurrency(n))
			}
			res := guard.DoBatch(t.Context(), g, "c", orders(4*n+1), fn, opts...)
			for i, r := range res {
				if r.Err != nil {
					t.Fatalf("item %d: %v", i, r.Err)
				}
			}
			if p := peak.Load(); p != int32(n) {
				t.Errorf("peak concurrency %d, want %d", p, n)
			}
		})
	}
}

func TestDoBatchPayloadValidationOnBulkReplay(t *testing.T) {
	s := newBulk()
	g := mustGuard(t, s, guard.WithKeyPath("id"), guard.WithPayloadValidation("amount"))
	in := orders(6)
	var e effects
	checkResults(t, in, guard.DoBatch(t.Context(), g, "charge", in, batchCharge(&e)), always(guard.OutcomeExecuted))
	changed := append([]order(nil), in...)
	changed[2].Amount = 1000
	s.acquires.Store(0)
	res := guard.DoBatch(t.Context(), g, "charge", changed, batchCharge(&e))
	var mm *adapt.MismatchError
	if !errors.As(res[2].Err, &mm) || mm.Existing == nil || mm.Existing.Key == "" {
		t.Errorf("changed item: %v, want a *MismatchError with the record", res[2].Err)
	}
	for i, r := range res {
		if i != 2 && (r.Err != nil || r.Outcome != guard.OutcomeReplayed) {
			t.Errorf("item %d = %v, %v; want replayed", i, r.Outcome, r.Err)
		}
	}
	if n, a := e.total(), s.acquires.Load(); n != 6 || a != 0 {
		t.Errorf("%d side effects, %d claims; want 6, 0", n, a)
	}
}

func TestDoBatchResume(t *testing.T) {
	clock := newFakeClock()
	s := newBulk()
	g := mustGuard(t, s, guard.WithKeyPath("id"), adapt.WithClock(clock), guard.WithTTL(time.Hour))
	in := orders(10)
	var e effects
	// An earlier attempt completed items 0-5; the checkpoint says 4.
	checkResults(t, in[:6], guard.DoBatch(t.Context(), g, "charge", in[:6], batchCharge(&e)), always(guard.OutcomeExecuted))

	t.Run("replays the done items and runs the rest", func(t *testing.T) {
		before := e.total()
		res := guard.DoBatch(t.Context(), g, "charge", in, batchCharge(&e), adapt.WithResume(4))
		checkResults(t, in, res, func(i int) guard.Outcome {
			if i < 6 {
				return guard.OutcomeReplayed
			}
			return guard.OutcomeExecuted
		})
		if ran := e.total() - before; ran != 4 {
			t.Errorf("ran %d items, want 4", ran)
		}
	})

	t.Run("replays done items past their TTL, runs the others", func(t *testing.T) {
		clock.Advance(2 * time.Hour) // every record has expired
		before := e.total()
		res := guard.DoBatch(t.Context(), g, "charge", in, batchCharge(&e), adapt.WithResume(3))
		checkResults(t, in, res, func(i int) guard.Outcome {
			if i < 3 {
				return guard.OutcomeReplayed
			}
			return guard.OutcomeExecuted
		})
		if ran := e.total() - before; ran != 7 {
			t.Errorf("ran %d items, want the 7 past the resume point", ran)
		}
	})

	t.Run("never runs a done item whose record is gone", func(t *testing.T) {
		gone := []order{{"gone-1", 1}, {"gone-2", 2}, {"new", 3}}
		for _, lookup := range []bool{true, false} {
			var st store.Store = s
			if !lookup {
				st = s.countingStore
			}
			g := mustGuard(t, st, guard.WithKeyPath("id"))
			before := e.total()
			res := guard.DoBatch(t.Context(), g, fmt.Sprint("gone-", lookup), gone, batchCharge(&e), adapt.WithResume(2))
			for i := range 2 {
				if !errors.Is(res[i].Err, guard.ErrResultUnavailable) {
					t.Errorf("lookup %v: item %d = %v, %v; want ErrResultUnavailable", lookup, i, res[i].Outcome, res[i].Err)
				}
			}
			if res[2].Err != nil || res[2].Outcome != guard.OutcomeExecuted {
				t.Errorf("lookup %v: item 2 = %v, %v", lookup, res[2].Outcome, res[2].Err)
			}
			if ran := e.total() - before; ran != 1 {
				t.Errorf("lookup %v: ran %d items, want 1", lookup, ran)
			}
		}
	})
}

func TestDoBatchItemKey(t *testing.T) {
	s := newBulk()
	g := mustGuard(t, s)
	in := orders(5)
	var e effects
	res := guard.DoBatch(t.Context(), g, "charge", in, batchCharge(&e),
		guard.WithItemKey(func(o order) any { return map[string]string{"order": o.ID} }))
	checkResults(t, in, res, always(guard.OutcomeExecuted))
	// The same key through Do replays the batch's result.
	v, out, err := adapt.Execute(t.Context(), g, "charge", in[3], func(context.Context) (charge, error) {
		t.Error("Do ran an item the batch completed")
		return charge{}, nil
	}, guard.WithKey(map[string]string{"order": in[3].ID}))
	if err != nil || out != guard.OutcomeReplayed || v.ChargeID != "ch-"+in[3].ID {
		t.Errorf("Do with the item's key = %+v, %v, %v", v, out, err)
	}

	for name, opt := range map[string]guard.BatchOption{
		"wrong type": guard.WithItemKey(func(o *order) any { return o.ID }),
		"nil func":   guard.WithItemKey[order](nil),
		"WithKey":    adapt.Lift(guard.WithKey("same for all")),
		"zero":       guard.WithConcurrency(0),
		"resume":     adapt.WithResume(-1),
	} {
		res := guard.DoBatch(t.Context(), g, "charge", in[:2], batchCharge(&e), opt)
		for i, r := range res {
			if !errors.Is(r.Err, guard.ErrInvalidOption) {
				t.Errorf("%s: item %d error %v, want ErrInvalidOption", name, i, r.Err)
			}
		}
	}
	if n := e.total(); n != 5 {
		t.Errorf("%d side effects, want 5", n)
	}
}

func TestDoBatchLookupErrors(t *testing.T) {
	// Items 0-5 completed earlier; the failing lookup returns the records
	// of the first half of the keys it is asked for (items 0-3).
	in := orders(8)
	t.Run("throttled: no claims, try again later", func(t *testing.T) {
		s := newBulk()
		g := mustGuard(t, s, guard.WithKeyPath("id"))
		var e effects
		guard.DoBatch(t.Context(), g, "charge", in[:6], batchCharge(&e))
		s.acquires.Store(0)
		s.failGetMany = fmt.Errorf("dynamodb: %w", store.ErrThrottled)
		res := guard.DoBatch(t.Context(), g, "charge", in, batchCharge(&e))
		for i, r := range res {
			if i < 4 {
				if r.Err != nil || r.Outcome != guard.OutcomeReplayed {
					t.Errorf("item %d = %v, %v; want replayed", i, r.Outcome, r.Err)
				}
				continue
			}
			var se *adapt.StoreError
			if !errors.Is(r.Err, store.ErrThrottled) || !errors.Is(r.Err, guard.ErrStore) || !errors.As(r.Err, &se) || se.Op != "get_many" {
				t.Errorf("item %d error %v, want a get_many StoreError matching ErrThrottled", i, r.Err)
			}
		}
		if a, n := s.acquires.Load(), e.total(); a != 0 || n != 6 {
			t.Errorf("%d claims, %d side effects; want 0, 6", a, n)
		}
	})
	t.Run("other errors: claim the items not returned", func(t *testing.T) {
		s := newBulk()
		g := mustGuard(t, s, guard.WithKeyPath("id"))
		var e effects
		guard.DoBatch(t.Context(), g, "charge", in[:6], batchCharge(&e))
		s.acquires.Store(0)
		s.failGetMany = fmt.Errorf("one item: %w", store.ErrCorrupt)
		checkResults(t, in, guard.DoBatch(t.Context(), g, "charge", in, batchCharge(&e)), func(i int) guard.Outcome {
			if i < 6 {
				return guard.OutcomeReplayed
			}
			return guard.OutcomeExecuted
		})
		if a := s.acquires.Load(); a != 4 {
			t.Errorf("%d claims, want 4: the items the lookup did not return", a)
		}
		if n := e.total(); n != 8 {
			t.Errorf("%d side effects, want 8", n)
		}
	})
}

func TestDoBatchCache(t *testing.T) {
	s := newBulk()
	g := mustGuard(t, s, guard.WithKeyPath("id"), guard.WithCache(100, 0))
	in := orders(10)
	var e effects
	guard.DoBatch(t.Context(), g, "charge", in, batchCharge(&e))
	s.getManys.Store(0)
	s.acquires.Store(0)
	s.completes.Store(0)
	checkResults(t, in, guard.DoBatch(t.Context(), g, "charge", in, batchCharge(&e)), always(guard.OutcomeReplayed))
	if w, gm := s.writes(), s.getManys.Load(); w != 0 || gm != 0 {
		t.Errorf("cached batch: %d writes, %d GetMany; want none", w, gm)
	}
}

func TestDoBatchUnkeyedAndBadInputs(t *testing.T) {
	s := newBulk()
	g := mustGuard(t, s, guard.WithKeyPath("id"))
	in := []any{order{"x", 1}, map[string]any{"other": 1}, func() {}, order{"y", 2}}
	var ran atomic.Int32
	res := guard.DoBatch(t.Context(), g, "mixed", in, func(ctx context.Context, v any) (string, error) {
		ran.Add(1)
		return fmt.Sprintf("%T", v), nil
	})
	if res[0].Outcome != guard.OutcomeExecuted || res[3].Outcome != guard.OutcomeExecuted {
		t.Errorf("keyed items: %v, %v", res[0].Outcome, res[3].Outcome)
	}
	if res[1].Outcome != guard.OutcomeUnguarded || res[1].Err != nil {
		t.Errorf("item without a key = %v, %v; want unguarded", res[1].Outcome, res[1].Err)
	}
	if !errors.Is(res[2].Err, guard.ErrInvalidInput) {
		t.Errorf("unmarshallable item error %v, want ErrInvalidInput", res[2].Err)
	}
	if n := ran.Load(); n != 3 {
		t.Errorf("fn ran %d times, want 3", n)
	}
	res = guard.DoBatch(t.Context(), g, "mixed", in[1:2], func(ctx context.Context, v any) (string, error) { return "", nil }, guard.WithRequireKey(true))
	if !errors.Is(res[0].Err, guard.ErrKeyMissing) {
		t.Errorf("with WithRequireKey: %v, want ErrKeyMissing", res[0].Err)
	}
}

func TestDoBatchContextCancelled(t *testing.T) {
	s := newBulk()
	g := mustGuard(t, s, guard.WithKeyPath("id"))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	var e effects
	res := guard.DoBatch(ctx, g, "charge", orders(5), batchCharge(&e))
	for i, r := range res {
		if !errors.Is(r.Err, context.Canceled) {
			t.Errorf("item %d error %v, want context.Canceled", i, r.Err)
		}
	}
	if n, a := e.total(), s.acquires.Load(); n != 0 || a != 0 {
		t.Errorf("%d side effects, %d claims after cancellation", n, a)
	}
}

func TestDoBatchDisabled(t *testing.T) {
	t.Setenv(adapt.DisableEnv, "true")
	s := newBulk()
	g := mustGuard(t, s, guard.WithKeyPath("id"))
	in := orders(4)
	var e effects
	checkResults(t, in, guard.DoBatch(t.Context(), g, "charge", in, batchCharge(&e)), always(guard.OutcomeUnguarded))
	checkResults(t, in, guard.DoBatch(t.Context(), g, "charge", in, batchCharge(&e)), always(guard.OutcomeUnguarded))
	if n, calls := e.total(), s.writes()+s.getManys.Load(); n != 8 || calls != 0 {
		t.Errorf("disabled: %d side effects, %d store calls; want 8, 0", n, calls)
	}
}

func TestDoBatchPanic(t *testing.T) {
	s := newBulk()
	g := mustGuard(t, s, guard.WithKeyPath("id"))
	in := orders(6)
	func() {
		defer func() {
			pe, ok := recover().(*adapt.PanicError)
			if !ok || pe.Value != "item 2 broke" {
				t.Errorf("recovered %v, want a *PanicError with the item's panic value", pe)
			} else if !strings.Contains(string(pe.Stack), "TestDoBatchPanic") {
				t.Errorf("the PanicError's stack does not show the panicking item:\n%s", pe.Stack)
			}
		}()
		guard.DoBatch(t.Context(), g, "charge", in, func(ctx context.Context, o order) (charge, error) {
			if o.Amount == 2 {
				panic("item 2 broke")
			}
			return charge{ChargeID: o.ID}, nil
		}, guard.WithConcurrency(1))
		t.Error("DoBatch returned after a panic")
	}()
	// The panicking item's record was released: it runs again.
	var e effects
	res := guard.DoBatch(t.Context(), g, "charge", in[2:3], batchCharge(&e))
	if res[0].Err != nil || res[0].Outcome != guard.OutcomeExecuted {
		t.Errorf("after the panic, item 2 = %v, %v; want executed", res[0].Outcome, res[0].Err)
	}
}

func TestDoBatchTelemetry(t *testing.T) {
	h := newOtel()
	s := newBulk()
	g := mustGuard(t, s, append(h.opts, guard.WithKeyPath("id"), guard.WithPayloadValidation("amount"))...)
	in := orders(6)
	var e effects
	guard.DoBatch(t.Context(), g, "charge", in[:3], batchCharge(&e))
	h.reset()

	mixed := append(append([]order(nil), in...), in[4])
	mixed[1].Amount = 77 // payload mismatch
	guard.DoBatch(t.Context(), g, "charge", mixed, batchCharge(&e))
	spans := h.ended()
	batch := spanNamed(t, spans, telemetry.SpanBatch)
	for k, want := range map[attribute.Key]int64{
		telemetry.BatchItemsKey:                                     7,
		telemetry.BatchLookupKeysKey:                                6,
		telemetry.BatchLookupFoundKey:                               3,
		telemetry.BatchOutcomeKey(telemetry.OutcomeReplayed):        3, // items 0 and 2, and item 4's duplicate
		telemetry.BatchOutcomeKey(telemetry.OutcomeExecuted):        3,
		telemetry.BatchOutcomeKey(telemetry.OutcomePayloadMismatch): 1,
		telemetry.BatchOutcomeKey(telemetry.OutcomeError):           0,
		telemetry.BatchOutcomeKey(telemetry.OutcomeNotRun):          0,
		telemetry.BatchOutcomeKey(telemetry.OutcomeUnguarded):       0,
		telemetry.BatchOutcomeKey(telemetry.OutcomeInProgress):      0,
	} {
		if v, ok := attr(batch, k); !ok || v.AsInt64() != want {
			t.Errorf("%s = %v (present %v), want %d", k, v.Emit(), ok, want)
		}
	}
	wantAttr(t, batch, telemetry.ScopeKey, "charge")
	var executes int
	for _, s := range spans {
		if s.Name() != telemetry.SpanExecute {
			continue
		}
		executes++
		if s.Parent().SpanID() != batch.SpanContext().SpanID() {
			t.Errorf("an execute span's parent is %v, want the batch span", s.Parent().SpanID())
		}
	}
	if executes != 3 {
		t.Errorf("%d execute spans, want 3: one per item claimed", executes)
	}
	// The batch items counter has the outcomes of both batches, by scope
	// and store.
	items, ok := h.metrics(t)[telemetry.MetricBatchItems].(metricdata.Sum[int64])
	if !ok {
		t.Fatalf("no %s counter", telemetry.MetricBatchItems)
	}
	got := map[string]int64{}
	for _, dp := range items.DataPoints {
		o, _ := dp.Attributes.Value(telemetry.OutcomeKey)
		sc, _ := dp.Attributes.Value(telemetry.ScopeKey)
		st, _ := dp.Attributes.Value(telemetry.StoreKey)
		if sc.AsString() != "charge" || st.AsString() == "" {
			t.Errorf("batch items point with scope %q, store %q", sc.AsString(), st.AsString())
		}
		got[o.AsString()] += dp.Value
	}
	want := map[string]int64{telemetry.OutcomeExecuted: 6, telemetry.OutcomeReplayed: 3, telemetry.OutcomePayloadMismatch: 1}
	if !maps.Equal(got, want) {
		t.Errorf("batch items by outcome %v, want %v", got, want)
	}
}
