package dynamodb_test

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemguard/idemguard/guard"
)

// These tests hold the guard to its round-trip floor (the README's DynamoDB
// costs) on a real DynamoDB, counting the HTTP requests its client sends:
// first call 2 writes; replay 1; replay with the local cache 0; N
// concurrent duplicates in one process the same as one call.

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
	call := func(g *guard.Guard, in any) (string, int, map[string]int) {
		t.Helper()
		f.n.Reset()
		v, err := guard.Do(t.Context(), g, "charge", in, charge)
		if err != nil {
			t.Fatalf("Do: %v", err)
		}
		return v, f.n.Total(), f.n.Snapshot()
	}

	v, total, by := call(g, input)
	if v != "ch_1" || runs.Load() != 1 {
		t.Fatalf("first call = %q, runs %d", v, runs.Load())
	}
	if total != 2 || by["PutItem"] != 1 || by["UpdateItem"] != 1 {
		t.Errorf("first call sent %v; want PutItem=1 UpdateItem=1", by)
	}

	v, total, by = call(g, input)
	if v != "ch_1" || runs.Load() != 1 {
		t.Fatalf("replay = %q, runs %d; want the stored result, no run", v, runs.Load())
	}
	if total != 1 || by["PutItem"] != 1 {
		t.Errorf("replay sent %v; want PutItem=1 only", by)
	}

	cached, err := guard.New(f.s, guard.WithCache(64))
	if err != nil {
		t.Fatal(err)
	}
	// A cold cache costs the one conditional write, then nothing.
	if _, total, by = call(cached, input); total != 1 {
		t.Errorf("replay with a cold cache sent %v; want PutItem=1", by)
	}
	for i := range 3 {
		v, total, by = call(cached, input)
		if v != "ch_1" || total != 0 {
			t.Errorf("cached replay %d = %q, sent %v; want no request", i, v, by)
		}
	}
	// A first call through the caching guard: 2 requests, then 0.
	other := map[string]any{"order": 2}
	if _, total, by = call(cached, other); total != 2 {
		t.Errorf("first call with the cache sent %v; want 2", by)
	}
	if _, total, by = call(cached, other); total != 0 {
		t.Errorf("replay of a call this guard completed sent %v; want none", by)
	}
	if runs.Load() != 2 {
		t.Errorf("the function ran %d times for 2 distinct inputs", runs.Load())
	}
}

func TestGuardConcurrentDuplicates(t *testing.T) {
	const n = 1000
	f := newFixture(t)
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
	var (
		wg      sync.WaitGroup
		started sync.WaitGroup
		fails   atomic.Int32
		wrong   atomic.Int32
	)
	start := make(chan struct{})
	for range n {
		wg.Add(1)
		started.Add(1)
		go func() {
			defer wg.Done()
			started.Done()
			<-start
			v, err := guard.Do(t.Context(), g, "report", map[string]string{"day": "2030-01-01"}, body)
			if err != nil {
				fails.Add(1)
				t.Errorf("Do: %v", err)
			} else if v != 42 {
				wrong.Add(1)
			}
		}()
	}
	started.Wait()
	close(start)
	// Let the callers pile up on the one execution before it finishes.
	time.Sleep(300 * time.Millisecond)
	close(release)
	wg.Wait()
	if runs.Load() != 1 {
		t.Errorf("the body ran %d times for %d concurrent duplicates", runs.Load(), n)
	}
	if wrong.Load() != 0 || fails.Load() != 0 {
		t.Errorf("%d callers got a wrong value, %d an error", wrong.Load(), fails.Load())
	}
	if total := f.n.Total(); total > 3 {
		t.Errorf("%d concurrent duplicates sent %s; want at most 3 requests", n, f.n)
	} else {
		t.Logf("%d concurrent duplicates sent %s", n, f.n)
	}
}

func TestGuardOversizeResult(t *testing.T) {
	f := newFixture(t)
	g, err := guard.New(f.s)
	if err != nil {
		t.Fatal(err)
	}
	big := randomBytes(600 << 10)
	var runs atomic.Int32
	fn := func(context.Context) ([]byte, error) {
		runs.Add(1)
		return big, nil
	}
	input := map[string]string{"export": "all"}
	v, err := guard.Do(t.Context(), g, "export", input, fn)
	if err != nil || !bytes.Equal(v, big) {
		t.Fatalf("first call = %d bytes, %v; want its own 600 KB result", len(v), err)
	}
	// The oversize completion is refused before sending, so the first call
	// costs the claim and the body-less completion.
	if total := f.n.Total(); total != 2 {
		t.Errorf("first call sent %s; want PutItem=1 UpdateItem=1 (the refused write not sent)", f.n)
	}
	f.n.Reset()
	_, err = guard.Do(t.Context(), g, "export", input, fn)
	if !errors.Is(err, guard.ErrResultUnavailable) {
		t.Errorf("replay = %v, want ErrResultUnavailable", err)
	}
	if runs.Load() != 1 {
		t.Errorf("the function ran %d times; an unstorable result must not re-run it", runs.Load())
	}
	if total := f.n.Total(); total != 1 {
		t.Errorf("replay sent %s; want PutItem=1", f.n)
	}
}
