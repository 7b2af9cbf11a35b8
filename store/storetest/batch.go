package storetest

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/idemguard/idemguard/store"
)

// runBatchGetter runs the [store.BatchGetter] cases if the stores newStore
// makes implement it, and says so either way.
func runBatchGetter(t *testing.T, newStore MakeStore, cfg config) {
	t.Run("BatchGetter", func(t *testing.T) {
		probe := newStore(t)
		bg, ok := probe.(store.BatchGetter)
		if !ok {
			t.Skipf("%T does not implement store.BatchGetter: batches fall back to one claim per item; GetMany cases not run", probe)
		}
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		if _, err := bg.GetMany(ctx, []string{"scope#probe"}); errors.Is(err, store.ErrSkip) {
			t.Skipf("%T implements store.BatchGetter but GetMany returned store.ErrSkip: batch reads unavailable at run time; GetMany cases not run", probe)
		}
		t.Logf("%T implements store.BatchGetter: running the GetMany cases", probe)
		runCases(t, newStore, []optionalCase[store.BatchGetter]{
			{"Empty", testGetManyEmpty},
			{"AsStored", testGetManyAsStored},
			{"ManyKeys", testGetManyManyKeys},
			{"LargeRecords", func(t *testing.T, h *harness, bg store.BatchGetter) { testGetManyLarge(t, h, bg, cfg.tooLarge) }},
			{"Consistent", testGetManyConsistent},
			{"ContextCancelled", testGetManyCancelled},
			{"CallerOwnsRecords", testGetManyOwned},
		})
	})
}

// optionalCase is a test of an optional interface I of package store.
type optionalCase[I any] struct {
	name string
	fn   func(t *testing.T, h *harness, i I)
}

// runCases runs each case as a subtest on a fresh store, which must
// implement I.
func runCases[I any](t *testing.T, newStore MakeStore, cases []optionalCase[I]) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			tc.fn(t, newHarness(t, s), s.(I))
		})
	}
}

// getMany calls GetMany and fails the test on an error.
func (h *harness) getMany(t *testing.T, bg store.BatchGetter, keys []string) map[string]*store.Record {
	t.Helper()
	got, err := bg.GetMany(h.ctx, keys)
	if err != nil {
		t.Fatalf("GetMany(%d keys) = %v", len(keys), err)
	}
	if got == nil {
		t.Fatalf("GetMany(%d keys) returned a nil map", len(keys))
	}
	return got
}

// checkMany compares what GetMany returned with want, reporting every
// difference.
func checkMany(t *testing.T, got map[string]*store.Record, want map[string]*store.Record) {
	t.Helper()
	checkRecords(t, "GetMany", got, want)
}

// checkRecords compares the records op returned, by key, with the stored
// records want, reporting every difference.
func checkRecords(t *testing.T, op string, got, want map[string]*store.Record) {
	t.Helper()
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			t.Errorf("%s left out %q, which is stored", op, k)
			continue
		}
		if d := sameRecord(g, w); d != "" {
			t.Errorf("%s record %q differs from the stored one: %s", op, k, d)
		}
	}
	var extra []string
	for k := range got {
		if _, ok := want[k]; !ok {
			extra = append(extra, k)
		}
	}
	if len(extra) > 0 {
		sort.Strings(extra)
		t.Errorf("%s returned %d keys that have no record: %.5q", op, len(extra), extra)
	}
}

func testGetManyEmpty(t *testing.T, h *harness, bg store.BatchGetter) {
	for _, keys := range [][]string{nil, {}} {
		if got := h.getMany(t, bg, keys); len(got) != 0 {
			t.Errorf("GetMany(%#v) = %d records, want none", keys, len(got))
		}
	}
	if got := h.getMany(t, bg, []string{"scope#absent-1", "scope#absent-2"}); len(got) != 0 {
		t.Errorf("GetMany of absent keys = %d records, want none", len(got))
	}
}

// testGetManyAsStored reads records in every state, with absent and
// duplicate keys among them: each comes back exactly as stored, live or
// not.
func testGetManyAsStored(t *testing.T, h *harness, bg store.BatchGetter) {
	want := map[string]*store.Record{}

	inProgress := h.claim("scope#many-in-progress", 30*time.Second)
	h.mustAcquire(t, inProgress, h.t0)
	want[inProgress.Key] = inProgress

	zeroLease := h.claim("scope#many-zero-lease", 0)
	h.mustAcquire(t, zeroLease, h.t0)
	want[zeroLease.Key] = zeroLease

	// Acquired at t0, and its lease has lapsed by t0+1m: not live then, but
	// stored, so GetMany returns it.
	lapsed := h.claim("scope#many-lapsed", 10*time.Second)
	h.mustAcquire(t, lapsed, h.t0)
	want[lapsed.Key] = lapsed

	value := h.claim("scope#many-value", time.Minute)
	h.mustAcquire(t, value, h.t0)
	want[value.Key] = h.mustComplete(t, value, []byte(`{"charge":"ch_1","amount":4200}`))

	definite := h.claim("scope#many-error", time.Minute)
	h.mustAcquire(t, definite, h.t0)
	d := *definite
	d.Status, d.ResultKind, d.Result, d.ExpiresAt = store.StatusCompleted, store.ResultError, []byte(`{"message":"card declined"}`), h.t0.Add(2*time.Hour)
	if err := h.s.Complete(h.ctx, &d); err != nil {
		t.Fatalf("Complete(error) = %v", err)
	}
	want[d.Key] = &d

	released := h.claim("scope#many-released", time.Minute)
	h.mustAcquire(t, released, h.t0)
	if err := h.s.Release(h.ctx, released.Key, released.Token); err != nil {
		t.Fatalf("Release = %v", err)
	}

	odd := h.claim("scope a/ü#odd batch key: \"quoted\" & spaced", time.Minute)
	h.mustAcquire(t, odd, h.t0)
	want[odd.Key] = odd

	keys := []string{
		value.Key, "scope#many-absent", inProgress.Key, released.Key, value.Key,
		zeroLease.Key, d.Key, lapsed.Key, odd.Key, inProgress.Key, "other-scope#many-value",
	}
	checkMany(t, h.getMany(t, bg, keys), want)

	// A subset returns only the subset.
	sub := h.getMany(t, bg, []string{d.Key})
	checkMany(t, sub, map[string]*store.Record{d.Key: &d})
}

// testGetManyManyKeys reads more keys than one DynamoDB request takes (100),
// shuffled among absent and duplicate keys.
func testGetManyManyKeys(t *testing.T, h *harness, bg store.BatchGetter) {
	const n = 250
	recs := make([]*store.Record, n)
	for i := range recs {
		recs[i] = h.claim(fmt.Sprintf("scope#many-%03d", i), time.Minute)
	}
	want := make(map[string]*store.Record, n)
	var mu sync.Mutex
	h.parallel(t, n, func(i int) error {
		r := recs[i]
		if _, err := h.s.Acquire(h.ctx, r, h.t0); err != nil {
			return fmt.Errorf("Acquire(%q) = %w", r.Key, err)
		}
		stored := r
		if i%3 == 0 {
			done := *r
			done.Status, done.Result, done.ExpiresAt = store.StatusCompleted, []byte(fmt.Sprintf(`{"n":%d}`, i)), h.t0.Add(2*time.Hour)
			if err := h.s.Complete(h.ctx, &done); err != nil {
				return fmt.Errorf("Complete(%q) = %w", r.Key, err)
			}
			stored = &done
		}
		mu.Lock()
		want[r.Key] = stored
		mu.Unlock()
		return nil
	})
	var keys []string
	for i := n - 1; i >= 0; i-- { // reversed, with absent keys and duplicates mixed in
		keys = append(keys, recs[i].Key)
		if i%5 == 0 {
			keys = append(keys, fmt.Sprintf("scope#many-absent-%03d", i))
		}
		if i%7 == 0 {
			keys = append(keys, recs[(i*13)%n].Key)
		}
	}
	got := h.getMany(t, bg, keys)
	if len(got) != n {
		t.Errorf("GetMany(%d keys, %d stored) = %d records", len(keys), n, len(got))
	}
	checkMany(t, got, want)
}

// testGetManyLarge reads completed records with large, incompressible
// results, a few megabytes in all: each comes back whole. (A backend that
// answers a large read in parts, as DynamoDB does above 16 MB, must go back
// for the rest; store tests can inject such partial answers more cheaply
// than by writing 16 MB.)
func testGetManyLarge(t *testing.T, h *harness, bg store.BatchGetter, tooLarge int) {
	size := 300 << 10
	if tooLarge > 0 && tooLarge/2 < size {
		size = tooLarge / 2
	}
	const n = 12
	want := make(map[string]*store.Record, n)
	keys := make([]string, n)
	var mu sync.Mutex
	h.parallel(t, n, func(i int) error {
		r := h.claim(fmt.Sprintf("scope#large-%03d", i), time.Minute)
		if _, err := h.s.Acquire(h.ctx, r, h.t0); err != nil {
			return fmt.Errorf("Acquire(%q) = %w", r.Key, err)
		}
		done := *r
		done.Status, done.ExpiresAt = store.StatusCompleted, h.t0.Add(2*time.Hour)
		done.Result = make([]byte, size)
		rand.Read(done.Result)
		if err := h.s.Complete(h.ctx, &done); err != nil {
			return fmt.Errorf("Complete(%q, %d bytes) = %w", r.Key, size, err)
		}
		mu.Lock()
		want[r.Key], keys[i] = &done, r.Key
		mu.Unlock()
		return nil
	})
	checkMany(t, h.getMany(t, bg, keys), want)
}

// testGetManyConsistent checks that GetMany sees every write that finished
// before it: a completion, a release, a takeover.
func testGetManyConsistent(t *testing.T, h *harness, bg store.BatchGetter) {
	a := h.claim("scope#consistent-a", 10*time.Second)
	b := h.claim("scope#consistent-b", time.Minute)
	h.mustAcquire(t, a, h.t0)
	h.mustAcquire(t, b, h.t0)
	doneA := h.mustComplete(t, a, []byte(`"a"`))
	checkMany(t, h.getMany(t, bg, []string{a.Key, b.Key}), map[string]*store.Record{a.Key: doneA, b.Key: b})

	if err := h.s.Release(h.ctx, b.Key, b.Token); err != nil {
		t.Fatalf("Release = %v", err)
	}
	checkMany(t, h.getMany(t, bg, []string{a.Key, b.Key}), map[string]*store.Record{a.Key: doneA})

	c := h.claim(b.Key, time.Minute)
	h.mustAcquire(t, c, h.t0)
	checkMany(t, h.getMany(t, bg, []string{a.Key, b.Key}), map[string]*store.Record{a.Key: doneA, b.Key: c})
}

func testGetManyCancelled(t *testing.T, h *harness, bg store.BatchGetter) {
	rec := h.claim("scope#many-cancelled", time.Minute)
	h.mustAcquire(t, rec, h.t0)
	ctx, cancel := context.WithCancel(h.ctx)
	cancel()
	if got, err := bg.GetMany(ctx, []string{rec.Key}); !errors.Is(err, context.Canceled) {
		t.Errorf("GetMany with a cancelled context = %d records, %v; want context.Canceled", len(got), err)
	}
}

// testGetManyOwned checks that changing a returned record changes nothing
// stored.
func testGetManyOwned(t *testing.T, h *harness, bg store.BatchGetter) {
	rec := h.claim("scope#many-owned", time.Minute)
	h.mustAcquire(t, rec, h.t0)
	got := h.getMany(t, bg, []string{rec.Key})[rec.Key]
	if got == nil {
		t.Fatalf("GetMany left out %q", rec.Key)
	}
	got.Status, got.Token, got.ExpiresAt = store.StatusCompleted, "changed", time.Time{}
	checkMany(t, h.getMany(t, bg, []string{rec.Key}), map[string]*store.Record{rec.Key: rec})
}

// parallel runs f(0..n-1) on a few goroutines and fails the test with every
// error.
func (h *harness) parallel(t *testing.T, n int, f func(i int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, n)
	next := make(chan int)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				errs[i] = f(i)
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}
