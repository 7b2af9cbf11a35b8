package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/store"
)

// TestRequestCounts checks the round trips of each store call, counted by
// a tracer on the pool: one per statement or batch. Every write is a batch
// (BEGIN ISOLATION LEVEL READ COMMITTED, the statement, COMMIT); reads are
// plain statements.
func TestRequestCounts(t *testing.T) {
	f := newFixture(t)
	step := func(what string, want map[string]int, call func() error) {
		t.Helper()
		f.n.Reset()
		if err := call(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		got, total := f.n.Snapshot(), 0
		for op, w := range want {
			total += w
			if got[op] != w {
				t.Errorf("%s sent %s; want %s=%d", what, f.n, op, w)
			}
		}
		if f.n.Total() != total {
			t.Errorf("%s sent %s; want %d round trips in all", what, f.n, total)
		}
	}
	rec := f.claim("scope#counts")
	step("Acquire new", map[string]int{"BATCH": 1}, func() error {
		_, err := f.s.Acquire(f.ctx, rec, f.t0)
		return err
	})
	step("Acquire conflict (in progress)", map[string]int{"BATCH": 1}, func() error {
		old, err := f.s.Acquire(f.ctx, f.claim(rec.Key), f.t0)
		if !errors.Is(err, store.ErrConflict) || old == nil || old.Token != rec.Token {
			return fmt.Errorf("got %+v, %v; want a conflict with the holder's record", old, err)
		}
		return nil
	})
	step("Extend", map[string]int{"BATCH": 1}, func() error {
		return f.s.Extend(f.ctx, rec.Key, rec.Token, f.t0.Add(2*time.Minute), f.t0.Add(time.Hour))
	})
	step("Complete", map[string]int{"BATCH": 1}, func() error {
		return f.s.Complete(f.ctx, f.completed(rec, []byte(`"ok"`)))
	})
	step("Acquire conflict (completed)", map[string]int{"BATCH": 1}, func() error {
		old, err := f.s.Acquire(f.ctx, f.claim(rec.Key), f.t0)
		if !errors.Is(err, store.ErrConflict) || old == nil || string(old.Result) != `"ok"` {
			return fmt.Errorf("got %+v, %v; want a conflict with the completed record", old, err)
		}
		return nil
	})
	step("Get", map[string]int{"SELECT": 1}, func() error {
		_, err := f.s.Get(f.ctx, rec.Key)
		return err
	})
	step("GetMany", map[string]int{"SELECT": 1}, func() error {
		_, err := f.s.GetMany(f.ctx, []string{rec.Key, "scope#absent"})
		return err
	})
	step("List", map[string]int{"SELECT": 1}, func() error {
		_, err := f.s.List(f.ctx, store.Query{})
		return err
	})
	held := f.claim("scope#counts-release") // Release deletes a claim in progress only
	f.mustAcquire(t, held)
	step("Release", map[string]int{"BATCH": 1}, func() error {
		return f.s.Release(f.ctx, held.Key, held.Token)
	})
	tx := f.claim("scope#counts-tx")
	f.mustAcquire(t, tx)
	step("Begin, Tx.Complete, Commit", map[string]int{"BEGIN": 1, "UPDATE": 1, "COMMIT": 1}, func() error {
		x, err := f.s.Begin(f.ctx)
		if err != nil {
			return err
		}
		defer x.Rollback(f.ctx)
		if err := x.Complete(f.ctx, f.completed(tx, []byte(`1`))); err != nil {
			return err
		}
		return x.Commit(f.ctx)
	})
	step("Purge (nothing expired)", map[string]int{"BATCH": 1}, func() error {
		_, err := f.s.Purge(f.ctx, f.t0)
		return err
	})
}

// TestAcquireOneNetworkRoundTrip counts the exchanges on the wire, below
// pgx: Acquire's four statements travel together and come back together,
// and so do a write's BEGIN, statement and COMMIT.
// The first time a connection sees the store's statements, pgx's statement
// cache prepares them in an exchange of its own; after that, each call is
// one.
func TestAcquireOneNetworkRoundTrip(t *testing.T) {
	var w *wire
	f := newFixtureWith(t, func(c *pgxpool.Config) {
		c.MaxConns = 1
		w = countWire(c)
	})
	w.reset()
	f.mustAcquire(t, f.claim("scope#wire-warm-up"))
	if got := w.count(); got != 2 {
		t.Errorf("the first Acquire on a connection took %d exchanges; want 2 (prepare, then the pipeline)", got)
	}
	for _, c := range []struct {
		what string
		call func() error
	}{
		{"Acquire new", func() error { _, err := f.s.Acquire(f.ctx, f.claim("scope#wire"), f.t0); return err }},
		{"Acquire conflict", func() error {
			if _, err := f.s.Acquire(f.ctx, f.claim("scope#wire"), f.t0); !errors.Is(err, store.ErrConflict) {
				return fmt.Errorf("got %v, want ErrConflict", err)
			}
			return nil
		}},
		{"Acquire over an expired record", func() error {
			_, err := f.s.Acquire(f.ctx, f.claim("scope#wire"), f.t0.Add(2*time.Hour))
			return err
		}},
		{"Complete", func() error {
			// The first Complete on the connection prepares the UPDATE.
			for i := range 2 {
				rec := f.claim(fmt.Sprintf("scope#wire-complete-%d", i))
				if _, err := f.s.Acquire(f.ctx, rec, f.t0); err != nil {
					return err
				}
				w.reset()
				if err := f.s.Complete(f.ctx, f.completed(rec, []byte(`"ok"`))); err != nil {
					return err
				}
			}
			return nil
		}},
	} {
		w.reset()
		if err := c.call(); err != nil {
			t.Fatalf("%s: %v", c.what, err)
		}
		if got := w.count(); got != 1 {
			t.Errorf("%s took %d network round trips, want 1", c.what, got)
		}
	}
}

// The guard's round-trip floor on PostgreSQL (docs/architecture.md): first call 2,
// replay 1, replay from the local cache 0, 1,000 concurrent duplicates in
// one process 2, a batch of completed items 1.

func TestGuardRequestCounts(t *testing.T) {
	f := newFixture(t)
	g, err := guard.New(f.s)
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	charge := func(context.Context) (string, error) {
		runs.Add(1)
		return "ch_1", nil
	}
	input := map[string]any{"order": 1, "amount": 4200}
	call := func(g *guard.Guard, in any) (string, int, string) {
		t.Helper()
		f.n.Reset()
		v, err := guard.Do(f.ctx, g, "charge", in, charge)
		if err != nil {
			t.Fatalf("Do: %v", err)
		}
		return v, f.n.Total(), f.n.String()
	}

	v, total, by := call(g, input)
	if v != "ch_1" || runs.Load() != 1 {
		t.Fatalf("first call = %q, runs %d", v, runs.Load())
	}
	if total != 2 || f.n.Snapshot()["BATCH"] != 2 {
		t.Errorf("first call sent %s; want BATCH=2 (claim, complete)", by)
	}
	v, total, by = call(g, input)
	if v != "ch_1" || runs.Load() != 1 {
		t.Fatalf("replay = %q, runs %d; want the stored result, no run", v, runs.Load())
	}
	if total != 1 || f.n.Snapshot()["BATCH"] != 1 {
		t.Errorf("replay sent %s; want BATCH=1 only", by)
	}

	cached, err := guard.New(f.s, guard.WithCache(64))
	if err != nil {
		t.Fatal(err)
	}
	if _, total, by = call(cached, input); total != 1 {
		t.Errorf("replay with a cold cache sent %s; want BATCH=1", by)
	}
	for i := range 3 {
		if v, total, by = call(cached, input); v != "ch_1" || total != 0 {
			t.Errorf("cached replay %d = %q, sent %s; want no round trip", i, v, by)
		}
	}
	other := map[string]any{"order": 2}
	if _, total, by = call(cached, other); total != 2 {
		t.Errorf("first call with the cache sent %s; want 2", by)
	}
	if _, total, by = call(cached, other); total != 0 {
		t.Errorf("replay of a call this guard completed sent %s; want none", by)
	}
	if runs.Load() != 2 {
		t.Errorf("the function ran %d times for 2 distinct inputs", runs.Load())
	}
}

func TestGuardConcurrentDuplicates(t *testing.T) {
	const n = 1000
	f := newFixture(t)
	// Waiting, not rejecting, duplicates: they share the one execution.
	g, err := guard.New(f.s, guard.WithWait(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	release := make(chan struct{})
	body := func(context.Context) (int, error) {
		runs.Add(1)
		<-release
		return 42, nil
	}
	var wg, started sync.WaitGroup
	var fails, wrong atomic.Int32
	start := make(chan struct{})
	for range n {
		wg.Add(1)
		started.Add(1)
		go func() {
			defer wg.Done()
			started.Done()
			<-start
			v, err := guard.Do(f.ctx, g, "report", map[string]string{"day": "2030-01-01"}, body)
			switch {
			case err != nil:
				fails.Add(1)
				t.Errorf("Do: %v", err)
			case v != 42:
				wrong.Add(1)
			}
		}()
	}
	started.Wait()
	close(start)
	// Let every caller join the one execution before it finishes.
	time.Sleep(time.Second)
	close(release)
	wg.Wait()
	if runs.Load() != 1 {
		t.Errorf("the body ran %d times for %d concurrent duplicates", runs.Load(), n)
	}
	if wrong.Load() != 0 || fails.Load() != 0 {
		t.Errorf("%d callers got a wrong value, %d an error", wrong.Load(), fails.Load())
	}
	if total := f.n.Total(); total != 2 {
		t.Errorf("%d concurrent duplicates sent %s; want 2 round trips (claim, complete)", n, f.n)
	} else {
		t.Logf("%d concurrent duplicates sent %s", n, f.n)
	}
}

type batchItem struct {
	ID string `json:"id"`
	N  int    `json:"n"`
}

// TestDoBatchRequestCounts: a batch of 100 items costs a lookup, then one
// claim and one completion per item the first time, and the lookup alone,
// one SELECT, once they are completed.
func TestDoBatchRequestCounts(t *testing.T) {
	f := newFixture(t)
	g, err := guard.New(f.s)
	if err != nil {
		t.Fatal(err)
	}
	in := make([]batchItem, 100)
	for i := range in {
		in[i] = batchItem{ID: fmt.Sprintf("item-%03d", i), N: i}
	}
	var mu sync.Mutex
	ran := map[string]int{}
	fn := func(_ context.Context, it batchItem) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		ran[it.ID]++
		return "done-" + it.ID, nil
	}
	check := func(res []guard.ItemResult[string], want guard.Outcome) {
		t.Helper()
		for i, r := range res {
			if r.Err != nil || r.Value != "done-"+in[i].ID || r.Outcome != want {
				t.Errorf("item %d = %q, %v, %v; want %q, %v", i, r.Value, r.Outcome, r.Err, "done-"+in[i].ID, want)
			}
		}
	}
	check(guard.DoBatch(f.ctx, g, "send", in, fn), guard.OutcomeExecuted)
	if by := f.n.Snapshot(); by["BATCH"] != 200 || by["SELECT"] != 1 || f.n.Total() != 201 {
		t.Errorf("first run of 100 new items sent %s; want SELECT=1 (the lookup) BATCH=200 (claims, completions)", f.n)
	}
	t.Logf("first run of 100 new items: %s", f.n)

	f.n.Reset()
	check(guard.DoBatch(f.ctx, g, "send", in, fn), guard.OutcomeReplayed)
	if total, by := f.n.Total(), f.n.Snapshot(); total != 1 || by["SELECT"] != 1 {
		t.Errorf("replay of 100 completed items sent %s; want SELECT=1 only", f.n)
	}
	for _, it := range in {
		if ran[it.ID] != 1 {
			t.Errorf("%s ran %d times, want 1", it.ID, ran[it.ID])
		}
	}
}
