package guard_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/internal/keyformat"
	"github.com/idemguard/idemguard/store"
)

var ctx = context.Background()

func chargeFn(runs *atomic.Int64, o order) func(context.Context) (charge, error) {
	return func(context.Context) (charge, error) {
		n := runs.Add(1)
		return charge{ChargeID: fmt.Sprintf("ch_%s_%d", o.ID, n), Amount: o.Amount}, nil
	}
}

func TestExecuteThenReplay(t *testing.T) {
	m, cs := newMemory()
	g := mustGuard(t, cs)
	var runs atomic.Int64
	o := order{ID: "o-1", Amount: 4200}

	first, out, err := adapt.Execute(ctx, g, "charge", o, chargeFn(&runs, o))
	if err != nil || out != guard.OutcomeExecuted {
		t.Fatalf("first call: %v, %v", out, err)
	}
	second, out, err := adapt.Execute(ctx, g, "charge", o, chargeFn(&runs, o))
	if err != nil || out != guard.OutcomeReplayed {
		t.Fatalf("second call: %v, %v", out, err)
	}
	if runs.Load() != 1 {
		t.Errorf("function ran %d times, want 1", runs.Load())
	}
	if second != first {
		t.Errorf("replayed %+v, want the first result %+v", second, first)
	}
	if got := cs.acquires.Load(); got != 2 {
		t.Errorf("acquires = %d, want 2 (claim, then the replay's conflict)", got)
	}
	if got := cs.completes.Load(); got != 1 {
		t.Errorf("completes = %d, want 1", got)
	}
	if m.Len() != 1 {
		t.Errorf("store holds %d records, want 1", m.Len())
	}

	// Another input is another key.
	o2 := order{ID: "o-2", Amount: 4200}
	if _, out, _ := adapt.Execute(ctx, g, "charge", o2, chargeFn(&runs, o2)); out != guard.OutcomeExecuted {
		t.Errorf("another input: outcome %v, want executed", out)
	}
	// The same input in another scope is another key.
	if _, out, _ := adapt.Execute(ctx, g, "refund", o, chargeFn(&runs, o)); out != guard.OutcomeExecuted {
		t.Errorf("another scope: outcome %v, want executed", out)
	}
}

func TestKeyFromContextIsStoredKey(t *testing.T) {
	m, _ := newMemory()
	g := mustGuard(t, m)
	var seen string
	_, err := guard.Do(ctx, g, "charge", order{ID: "o-1"}, func(ctx context.Context) (int, error) {
		k, ok := guard.KeyFromContext(ctx)
		if !ok {
			t.Error("KeyFromContext: no key inside the guarded function")
		}
		seen = k
		return 1, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(seen, "charge#") || len(seen) != len("charge#")+64 {
		t.Fatalf("key %q, want charge#<sha256 hex>", seen)
	}
	rec, err := m.Get(ctx, seen)
	if err != nil || rec.Status != store.StatusCompleted {
		t.Errorf("record under the context's key: %+v, %v", rec, err)
	}
	if _, ok := guard.KeyFromContext(ctx); ok {
		t.Error("KeyFromContext outside a guarded call reported a key")
	}
}

func TestWrapKeepsSignatureAndBindsKeyBeforeRun(t *testing.T) {
	m, _ := newMemory()
	g := mustGuard(t, m)
	var runs atomic.Int64
	// The function mutates its input; the key must stay the one derived
	// before it ran.
	charge := func(ctx context.Context, o *order) (string, error) {
		runs.Add(1)
		o.ID = "mutated"
		o.Amount = -1
		return "ch_1", nil
	}
	wrapped, err := guard.Wrap(g, "charge", charge)
	if err != nil {
		t.Fatal(err)
	}
	var _ func(context.Context, *order) (string, error) = wrapped

	in := &order{ID: "o-1", Amount: 10}
	if v, err := wrapped(ctx, in); err != nil || v != "ch_1" {
		t.Fatalf("first call = %q, %v", v, err)
	}
	if in.ID != "mutated" {
		t.Fatal("the function did not mutate its input; the test proves nothing")
	}
	// A fresh copy of the original input replays: the record was completed
	// under the original key, not the mutated one.
	if v, err := wrapped(ctx, &order{ID: "o-1", Amount: 10}); err != nil || v != "ch_1" {
		t.Fatalf("replay = %q, %v", v, err)
	}
	if runs.Load() != 1 {
		t.Errorf("function ran %d times, want 1", runs.Load())
	}
	if m.Len() != 1 {
		t.Errorf("store holds %d records, want 1 (no record under the mutated key)", m.Len())
	}
}

func TestThousandConcurrentDuplicatesWait(t *testing.T) {
	_, cs := newMemory()
	g := mustGuard(t, cs, guard.WithWait(10*time.Second))
	const n = 1000
	var runs atomic.Int64
	keyc := make(chan string, 1)
	release := make(chan struct{})
	fn := func(ctx context.Context) (charge, error) {
		runs.Add(1)
		k, _ := guard.KeyFromContext(ctx)
		keyc <- k
		<-release
		return charge{ChargeID: "ch_once", Amount: 7}, nil
	}
	results := make([]charge, n)
	errs := make([]error, n)
	var done sync.WaitGroup
	for i := range n {
		done.Add(1)
		go func() {
			defer done.Done()
			results[i], errs[i] = guard.Do(ctx, g, "charge", order{ID: "hot"}, fn)
		}()
	}
	// Let the body finish only once every duplicate has joined it.
	key := <-keyc
	waitFor(t, "all duplicates to join", func() bool { return g.Joined(key) == n-1 })
	close(release)
	done.Wait()

	if runs.Load() != 1 {
		t.Fatalf("function ran %d times, want 1", runs.Load())
	}
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("call %d: %v", i, errs[i])
		}
		if results[i] != (charge{ChargeID: "ch_once", Amount: 7}) {
			t.Fatalf("call %d got %+v", i, results[i])
		}
	}
	if got := cs.acquires.Load(); got > 2 {
		t.Errorf("%d store claims for %d duplicates, want at most 2", got, n)
	}
}

func TestThousandConcurrentDuplicatesReject(t *testing.T) {
	_, cs := newMemory()
	g := mustGuard(t, cs)
	const n = 1000
	var runs atomic.Int64
	release := make(chan struct{})
	fn := func(context.Context) (int, error) {
		runs.Add(1)
		<-release
		return 42, nil
	}
	errs := make([]error, n)
	vals := make([]int, n)
	var done sync.WaitGroup
	for i := range n {
		done.Add(1)
		go func() {
			defer done.Done()
			vals[i], errs[i] = guard.Do(ctx, g, "job", "hot", fn)
		}()
	}
	waitFor(t, "the body to start", func() bool { return runs.Load() == 1 })
	time.Sleep(20 * time.Millisecond)
	close(release)
	done.Wait()
	if runs.Load() != 1 {
		t.Fatalf("function ran %d times, want 1", runs.Load())
	}
	var ok, busy int
	for i := range n {
		switch {
		case errs[i] == nil && vals[i] == 42:
			ok++
		case errors.Is(errs[i], guard.ErrInProgress):
			busy++
			var ip *adapt.InProgressError
			if !errors.As(errs[i], &ip) || ip.LeaseExpiresAt.IsZero() {
				t.Errorf("call %d: %v carries no lease end", i, errs[i])
			}
		default:
			t.Fatalf("call %d: %d, %v", i, vals[i], errs[i])
		}
	}
	if ok == 0 || busy == 0 {
		t.Errorf("%d results and %d rejections; want both (the executing call, and rejected duplicates)", ok, busy)
	}
	if got := cs.acquires.Load(); got > int64(ok)+1 {
		t.Errorf("%d store claims, want at most one per call that did not join in-process (%d)", got, ok+1)
	}
}

// Two guards over one store stand for two processes.
func TestCrossProcessRejectAndWait(t *testing.T) {
	m, _ := newMemory()
	p1 := mustGuard(t, m)
	p2reject := mustGuard(t, m)
	p2wait := mustGuard(t, m, guard.WithWait(5*time.Second), adapt.WithWaitBackoff(time.Millisecond, 5*time.Millisecond))

	inside := make(chan struct{})
	release := make(chan struct{})
	var runs atomic.Int64
	var p1res int
	var p1err error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		p1res, p1err = guard.Do(ctx, p1, "job", "k", func(context.Context) (int, error) {
			runs.Add(1)
			close(inside)
			<-release
			return 7, nil
		})
	}()
	<-inside

	_, err := guard.Do(ctx, p2reject, "job", "k", func(context.Context) (int, error) { runs.Add(1); return 0, nil })
	var ip *adapt.InProgressError
	if !errors.As(err, &ip) || !errors.Is(err, guard.ErrInProgress) {
		t.Fatalf("reject mode while held elsewhere: %v, want *InProgressError", err)
	}

	var waited int
	var waitErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		waited, waitErr = guard.Do(ctx, p2wait, "job", "k", func(context.Context) (int, error) { runs.Add(1); return -1, nil })
	}()
	time.Sleep(20 * time.Millisecond) // the waiter polls a few times
	close(release)
	wg.Wait()
	if p1err != nil || p1res != 7 {
		t.Fatalf("holder: %d, %v", p1res, p1err)
	}
	if waitErr != nil || waited != 7 {
		t.Errorf("waiter: %d, %v; want the holder's 7", waited, waitErr)
	}
	if runs.Load() != 1 {
		t.Errorf("function ran %d times, want 1", runs.Load())
	}
}

func TestWaitBudgetEnds(t *testing.T) {
	m, _ := newMemory()
	now := time.Now()
	// A holder that never finishes and whose lease is long.
	if _, err := m.Acquire(ctx, &store.Record{Key: "job#" + keyHash(t, "k"), Status: store.StatusInProgress, Token: "other", ExpiresAt: now.Add(time.Hour), LeaseExpiresAt: now.Add(time.Hour)}, now); err != nil {
		t.Fatal(err)
	}
	g := mustGuard(t, m, guard.WithWait(60*time.Millisecond), adapt.WithWaitBackoff(5*time.Millisecond, 10*time.Millisecond))
	start := time.Now()
	_, err := guard.Do(ctx, g, "job", "k", func(context.Context) (int, error) { t.Error("function ran"); return 0, nil })
	if !errors.Is(err, guard.ErrInProgress) {
		t.Fatalf("err = %v, want ErrInProgress", err)
	}
	if el := time.Since(start); el < 50*time.Millisecond {
		t.Errorf("gave up after %v, before the wait budget", el)
	}
}

// A holder that crashed leaves an in-progress record; a waiter takes over as
// soon as its lease lapses and runs the function itself.
func TestWaitTakesOverLapsedLease(t *testing.T) {
	m, _ := newMemory()
	now := time.Now()
	key := "job#" + keyHash(t, "k")
	if _, err := m.Acquire(ctx, &store.Record{Key: key, Status: store.StatusInProgress, Token: "crashed", ExpiresAt: now.Add(time.Hour), LeaseExpiresAt: now.Add(150 * time.Millisecond)}, now); err != nil {
		t.Fatal(err)
	}
	g := mustGuard(t, m, guard.WithWait(5*time.Second))
	v, out, err := adapt.Execute(ctx, g, "job", "k", func(context.Context) (int, error) { return 9, nil })
	if err != nil || v != 9 || out != guard.OutcomeExecuted {
		t.Fatalf("= %d, %v, %v; want 9, executed", v, out, err)
	}
	if el := time.Since(now); el < 150*time.Millisecond {
		t.Errorf("took over after %v, before the lease lapsed", el)
	}
	rec, _ := m.Get(ctx, key)
	if rec.Token == "crashed" || rec.Status != store.StatusCompleted {
		t.Errorf("record after takeover: %+v", rec)
	}
}

// keyHash returns the hash part of the key of input, learnt through a
// throwaway guard.
func keyHash(t *testing.T, input any) string {
	t.Helper()
	m, _ := newMemory()
	g := mustGuard(t, m)
	var key string
	if _, err := guard.Do(ctx, g, "x", input, func(ctx context.Context) (int, error) {
		key, _ = guard.KeyFromContext(ctx)
		return 0, nil
	}); err != nil {
		t.Fatal(err)
	}
	return strings.TrimPrefix(key, "x#")
}

// A zombie — a holder paused past its lease while another caller took over —
// cannot complete: its context is cancelled as soon as its lease end passes
// on its own clock, its completion is fenced, it gets ErrLeaseLost, and the
// new holder's result is the one replayed.
func TestZombieCompletionIsFenced(t *testing.T) {
	m := newMemoryStore()
	clock := newFakeClock()
	zs := newCounting(m) // the zombie's view of the store
	zombie := mustGuard(t, zs, adapt.WithClock(clock), guard.WithLease(30*time.Second))
	holder := mustGuard(t, m, adapt.WithClock(clock), guard.WithLease(30*time.Second))

	inside := make(chan struct{})
	resume := make(chan struct{})
	var cause error
	var zv string
	var zerr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		zv, zerr = guard.Do(ctx, zombie, "charge", "order-1", func(ctx context.Context) (string, error) {
			close(inside)
			<-resume
			<-ctx.Done()
			cause = context.Cause(ctx)
			return "zombie-result", nil
		})
	}()
	<-inside
	// The zombie is cut off from the store: its lease extensions fail, and
	// its lease runs out.
	zs.set(func(c *countingStore) { c.failExtend = errors.New("network partition") })
	for range 4 {
		clock.Advance(8 * time.Second)
		time.Sleep(2 * time.Millisecond)
	}
	waitFor(t, "a failed extension", func() bool { return zs.extends.Load() > 0 })

	hv, out, err := adapt.Execute(ctx, holder, "charge", "order-1", func(context.Context) (string, error) { return "holder-result", nil })
	if err != nil || out != guard.OutcomeExecuted || hv != "holder-result" {
		t.Fatalf("new holder: %q, %v, %v", hv, out, err)
	}
	// The partition heals; the zombie resumes and tries to complete.
	zs.set(func(c *countingStore) { c.failExtend = nil })
	close(resume)
	wg.Wait()
	if !errors.Is(cause, guard.ErrLeaseLost) {
		t.Errorf("zombie's context cause = %v, want ErrLeaseLost", cause)
	}
	if !errors.Is(zerr, guard.ErrLeaseLost) || zv != "" {
		t.Errorf("zombie got %q, %v; want ErrLeaseLost and no result", zv, zerr)
	}
	rv, out, err := adapt.Execute(ctx, holder, "charge", "order-1", func(context.Context) (string, error) { return "third run", nil })
	if err != nil || out != guard.OutcomeReplayed || rv != "holder-result" {
		t.Errorf("replay = %q, %v, %v; want the new holder's result", rv, out, err)
	}
}

func TestLeaseKeeperExtendsWhileRunning(t *testing.T) {
	m := newMemoryStore()
	clock := newFakeClock()
	cs := newCounting(m)
	g := mustGuard(t, cs, adapt.WithClock(clock), guard.WithLease(3*time.Second))
	other := mustGuard(t, m, adapt.WithClock(clock))

	inside := make(chan string)
	release := make(chan struct{})
	go guard.Do(ctx, g, "job", "long", func(ctx context.Context) (int, error) {
		k, _ := guard.KeyFromContext(ctx)
		inside <- k
		<-release
		return 1, nil
	})
	key := <-inside
	before, _ := m.Get(ctx, key)
	for i := 0; i < 5; i++ { // 5 s of a 3 s lease, in 1 s steps
		// The keeper's next tick is armed before the clock moves past it.
		if err := clock.BlockUntilContext(ctx, 1); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Second)
		want := int64(i + 1)
		waitFor(t, "an extension", func() bool { return cs.extends.Load() >= want })
	}
	after, _ := m.Get(ctx, key)
	if !after.LeaseExpiresAt.After(before.LeaseExpiresAt.Add(time.Second)) {
		t.Fatalf("lease not extended: %v then %v", before.LeaseExpiresAt, after.LeaseExpiresAt)
	}
	// 5 s after the claim, past the original 3 s lease, the key is still held.
	_, err := guard.Do(ctx, other, "job", "long", func(context.Context) (int, error) { t.Error("ran while held"); return 0, nil })
	if !errors.Is(err, guard.ErrInProgress) {
		t.Errorf("second caller: %v, want ErrInProgress", err)
	}
	close(release)
}

// Calls that start at different times, on guards with different clocks,
// each have their lease extended on their own schedule, and short calls in
// between (which end before their first extension) leave them be.
func TestLeaseKeeperManyCalls(t *testing.T) {
	m := newMemoryStore()
	clock, own := newFakeClock(), newFakeClock()
	g := mustGuard(t, m, adapt.WithClock(clock), guard.WithLease(3*time.Second))
	gOwn := mustGuard(t, m, adapt.WithClock(own), guard.WithLease(3*time.Second))

	release := make(chan struct{})
	keys := make(chan string)
	long := func(c adapt.Clock, id string) {
		gg := g
		if c == own {
			gg = gOwn
		}
		go guard.Do(ctx, gg, "job", id, func(ctx context.Context) (int, error) {
			k, _ := guard.KeyFromContext(ctx)
			keys <- k
			<-release
			return 1, nil
		})
	}
	long(clock, "a")
	a := <-keys
	clock.Advance(500 * time.Millisecond)
	long(clock, "b")
	b := <-keys
	long(own, "c") // another guard, with a clock of its own
	c := <-keys
	for i := range 20 {
		if _, err := guard.Do(ctx, g, "job", i, func(context.Context) (int, error) { return i, nil }); err != nil {
			t.Fatal(err)
		}
	}
	leaseEnd := func(key string) time.Time {
		rec, err := m.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return rec.LeaseExpiresAt
	}
	firstA, firstB, firstC := leaseEnd(a), leaseEnd(b), leaseEnd(c)
	for range 10 { // 5 s of a 3 s lease, in half-second steps
		clock.Advance(500 * time.Millisecond)
		own.Advance(500 * time.Millisecond)
		time.Sleep(2 * time.Millisecond)
	}
	// Every extension moves the lease to now + 3 s: after 5 s, each lease
	// must end later than its first end plus 3 s.
	waitFor(t, "the long calls' extensions", func() bool {
		return leaseEnd(a).After(firstA.Add(3*time.Second)) && leaseEnd(b).After(firstB.Add(3*time.Second)) &&
			leaseEnd(c).After(firstC.Add(3*time.Second))
	})
	close(release)
}

func TestErrorReleasesRecord(t *testing.T) {
	m, cs := newMemory()
	g := mustGuard(t, cs)
	var runs atomic.Int64
	boom := errors.New("transient failure")
	fn := func(context.Context) (int, error) {
		if runs.Add(1) == 1 {
			return 0, boom
		}
		return 2, nil
	}
	if _, err := guard.Do(ctx, g, "job", "k", fn); !errors.Is(err, boom) {
		t.Fatalf("first call: %v, want the function's error", err)
	}
	if m.Len() != 0 || cs.releases.Load() != 1 {
		t.Fatalf("after a failure: %d records, %d releases; want 0, 1", m.Len(), cs.releases.Load())
	}
	if v, err := guard.Do(ctx, g, "job", "k", fn); err != nil || v != 2 {
		t.Fatalf("retry = %d, %v; want the function to run again", v, err)
	}
	if runs.Load() != 2 {
		t.Errorf("function ran %d times, want 2", runs.Load())
	}
}

var errDeclined = errors.New("card declined")

func TestDefiniteErrorStoredAndReplayed(t *testing.T) {
	m, _ := newMemory()
	var runs atomic.Int64
	t.Run("Definite marker", func(t *testing.T) {
		g := mustGuard(t, m)
		fn := func(context.Context) (int, error) { runs.Add(1); return 0, guard.Definite(errDeclined) }
		_, out, err := adapt.Execute(ctx, g, "charge", "o-1", fn)
		if !errors.Is(err, errDeclined) || out != guard.OutcomeExecuted {
			t.Fatalf("first: %v, %v", out, err)
		}
		_, out, err = adapt.Execute(ctx, g, "charge", "o-1", fn)
		var re *adapt.ReplayedError
		if !errors.As(err, &re) || re.Message != "card declined" || out != guard.OutcomeReplayed {
			t.Fatalf("replay: %v, %v; want a ReplayedError with the message", out, err)
		}
		if runs.Load() != 1 {
			t.Errorf("function ran %d times, want 1", runs.Load())
		}
	})
	t.Run("predicate and codec", func(t *testing.T) {
		g := mustGuard(t, m,
			guard.WithDefiniteErrors(func(err error) bool { return errors.Is(err, errDeclined) }),
			adapt.WithErrorCodec(declineCodec{}))
		fn := func(context.Context) (int, error) { runs.Add(1); return 0, fmt.Errorf("charging: %w", errDeclined) }
		guard.Do(ctx, g, "charge", "o-2", fn)
		_, err := guard.Do(ctx, g, "charge", "o-2", fn)
		if !errors.Is(err, errDeclined) {
			t.Fatalf("replay: %v, want errDeclined through the custom codec", err)
		}
		if runs.Load() != 2 {
			t.Errorf("function ran %d times in all, want 2", runs.Load())
		}
	})
}

type declineCodec struct{}

func (declineCodec) EncodeError(err error) ([]byte, error) { return []byte(`"declined"`), nil }
func (declineCodec) DecodeError([]byte) error              { return errDeclined }

func TestPanicReleasesAndRepanics(t *testing.T) {
	m, _ := newMemory()
	g := mustGuard(t, m)
	func() {
		defer func() {
			if r := recover(); r != "kaboom" {
				t.Errorf("recovered %v, want the function's panic value", r)
			}
		}()
		guard.Do(ctx, g, "job", "k", func(context.Context) (int, error) { panic("kaboom") })
		t.Error("Do returned after the function panicked")
	}()
	if m.Len() != 0 {
		t.Errorf("a panicking call left %d records, want 0", m.Len())
	}
	if v, err := guard.Do(ctx, g, "job", "k", func(context.Context) (int, error) { return 5, nil }); err != nil || v != 5 {
		t.Errorf("after the panic: %d, %v; want the function to run again", v, err)
	}
}

func TestPanicReachesJoinedCallers(t *testing.T) {
	m, _ := newMemory()
	g := mustGuard(t, m, guard.WithWait(5*time.Second))
	inside := make(chan struct{})
	release := make(chan struct{})
	go func() {
		defer func() { recover() }()
		guard.Do(ctx, g, "job", "k", func(context.Context) (int, error) {
			close(inside)
			<-release
			panic("kaboom")
		})
	}()
	<-inside
	errc := make(chan error)
	go func() {
		_, err := guard.Do(ctx, g, "job", "k", func(context.Context) (int, error) { return 0, nil })
		errc <- err
	}()
	time.Sleep(20 * time.Millisecond) // the second call joins the first
	close(release)
	err := <-errc
	var pe *adapt.PanicError
	if !errors.As(err, &pe) || pe.Value != "kaboom" {
		t.Errorf("joined caller got %v, want a PanicError", err)
	}
}

func TestPayloadMismatchOnEveryPath(t *testing.T) {
	opts := []guard.Option{guard.WithKeyPath("id"), guard.WithPayloadValidation("amount")}
	o1 := order{ID: "o-1", Amount: 100}
	o1b := order{ID: "o-1", Amount: 999} // same key, other payload
	ok := func(context.Context) (int, error) { return 1, nil }
	checkMismatch := func(t *testing.T, err error) {
		t.Helper()
		var me *adapt.MismatchError
		if !errors.Is(err, guard.ErrPayloadMismatch) || !errors.As(err, &me) || me.Existing == nil {
			t.Fatalf("err = %v, want a MismatchError carrying the record", err)
		}
	}

	t.Run("conflict with completed", func(t *testing.T) {
		m, _ := newMemory()
		g := mustGuard(t, m, opts...)
		guard.Do(ctx, g, "s", o1, ok)
		_, err := guard.Do(ctx, g, "s", o1b, ok)
		checkMismatch(t, err)
		if v, err := guard.Do(ctx, g, "s", o1, ok); err != nil || v != 1 {
			t.Errorf("the original payload still replays: %d, %v", v, err)
		}
	})
	t.Run("conflict with in progress", func(t *testing.T) {
		for _, mode := range []guard.Option{guard.WithWait(0), guard.WithWait(time.Second)} {
			m, _ := newMemory()
			g := mustGuard(t, m, opts...)
			other := mustGuard(t, m, append(opts, mode)...)
			inside, release := make(chan struct{}), make(chan struct{})
			go guard.Do(ctx, g, "s", o1, func(context.Context) (int, error) { close(inside); <-release; return 1, nil })
			<-inside
			_, err := guard.Do(ctx, other, "s", o1b, ok)
			close(release)
			checkMismatch(t, err)
		}
	})
	t.Run("local cache", func(t *testing.T) {
		m, cs := newMemory()
		g := mustGuard(t, cs, append(opts, guard.WithCache(16, 0))...)
		guard.Do(ctx, g, "s", o1, ok)
		before := cs.acquires.Load()
		_, err := guard.Do(ctx, g, "s", o1b, ok)
		checkMismatch(t, err)
		if cs.acquires.Load() != before {
			t.Error("the mismatch was not found in the cache (a store call was made)")
		}
		_ = m
	})
	t.Run("wait loop result", func(t *testing.T) {
		// A holder whose claim carries this call's payload hash, but whose
		// completed record carries another: only the wait loop's replay can
		// catch it.
		m, _ := newMemory()
		waiter := mustGuard(t, m, append(opts, guard.WithWait(5*time.Second), adapt.WithWaitBackoff(time.Millisecond, 2*time.Millisecond))...)
		var key, hash, otherHash string
		probe := mustGuard(t, newMemoryStore(), opts...)
		guard.Do(ctx, probe, "s", o1b, func(ctx context.Context) (int, error) { return 0, nil })
		rec := lastRecord(t, probe)
		key, otherHash = rec.Key, rec.PayloadHash
		probe2 := mustGuard(t, newMemoryStore(), opts...)
		guard.Do(ctx, probe2, "s", o1, func(ctx context.Context) (int, error) { return 0, nil })
		hash = lastRecord(t, probe2).PayloadHash
		now := time.Now()
		claim := &store.Record{Key: key, Status: store.StatusInProgress, Token: "t", PayloadHash: hash, ExpiresAt: now.Add(time.Hour), LeaseExpiresAt: now.Add(time.Hour)}
		if _, err := m.Acquire(ctx, claim, now); err != nil {
			t.Fatal(err)
		}
		go func() {
			time.Sleep(20 * time.Millisecond)
			done := *claim
			done.Status, done.PayloadHash, done.Result = store.StatusCompleted, otherHash, []byte(`1`)
			m.Complete(ctx, &done)
		}()
		_, err := guard.Do(ctx, waiter, "s", o1, ok)
		checkMismatch(t, err)
	})
}

// lastRecord returns the only record of g's memory store.
func lastRecord(t *testing.T, g *guard.Guard) *store.Record {
	t.Helper()
	m := g.Store().(*memoryStore)
	var rec *store.Record
	m.each(func(r store.Record) { rec = &r })
	if rec == nil {
		t.Fatal("no record")
	}
	return rec
}

func TestTooLargeResultIsNotRunTwice(t *testing.T) {
	_, cs := newMemory()
	cs.set(func(c *countingStore) { c.tooLarge = 1000 })
	g := mustGuard(t, cs)
	var runs atomic.Int64
	big := strings.Repeat("x", 5000)
	fn := func(context.Context) (string, error) { runs.Add(1); return big, nil }
	v, err := guard.Do(ctx, g, "report", "r-1", fn)
	if err != nil || v != big {
		t.Fatalf("first call: %d bytes, %v; want the result", len(v), err)
	}
	_, err = guard.Do(ctx, g, "report", "r-1", fn)
	if !errors.Is(err, guard.ErrResultUnavailable) {
		t.Fatalf("replay: %v, want ErrResultUnavailable", err)
	}
	if runs.Load() != 1 {
		t.Errorf("function ran %d times, want 1", runs.Load())
	}
}

func TestUnencodableResultIsNotRunTwice(t *testing.T) {
	m, _ := newMemory()
	g := mustGuard(t, m)
	var runs atomic.Int64
	fn := func(context.Context) (func(), error) { runs.Add(1); return func() {}, nil }
	if _, err := guard.Do(ctx, g, "job", "k", fn); err != nil {
		t.Fatalf("first call: %v", err)
	}
	if _, err := guard.Do(ctx, g, "job", "k", fn); !errors.Is(err, guard.ErrResultUnavailable) {
		t.Fatalf("replay: %v, want ErrResultUnavailable", err)
	}
	if runs.Load() != 1 {
		t.Errorf("function ran %d times, want 1", runs.Load())
	}
}

func TestCompletionRetriedWhileLeaseHolds(t *testing.T) {
	_, cs := newMemory()
	transient := errors.New("connection reset")
	cs.set(func(c *countingStore) {
		c.failComplete = func(n int64) error {
			if n <= 3 {
				return transient
			}
			return nil
		}
	})
	g := mustGuard(t, cs)
	var runs atomic.Int64
	fn := func(context.Context) (int, error) { runs.Add(1); return 3, nil }
	if v, err := guard.Do(ctx, g, "job", "k", fn); err != nil || v != 3 {
		t.Fatalf("first call: %d, %v", v, err)
	}
	if cs.completes.Load() != 4 {
		t.Errorf("completes = %d, want 4 (3 failures, then success)", cs.completes.Load())
	}
	if v, out, err := adapt.Execute(ctx, g, "job", "k", fn); err != nil || v != 3 || out != guard.OutcomeReplayed {
		t.Errorf("replay: %d, %v, %v", v, out, err)
	}
	if runs.Load() != 1 {
		t.Errorf("function ran %d times, want 1", runs.Load())
	}
}

func TestCompletionGivesUpWhenLeaseEnds(t *testing.T) {
	_, cs := newMemory()
	down := errors.New("store down")
	cs.set(func(c *countingStore) { c.failComplete = func(int64) error { return down } })
	g := mustGuard(t, cs, guard.WithLease(time.Second))
	start := time.Now()
	_, err := guard.Do(ctx, g, "job", "k", func(context.Context) (int, error) { return 1, nil })
	if !errors.Is(err, guard.ErrNotRecorded) || !errors.Is(err, down) {
		t.Fatalf("err = %v, want ErrNotRecorded wrapping the store error", err)
	}
	if el := time.Since(start); el < 900*time.Millisecond {
		t.Errorf("gave up after %v, before the 1 s lease ended", el)
	}
	if cs.completes.Load() < 3 {
		t.Errorf("completion tried %d times, want retries", cs.completes.Load())
	}
}

func TestResultFilterSkipsStoring(t *testing.T) {
	m, _ := newMemory()
	g := mustGuard(t, m, guard.WithResultFilter(func(v any) bool { return v.(string) != "pending" }))
	var runs atomic.Int64
	fn := func(context.Context) (string, error) {
		if runs.Add(1) == 1 {
			return "pending", nil
		}
		return "settled", nil
	}
	if v, _ := guard.Do(ctx, g, "job", "k", fn); v != "pending" {
		t.Fatalf("first = %q", v)
	}
	if m.Len() != 0 {
		t.Fatalf("a filtered result was stored")
	}
	if v, _ := guard.Do(ctx, g, "job", "k", fn); v != "settled" {
		t.Fatalf("second = %q, want the function to run again", v)
	}
	if v, out, _ := adapt.Execute(ctx, g, "job", "k", fn); v != "settled" || out != guard.OutcomeReplayed {
		t.Fatalf("third = %q, %v; want the stored result", v, out)
	}
}

func TestLocalCache(t *testing.T) {
	m := newMemoryStore()
	cs := newCounting(m)
	clock := newFakeClock()
	var hooked []guard.Outcome
	g := mustGuard(t, cs, guard.WithCache(8, 0), adapt.WithClock(clock), guard.WithTTL(time.Minute),
		guard.WithOutcomeHook(func(_ context.Context, key string, rec *store.Record, out guard.Outcome) {
			hooked = append(hooked, out)
		}))
	var runs atomic.Int64
	fn := func(context.Context) (int, error) { return int(runs.Add(1)), nil }
	guard.Do(ctx, g, "job", "k", fn)
	calls := cs.acquires.Load()
	for i := 0; i < 10; i++ {
		if v, out, err := adapt.Execute(ctx, g, "job", "k", fn); v != 1 || out != guard.OutcomeReplayed || err != nil {
			t.Fatalf("cached replay: %d, %v, %v", v, out, err)
		}
	}
	if cs.acquires.Load() != calls {
		t.Errorf("cached replays made %d store calls, want 0", cs.acquires.Load()-calls)
	}
	if len(hooked) != 11 || hooked[0] != guard.OutcomeExecuted || slices.ContainsFunc(hooked[1:], func(o guard.Outcome) bool { return o != guard.OutcomeReplayed }) {
		t.Errorf("outcome hook called with %v; want executed once, then replayed 10 times", hooked)
	}
	// Expired: neither the cache nor the store replays it.
	clock.Advance(2 * time.Minute)
	if v, out, _ := adapt.Execute(ctx, g, "job", "k", fn); v != 2 || out != guard.OutcomeExecuted {
		t.Errorf("after expiry: %d, %v; want a new execution", v, out)
	}
}

func TestDisabledIsPassThrough(t *testing.T) {
	t.Setenv(adapt.DisableEnv, "true")
	m, cs := newMemory()
	g := mustGuard(t, cs)
	var runs atomic.Int64
	for i := 0; i < 3; i++ {
		_, out, err := adapt.Execute(ctx, g, "job", "k", func(context.Context) (int, error) { runs.Add(1); return 0, nil })
		if err != nil || out != guard.OutcomeUnguarded {
			t.Fatalf("%v, %v", out, err)
		}
	}
	if runs.Load() != 3 || m.Len() != 0 || cs.acquires.Load() != 0 {
		t.Errorf("runs %d, records %d, store calls %d; want 3, 0, 0", runs.Load(), m.Len(), cs.acquires.Load())
	}
}

func TestBadInputNeverRuns(t *testing.T) {
	m, _ := newMemory()
	fn := func(context.Context) (int, error) { t.Error("function ran"); return 0, nil }
	if _, err := guard.New(nil); !errors.Is(err, guard.ErrInvalidOption) {
		t.Errorf("New(nil) = %v, want ErrInvalidOption", err)
	}
	var ee *keyformat.ExpressionError
	if _, err := guard.New(m, guard.WithKeyPath("order.[")); !errors.Is(err, guard.ErrInvalidOption) || !errors.As(err, &ee) || ee.Expr != "order.[" {
		t.Errorf("New with a bad key path = %v, want an ExpressionError", err)
	}
	g := mustGuard(t, m)
	if _, err := guard.Wrap(g, "s", func(context.Context, int) (int, error) { return 0, nil }, guard.WithPayloadValidation("a[?")); !errors.As(err, &ee) {
		t.Errorf("Wrap with a bad validation path = %v, want an ExpressionError", err)
	}
	if _, err := guard.Do(ctx, g, "s", 1, fn, guard.WithKeyPath("][")); !errors.As(err, &ee) {
		t.Errorf("Do with a bad key path = %v, want an ExpressionError", err)
	}
	if _, err := guard.Do(ctx, g, "s", make(chan int), fn); !errors.Is(err, guard.ErrInvalidInput) {
		t.Errorf("unmarshallable input = %v, want ErrInvalidInput", err)
	}
	if _, err := guard.Do(ctx, g, "s", order{}, fn, guard.WithKeyPath("missing"), guard.WithRequireKey(true)); !errors.Is(err, guard.ErrKeyMissing) {
		t.Errorf("missing key = %v, want ErrKeyMissing", err)
	}
	if _, err := guard.Do(ctx, g, "", 1, fn); !errors.Is(err, guard.ErrInvalidOption) {
		t.Errorf("empty scope = %v, want ErrInvalidOption", err)
	}
	for _, o := range []guard.Option{guard.WithTTL(0), guard.WithLease(-1), guard.WithWait(-1), guard.WithCache(-1, 0), guard.WithCodec(nil), adapt.WithClock(nil), adapt.WithWaitBackoff(time.Second, time.Millisecond)} {
		if _, err := guard.New(m, o); !errors.Is(err, guard.ErrInvalidOption) {
			t.Errorf("New with an invalid option = %v, want ErrInvalidOption", err)
		}
	}
	if m.Len() != 0 {
		t.Errorf("bad input left %d records", m.Len())
	}
}

func TestStoreFailureBeforeRun(t *testing.T) {
	g := mustGuard(t, failingStore{err: fmt.Errorf("wrapped: %w", store.ErrThrottled)})
	_, err := guard.Do(ctx, g, "s", 1, func(context.Context) (int, error) { t.Error("function ran"); return 0, nil })
	var se *adapt.StoreError
	if !errors.Is(err, guard.ErrStore) || !errors.Is(err, store.ErrThrottled) || !errors.As(err, &se) || se.Op != "acquire" {
		t.Errorf("err = %v, want a StoreError for acquire matching ErrThrottled", err)
	}
}

type failingStore struct {
	store.Store
	err error
}

func (f failingStore) Acquire(context.Context, *store.Record, time.Time) (*store.Record, error) {
	return nil, f.err
}

func TestCancelledContextNeverRuns(t *testing.T) {
	m, _ := newMemory()
	g := mustGuard(t, m)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err := guard.Do(cctx, g, "s", 1, func(context.Context) (int, error) { t.Error("function ran"); return 0, nil })
	if !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
}

// The lease defaults to the context deadline.
func TestLeaseFollowsContextDeadline(t *testing.T) {
	m := newMemoryStore()
	g := mustGuard(t, m)
	dctx, cancel := context.WithTimeout(ctx, 42*time.Second)
	defer cancel()
	guard.Do(dctx, g, "s", 1, func(ctx context.Context) (int, error) {
		k, _ := guard.KeyFromContext(ctx)
		rec, _ := m.Get(ctx, k)
		if lease := time.Until(rec.LeaseExpiresAt); lease < 40*time.Second || lease > 43*time.Second {
			t.Errorf("lease %v, want about the 42 s left on the context", lease)
		}
		return 0, nil
	})
	guard.Do(ctx, g, "s", 2, func(ctx context.Context) (int, error) {
		k, _ := guard.KeyFromContext(ctx)
		rec, _ := m.Get(ctx, k)
		if lease := time.Until(rec.LeaseExpiresAt); lease < adapt.DefaultLease-time.Second || lease > adapt.DefaultLease {
			t.Errorf("lease %v without a deadline, want DefaultLease", lease)
		}
		return 0, nil
	})
}

func TestReentrantCallDoesNotDeadlock(t *testing.T) {
	m, _ := newMemory()
	g := mustGuard(t, m, guard.WithWait(time.Minute))
	var inner error
	_, err := guard.Do(ctx, g, "job", "k", func(ctx context.Context) (int, error) {
		_, inner = guard.Do(ctx, g, "job", "k", func(context.Context) (int, error) { return 2, nil })
		return 1, nil
	})
	if err != nil || !errors.Is(inner, guard.ErrInProgress) {
		t.Errorf("outer %v, inner %v; want the inner call rejected as in progress", err, inner)
	}
}
