package guard_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/memory"
)

// Each test here pins one defect found by a review of the engine: each
// failed on the engine as it was, and passes now.

// boomResult panics when encoded, as a buggy MarshalJSON does.
type boomResult struct{ N int }

func (boomResult) MarshalJSON() ([]byte, error) { panic("MarshalJSON exploded") }

// panicCodec panics when it encodes a result.
type panicCodec struct{}

func (panicCodec) Marshal(any) ([]byte, error) { panic("codec exploded") }
func (panicCodec) Unmarshal([]byte, any) error { return nil }

// recoverPanic runs f and returns what it panicked with, if anything.
func recoverPanic(f func()) (r any) {
	defer func() { r = recover() }()
	f()
	return nil
}

func mustRecordOf(t *testing.T, s store.Store, key string) *store.Record {
	t.Helper()
	rec, err := s.Get(ctx, key)
	if err != nil {
		t.Fatalf("Get(%s): %v", key, err)
	}
	return rec
}

// A panic after the function returned — in the result's MarshalJSON, a
// custom codec, a result filter or a definite-error predicate — happens
// after the side effect. The key must end COMPLETED without a result (so
// replays get ErrResultUnavailable and the function never runs again), the
// keeper must stop, the in-process flight must close, and the caller must
// see the panic.
func TestPanicAfterReturnCompletesWithoutResult(t *testing.T) {
	cases := []struct {
		name string
		opts []guard.Option
		fn   func(context.Context) (any, error)
	}{
		{"MarshalJSON", nil, func(context.Context) (any, error) { return boomResult{1}, nil }},
		{"codec", []guard.Option{guard.WithCodec(panicCodec{})}, func(context.Context) (any, error) { return 1, nil }},
		{"result filter", []guard.Option{guard.WithResultFilter(func(any) bool { panic("filter exploded") })},
			func(context.Context) (any, error) { return 1, nil }},
		{"definite-error predicate", []guard.Option{guard.WithDefiniteErrors(func(error) bool { panic("predicate exploded") })},
			func(context.Context) (any, error) { return nil, errors.New("declined") }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m, cs := newMemory()
			clock := newFakeClock()
			g := mustGuard(t, cs, append([]guard.Option{adapt.WithClock(clock), guard.WithLease(3 * time.Second)}, tc.opts...)...)
			runs := 0
			var key string
			fn := func(ctx context.Context) (any, error) {
				runs++
				key, _ = guard.KeyFromContext(ctx)
				return tc.fn(ctx)
			}
			if r := recoverPanic(func() { guard.Do(ctx, g, "charge", "order-1", fn) }); r == nil {
				t.Fatal("the caller did not see the panic")
			}
			rec := mustRecordOf(t, m, key)
			if rec.Status != store.StatusCompleted || rec.ResultKind != store.ResultUnavailable {
				t.Errorf("record after the panic: %v %v, want COMPLETED without a result", rec.Status, rec.ResultKind)
			}
			// The keeper has stopped: time passing extends nothing.
			ext := cs.extends.Load()
			for range 5 {
				clock.Advance(2 * time.Second)
				time.Sleep(2 * time.Millisecond)
			}
			if n := cs.extends.Load(); n != ext {
				t.Errorf("the lease was extended %d times after the call ended", n-ext)
			}
			// The flight is closed and the record replays: in this process
			// and in another, no ErrInProgress, no second run.
			other := mustGuard(t, m, adapt.WithClock(clock))
			for _, gg := range []*guard.Guard{g, other} {
				_, err := guard.Do(ctx, gg, "charge", "order-1", fn)
				if !errors.Is(err, guard.ErrResultUnavailable) {
					t.Errorf("later call: %v, want ErrResultUnavailable", err)
				}
			}
			if runs != 1 {
				t.Errorf("the function ran %d times, want 1", runs)
			}
		})
	}
}

// A claimant whose clock runs ahead of the holder's by less than the skew
// tolerance (default one second) never takes over a live claim, even when
// it is ahead by more than the lease left.
func TestClockSkewWithinToleranceNeverTakesOver(t *testing.T) {
	m := newMemoryStore()
	holderClock := newFakeClock()
	claimantClock := newFakeClock()
	claimantClock.Advance(900 * time.Millisecond) // ahead of the holder's
	holder := mustGuard(t, m, adapt.WithClock(holderClock), guard.WithLease(time.Second))
	claimant := mustGuard(t, m, adapt.WithClock(claimantClock))

	inside := make(chan struct{})
	release := make(chan struct{})
	done := make(chan error)
	go func() {
		_, err := guard.Do(ctx, holder, "job", "k", func(context.Context) (int, error) {
			close(inside)
			<-release
			return 1, nil
		})
		done <- err
	}()
	<-inside
	// Half a lease on: the holder's lease (not yet extended) ends 1 s after
	// its claim; the claimant's clock reads 1.4 s after it.
	holderClock.Advance(200 * time.Millisecond)
	claimantClock.Advance(500 * time.Millisecond)
	_, err := guard.Do(ctx, claimant, "job", "k", func(context.Context) (int, error) { t.Error("took over a live claim"); return 2, nil })
	if !errors.Is(err, guard.ErrInProgress) {
		t.Errorf("claimant ahead by 0.9 s: %v, want ErrInProgress", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Errorf("holder: %v", err)
	}
}

// When the lease is lost while the function runs and the function returns
// its context's error (the Go idiom), the caller learns the lease was lost.
func TestLeaseLostIsReportedWhateverFnReturns(t *testing.T) {
	m := newMemoryStore()
	clock := newFakeClock()
	g := mustGuard(t, m, adapt.WithClock(clock), guard.WithLease(3*time.Second))
	inside := make(chan string)
	errc := make(chan error)
	go func() {
		_, err := guard.Do(ctx, g, "job", "k", func(ctx context.Context) (int, error) {
			k, _ := guard.KeyFromContext(ctx)
			inside <- k
			<-ctx.Done()
			return 0, ctx.Err()
		})
		errc <- err
	}()
	key := <-inside
	// Another claimant takes the key over (as after a pause past the lease).
	rec := mustRecordOf(t, m, key)
	if err := m.Release(ctx, key, rec.Token); err != nil {
		t.Fatal(err)
	}
	now := clock.Now()
	if _, err := m.Acquire(ctx, &store.Record{Key: key, Status: store.StatusInProgress, Token: "other", ExpiresAt: now.Add(time.Hour), LeaseExpiresAt: now.Add(time.Hour)}, now); err != nil {
		t.Fatal(err)
	}
	var err error
	for got := false; !got; {
		clock.Advance(time.Second) // the keeper's next extension finds the takeover
		select {
		case err = <-errc:
			got = true
		case <-time.After(10 * time.Millisecond):
		}
	}
	if !errors.Is(err, guard.ErrLeaseLost) {
		t.Errorf("err = %v, want it to match ErrLeaseLost", err)
	}
}

// richResult holds JSON that its MarshalJSON writes with spaces and HTML
// characters, which encoding/json compacts and escapes.
type richResult struct {
	Raw json.RawMessage `json:"raw"`
}

// A replay gives exactly what encoding/json's round trip of the result
// gives, for every type.
func TestReplayIsEncodingJSONRoundTrip(t *testing.T) {
	m, _ := newMemory()
	g := mustGuard(t, m)
	v := richResult{Raw: json.RawMessage(`{ "a" : "<b>&" }`)}
	if _, err := guard.Do(ctx, g, "job", "k", func(context.Context) (richResult, error) { return v, nil }); err != nil {
		t.Fatal(err)
	}
	got, out, err := adapt.Execute(ctx, g, "job", "k", func(context.Context) (richResult, error) { return richResult{}, nil })
	if err != nil || out != guard.OutcomeReplayed {
		t.Fatalf("replay: %v, %v", out, err)
	}
	b, _ := json.Marshal(v)
	var want richResult
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	if string(got.Raw) != string(want.Raw) {
		t.Errorf("replayed Raw = %s, encoding/json's round trip gives %s", got.Raw, want.Raw)
	}
}

// IDEMGUARD_DISABLED makes every entry point a pass-through, the claim API
// included: no store call.
func TestDisabledClaimAPIIsPassThrough(t *testing.T) {
	t.Setenv(adapt.DisableEnv, "true")
	_, cs := newMemory()
	g := mustGuard(t, cs)
	cl, rec, err := adapt.Obtain(ctx, g, "wf", "order-1")
	if err != nil || cl == nil || rec != nil {
		t.Fatalf("Claim = %v, %v, %v; want a claim to run under", cl, rec, err)
	}
	if _, err := adapt.Extend(ctx, g, *cl, time.Now().Add(time.Minute)); err != nil {
		t.Errorf("Extend: %v", err)
	}
	if _, err := adapt.Complete(ctx, g, *cl, store.ResultValue, []byte(`1`)); err != nil {
		t.Errorf("Complete: %v", err)
	}
	if err := adapt.Release(ctx, g, *cl); err != nil {
		t.Errorf("Release: %v", err)
	}
	if n := cs.acquires.Load() + cs.completes.Load() + cs.extends.Load() + cs.releases.Load() + cs.gets.Load(); n != 0 {
		t.Errorf("a disabled guard made %d store calls", n)
	}
}

// A duplicate in the same process is told the holder's current lease end,
// not the one it had when it claimed.
func TestInProcessDuplicateSeesCurrentLeaseEnd(t *testing.T) {
	m := newMemoryStore()
	clock := newFakeClock()
	cs := newCounting(m)
	g := mustGuard(t, cs, adapt.WithClock(clock), guard.WithLease(3*time.Second))
	inside := make(chan string)
	release := make(chan struct{})
	go guard.Do(ctx, g, "job", "long", func(ctx context.Context) (int, error) {
		k, _ := guard.KeyFromContext(ctx)
		inside <- k
		<-release
		return 1, nil
	})
	key := <-inside
	defer close(release)
	start := clock.Now()
	for i := range 3 {
		if err := clock.BlockUntilContext(ctx, 1); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Second)
		want := int64(i + 1)
		waitFor(t, "an extension", func() bool { return cs.extends.Load() >= want })
	}
	// The third extension is counted as it is sent; the store holds it,
	// and the flight learns of it, once it is answered.
	var stored *store.Record
	waitFor(t, "the third extension stored", func() bool {
		stored = mustRecordOf(t, m, key)
		return stored.LeaseExpiresAt.Equal(start.Add(6 * time.Second))
	})
	waitFor(t, "a duplicate told the stored lease end", func() bool {
		_, err := guard.Do(ctx, g, "job", "long", func(context.Context) (int, error) { return 0, nil })
		var ip *adapt.InProgressError
		if !errors.As(err, &ip) {
			t.Fatalf("duplicate: %v, want ErrInProgress", err)
		}
		return ip.LeaseExpiresAt.Equal(stored.LeaseExpiresAt)
	})
}

// A holder whose lease end passes on its own clock without a successful
// extension (a pause, a partition) has its context cancelled with cause
// ErrLeaseLost, so a function that checks it before the side effect never
// acts as a zombie.
func TestHolderContextEndsWhenItsLeaseLapses(t *testing.T) {
	m := newMemoryStore()
	clock := newFakeClock()
	cs := newCounting(m)
	g := mustGuard(t, cs, adapt.WithClock(clock), guard.WithLease(3*time.Second))
	cs.set(func(c *countingStore) { c.failExtend = errors.New("network partition") })
	ctxc := make(chan context.Context)
	release := make(chan struct{})
	go guard.Do(ctx, g, "job", "k", func(ctx context.Context) (int, error) {
		ctxc <- ctx
		<-release
		return 1, nil
	})
	fctx := <-ctxc
	defer close(release)
	for range 8 { // 4 s of a 3 s lease whose extensions all fail
		clock.Advance(500 * time.Millisecond)
		time.Sleep(2 * time.Millisecond)
	}
	select {
	case <-fctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the function's context is live 1 s past its lease end")
	}
	if cause := context.Cause(fctx); !errors.Is(cause, guard.ErrLeaseLost) {
		t.Errorf("cause = %v, want ErrLeaseLost", cause)
	}
}

// In Wait mode, a duplicate in the same process behaves as one in another
// process would: when the holder fails and releases the key, the duplicate
// runs the function instead of returning the holder's error.
func TestWaitDuplicateRunsAfterLeaderFails(t *testing.T) {
	m, _ := newMemory()
	g := mustGuard(t, m, guard.WithWait(5*time.Second))
	inside := make(chan struct{})
	release := make(chan struct{})
	go guard.Do(ctx, g, "job", "k", func(context.Context) (int, error) {
		close(inside)
		<-release
		return 0, errors.New("transient failure")
	})
	<-inside
	type res struct {
		v   int
		out guard.Outcome
		err error
	}
	resc := make(chan res)
	go func() {
		v, out, err := adapt.Execute(ctx, g, "job", "k", func(context.Context) (int, error) { return 7, nil })
		resc <- res{v, out, err}
	}()
	waitFor(t, "the duplicate to join", func() bool { return joinedAny(g) })
	close(release)
	r := <-resc
	if r.err != nil || r.v != 7 || r.out != guard.OutcomeExecuted {
		t.Errorf("duplicate = %d, %v, %v; want it to run the function (7, executed)", r.v, r.out, r.err)
	}
}

// A Wait-mode duplicate that joins a Reject-mode call in the same process
// waits, as its own mode says, when that call finds the key held elsewhere.
func TestModesOfJoinedCallsAreTheirOwn(t *testing.T) {
	m := newMemoryStore()
	clock := newFakeClock()
	now := clock.Now()
	key := "job#" + keyHash(t, "k")
	// Another process holds the key for a while.
	if _, err := m.Acquire(ctx, &store.Record{Key: key, Status: store.StatusInProgress, Token: "elsewhere", ExpiresAt: now.Add(time.Hour), LeaseExpiresAt: now.Add(time.Hour)}, now); err != nil {
		t.Fatal(err)
	}
	hold := make(chan struct{})
	gate := &gatedStore{Store: m, gate: hold}
	g := mustGuard(t, gate, adapt.WithClock(clock))
	var wg sync.WaitGroup
	var rejectErr error
	wg.Add(1)
	go func() { // the leader, Reject mode: its claim waits at the gate
		defer wg.Done()
		_, rejectErr = guard.Do(ctx, g, "job", "k", func(context.Context) (int, error) { return 1, nil })
	}()
	waitFor(t, "the leader at the gate", func() bool { return gate.waiting() > 0 })
	waitErr := make(chan error, 1)
	var waitV int
	go func() { // a Wait-mode duplicate joins it
		v, err := guard.Do(ctx, g, "job", "k", func(context.Context) (int, error) { return 2, nil }, guard.WithWait(time.Minute))
		waitV = v
		waitErr <- err
	}()
	waitFor(t, "the duplicate to join", func() bool { return joinedAny(g) })
	close(hold)
	wg.Wait()
	if !errors.Is(rejectErr, guard.ErrInProgress) {
		t.Errorf("Reject-mode leader: %v, want ErrInProgress", rejectErr)
	}
	select {
	case err := <-waitErr:
		t.Fatalf("the Wait-mode duplicate returned %v at once instead of waiting", err)
	case <-time.After(50 * time.Millisecond):
	}
	// The other process completes; the waiting duplicate replays it.
	rec := mustRecordOf(t, m, key)
	rec.Status, rec.Result, rec.ResultKind = store.StatusCompleted, []byte(`42`), store.ResultValue
	if err := m.Complete(ctx, rec); err != nil {
		t.Fatal(err)
	}
	for done := false; !done; {
		clock.Advance(time.Second)
		select {
		case err := <-waitErr:
			done = true
			if err != nil || waitV != 42 {
				t.Errorf("Wait-mode duplicate = %d, %v; want the other process's 42", waitV, err)
			}
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// gatedStore holds every Acquire until gate is closed.
type gatedStore struct {
	store.Store
	gate chan struct{}
	mu   sync.Mutex
	n    int
}

func (s *gatedStore) Acquire(ctx context.Context, rec *store.Record, now time.Time) (*store.Record, error) {
	s.mu.Lock()
	s.n++
	s.mu.Unlock()
	<-s.gate
	return s.Store.Acquire(ctx, rec, now)
}

func (s *gatedStore) waiting() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

// joinedAny reports whether a call has joined any in-process flight of g.
func joinedAny(g *guard.Guard) bool { return g.JoinedAny() > 0 }

// A Wait-mode duplicate of a call whose result was not stored
// (WithResultFilter) runs the function itself, as a waiter in another
// process does, instead of sharing the result that was refused.
func TestWaitDuplicateRunsAfterFilteredResult(t *testing.T) {
	m, _ := newMemory()
	keep := func(v any) bool { return v.(int) != 500 }
	g := mustGuard(t, m, guard.WithWait(5*time.Second), guard.WithResultFilter(keep))
	inside := make(chan struct{})
	release := make(chan struct{})
	go guard.Do(ctx, g, "job", "k", func(context.Context) (int, error) {
		close(inside)
		<-release
		return 500, nil
	})
	<-inside
	type res struct {
		v   int
		out guard.Outcome
		err error
	}
	resc := make(chan res)
	go func() {
		v, out, err := adapt.Execute(ctx, g, "job", "k", func(context.Context) (int, error) { return 201, nil })
		resc <- res{v, out, err}
	}()
	waitFor(t, "the duplicate to join", func() bool { return joinedAny(g) })
	close(release)
	if r := <-resc; r.err != nil || r.v != 201 || r.out != guard.OutcomeExecuted {
		t.Errorf("duplicate = %d, %v, %v; want it to run the function (201, executed)", r.v, r.out, r.err)
	}
}

// panicGetStore panics in Get while armed, as a buggy store would.
type panicGetStore struct {
	store.Store
	armed atomic.Bool
}

func (s *panicGetStore) Get(ctx context.Context, key string) (*store.Record, error) {
	if s.armed.CompareAndSwap(true, false) {
		panic("Get exploded")
	}
	return s.Store.Get(ctx, key)
}

// A panic while the leader replays a completed record (here in the outcome
// hook) must land its in-process flight: a later call with the same key in
// this process must not join a flight that never lands.
func TestPanicInReplayLandsTheFlight(t *testing.T) {
	m, _ := newMemory()
	g := mustGuard(t, m)
	runs := 0
	fn := func(context.Context) (int, error) { runs++; return 7, nil }
	if _, err := guard.Do(ctx, g, "charge", "order-1", fn); err != nil {
		t.Fatal(err)
	}
	var panicked atomic.Bool
	hook := guard.WithOutcomeHook(func(_ context.Context, _ string, _ *store.Record, out guard.Outcome) {
		if out == guard.OutcomeReplayed && panicked.CompareAndSwap(false, true) {
			panic("hook exploded")
		}
	})
	if r := recoverPanic(func() { guard.Do(ctx, g, "charge", "order-1", fn, hook) }); r == nil {
		t.Fatal("the caller did not see the hook's panic")
	}
	for _, mode := range []guard.CallOption{guard.WithWait(0), guard.WithWait(time.Second)} {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		v, err := guard.Do(cctx, g, "charge", "order-1", fn, mode)
		cancel()
		if err != nil || v != 7 {
			t.Errorf("later call = %d, %v; want the replayed 7", v, err)
		}
	}
	if runs != 1 {
		t.Errorf("the function ran %d times, want 1", runs)
	}
}

// A panic in acquire after the claim was made (here in the lookup under a
// previous key secret) must land the flight and release the claim, and
// the panic must reach the caller.
func TestPanicInAcquireReleasesAndLands(t *testing.T) {
	s := &panicGetStore{Store: memory.New()}
	opts := []guard.Option{guard.WithKeySecret([]byte("this-year"), []byte("last-year"))}
	g := mustGuard(t, s, opts...)
	other := mustGuard(t, s, opts...)
	runs := 0
	fn := func(context.Context) (int, error) { runs++; return 7, nil }
	s.armed.Store(true)
	if r := recoverPanic(func() { guard.Do(ctx, g, "charge", "order-1", fn) }); r == nil {
		t.Fatal("the caller did not see the store's panic")
	}
	// The claim is released: another process runs at once.
	if v, err := guard.Do(ctx, other, "charge", "order-1", fn, guard.WithWait(0)); err != nil || v != 7 {
		t.Errorf("call in another process = %d, %v; want it to run (the claim released)", v, err)
	}
	// The flight landed: this process replays.
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if v, err := guard.Do(cctx, g, "charge", "order-1", fn, guard.WithWait(0)); err != nil || v != 7 {
		t.Errorf("later call in this process = %d, %v; want the replayed 7", v, err)
	}
	if runs != 1 {
		t.Errorf("the function ran %d times, want 1", runs)
	}
}

// An outcome hook that panics after the outcome was recorded must not
// overwrite the stored result: the record keeps the value, one completion
// is written, and the panic reaches the caller.
func TestPanicInOutcomeHookKeepsTheRecord(t *testing.T) {
	m, cs := newMemory()
	g := mustGuard(t, cs)
	hook := guard.WithOutcomeHook(func(_ context.Context, _ string, _ *store.Record, out guard.Outcome) {
		if out == guard.OutcomeExecuted {
			panic("hook exploded")
		}
	})
	runs := 0
	var key string
	fn := func(ctx context.Context) (int, error) {
		runs++
		key, _ = guard.KeyFromContext(ctx)
		return 7, nil
	}
	if r := recoverPanic(func() { guard.Do(ctx, g, "charge", "order-1", fn, hook) }); r == nil {
		t.Fatal("the caller did not see the hook's panic")
	}
	if rec := mustRecordOf(t, m, key); rec.Status != store.StatusCompleted || rec.ResultKind != store.ResultValue {
		t.Errorf("record after the panic: %v %v, want COMPLETED with the value", rec.Status, rec.ResultKind)
	}
	if n := cs.completes.Load(); n != 1 {
		t.Errorf("%d completions written, want 1", n)
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if v, err := guard.Do(cctx, g, "charge", "order-1", fn, guard.WithWait(0)); err != nil || v != 7 {
		t.Errorf("later call = %d, %v; want the replayed 7", v, err)
	}
	if runs != 1 {
		t.Errorf("the function ran %d times, want 1", runs)
	}
}

// The same holds for a recorded definite error.
func TestPanicInOutcomeHookKeepsTheDefiniteError(t *testing.T) {
	m, cs := newMemory()
	g := mustGuard(t, cs)
	hook := guard.WithOutcomeHook(func(_ context.Context, _ string, _ *store.Record, out guard.Outcome) {
		if out == guard.OutcomeExecuted {
			panic("hook exploded")
		}
	})
	declined := errors.New("declined")
	definite := guard.WithDefiniteErrors(func(err error) bool { return errors.Is(err, declined) })
	var key string
	fn := func(ctx context.Context) (int, error) {
		key, _ = guard.KeyFromContext(ctx)
		return 0, declined
	}
	if r := recoverPanic(func() { guard.Do(ctx, g, "charge", "order-1", fn, hook, definite) }); r == nil {
		t.Fatal("the caller did not see the hook's panic")
	}
	if rec := mustRecordOf(t, m, key); rec.Status != store.StatusCompleted || rec.ResultKind != store.ResultError {
		t.Errorf("record after the panic: %v %v, want COMPLETED with the error", rec.Status, rec.ResultKind)
	}
	if n := cs.completes.Load(); n != 1 {
		t.Errorf("%d completions written, want 1", n)
	}
}
