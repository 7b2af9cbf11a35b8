package redis_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/store"
)

// TestRequestCounts checks the round trips of each store call, counted by
// a hook on the client.
func TestRequestCounts(t *testing.T) {
	f := newFixture(t)
	step := func(what string, cmd string, call func() error) {
		t.Helper()
		f.n.Reset()
		if err := call(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if f.n.Total() != 1 || f.n.Get(cmd) == 0 {
			t.Errorf("%s sent %s; want one round trip with %s", what, f.n, cmd)
		}
	}
	rec := f.claim("scope#counts")
	step("Acquire new", "evalsha", func() error {
		_, err := f.s.Acquire(f.ctx, rec, f.t0)
		return err
	})
	step("Acquire conflict (in progress)", "evalsha", func() error {
		old, err := f.s.Acquire(f.ctx, f.claim(rec.Key), f.t0)
		if !errors.Is(err, store.ErrConflict) || old == nil || old.Token != rec.Token {
			return fmt.Errorf("Acquire = %+v, %v; want the holder's record and ErrConflict", old, err)
		}
		return nil
	})
	step("Extend", "evalsha", func() error {
		return f.s.Extend(f.ctx, rec.Key, rec.Token, f.t0.Add(2*time.Minute), f.t0.Add(time.Hour))
	})
	step("Complete", "evalsha", func() error {
		done := *rec
		done.Result = []byte(`"ok"`)
		return f.s.Complete(f.ctx, &done)
	})
	step("Acquire conflict (completed)", "evalsha", func() error {
		old, err := f.s.Acquire(f.ctx, f.claim(rec.Key), f.t0)
		if !errors.Is(err, store.ErrConflict) || old == nil || string(old.Result) != `"ok"` {
			return fmt.Errorf("Acquire = %+v, %v; want the completed record and ErrConflict", old, err)
		}
		return nil
	})
	step("Get", "hgetall", func() error {
		_, err := f.s.Get(f.ctx, rec.Key)
		return err
	})
	step("GetMany", "hgetall", func() error {
		_, err := f.s.GetMany(f.ctx, []string{rec.Key, "scope#absent", rec.Key})
		return err
	})
	held := f.claim("scope#counts-release") // Release deletes a claim in progress only
	if _, err := f.s.Acquire(f.ctx, held, f.t0); err != nil {
		t.Fatal(err)
	}
	step("Release", "evalsha", func() error {
		return f.s.Release(f.ctx, held.Key, held.Token)
	})
}

// These tests hold the guard to its round-trip floor (docs/architecture.md) on a real
// redis-server: first call 2; replay 1; replay with the local cache 0;
// 1,000 concurrent duplicates in one process 2; a batch of 100 completed
// items 1.

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
	call := func(g *guard.Guard, in any) (string, int) {
		t.Helper()
		f.n.Reset()
		v, err := guard.Do(t.Context(), g, "charge", in, charge)
		if err != nil {
			t.Fatalf("Do: %v", err)
		}
		return v, f.n.Total()
	}

	v, trips := call(g, input)
	if v != "ch_1" || runs.Load() != 1 {
		t.Fatalf("first call = %q, runs %d", v, runs.Load())
	}
	if trips != 2 || f.n.Get("evalsha") != 2 {
		t.Errorf("first call sent %s; want 2 round trips (the claim and the completion scripts)", f.n)
	}
	t.Logf("first call: %s", f.n)

	v, trips = call(g, input)
	if v != "ch_1" || runs.Load() != 1 {
		t.Fatalf("replay = %q, runs %d; want the stored result, no run", v, runs.Load())
	}
	if trips != 1 || f.n.Get("evalsha") != 1 {
		t.Errorf("replay sent %s; want 1 round trip (the claim script returning the record)", f.n)
	}
	t.Logf("replay: %s", f.n)

	cached, err := guard.New(f.s, guard.WithCache(64))
	if err != nil {
		t.Fatal(err)
	}
	if _, trips = call(cached, input); trips != 1 {
		t.Errorf("replay with a cold cache sent %s; want 1 round trip", f.n)
	}
	for i := range 3 {
		if v, trips = call(cached, input); v != "ch_1" || trips != 0 {
			t.Errorf("cached replay %d = %q, sent %s; want no round trip", i, v, f.n)
		}
	}
	other := map[string]any{"order": 2}
	if _, trips = call(cached, other); trips != 2 {
		t.Errorf("first call with the cache sent %s; want 2 round trips", f.n)
	}
	if _, trips = call(cached, other); trips != 0 {
		t.Errorf("replay of a call this guard completed sent %s; want none", f.n)
	}
	if runs.Load() != 2 {
		t.Errorf("the function ran %d times for 2 distinct inputs", runs.Load())
	}
}

func TestGuardConcurrentDuplicates(t *testing.T) {
	const n = 1000
	f := newFixture(t)
	// In the default Reject mode a duplicate that finds the call running
	// gets ErrInProgress at once; with a wait budget it shares the result.
	g, err := guard.New(f.s, guard.WithWait(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var (
		runs, entered, wrong atomic.Int32
		wg                   sync.WaitGroup
	)
	release := make(chan struct{})
	body := func(context.Context) (int, error) {
		runs.Add(1)
		<-release
		return 42, nil
	}
	start := make(chan struct{})
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			entered.Add(1)
			v, err := guard.Do(t.Context(), g, "report", map[string]string{"day": "2030-01-01"}, body)
			if err != nil || v != 42 {
				wrong.Add(1)
				t.Errorf("Do = %v, %v; want 42", v, err)
			}
		}()
	}
	close(start)
	// Let every caller reach the one execution before it finishes.
	for entered.Load() < n {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	close(release)
	wg.Wait()
	if runs.Load() != 1 {
		t.Errorf("the body ran %d times for %d concurrent duplicates", runs.Load(), n)
	}
	if trips := f.n.Total(); trips != 2 {
		t.Errorf("%d concurrent duplicates sent %s; want 2 round trips", n, f.n)
	}
	t.Logf("%d concurrent duplicates: %s", n, f.n)
}

// batchItem is an input of the batch tests.
type batchItem struct {
	ID string `json:"id"`
	N  int    `json:"n"`
}

func TestGuardBatchRequestCounts(t *testing.T) {
	const n = 100
	f := newFixture(t)
	g, err := guard.New(f.s)
	if err != nil {
		t.Fatal(err)
	}
	in := make([]batchItem, n)
	for i := range in {
		in[i] = batchItem{ID: fmt.Sprintf("item-%03d", i), N: i}
	}
	var runs atomic.Int32
	fn := func(_ context.Context, it batchItem) (string, error) {
		runs.Add(1)
		return "done-" + it.ID, nil
	}
	check := func(res []guard.ItemResult[string], want guard.Outcome) {
		t.Helper()
		for i, r := range res {
			if r.Err != nil || r.Value != "done-"+in[i].ID || r.Outcome != want {
				t.Fatalf("item %d = %+v; want done-%s, %v", i, r, in[i].ID, want)
			}
		}
	}
	check(guard.DoBatch(f.ctx, g, "send", in, fn), guard.OutcomeExecuted)
	t.Logf("first run of %d new items: %s", n, f.n)
	if f.n.Get("hgetall") != n || f.n.Get("evalsha") != 2*n {
		t.Errorf("first run sent %s; want one pipelined lookup of %d keys, then a claim and a completion per item", f.n, n)
	}

	f.n.Reset()
	check(guard.DoBatch(f.ctx, g, "send", in, fn), guard.OutcomeReplayed)
	t.Logf("replay of %d completed items: %s", n, f.n)
	if f.n.Total() != 1 || f.n.Get("hgetall") != n {
		t.Errorf("replay of %d completed items sent %s; want 1 round trip: a pipeline of %d HGETALLs", n, f.n, n)
	}
	if runs.Load() != n {
		t.Errorf("the function ran %d times for %d items", runs.Load(), n)
	}
}
