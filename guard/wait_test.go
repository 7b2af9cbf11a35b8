package guard_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/memory"
)

// watchStore is a memory store, which pushes completions to watches, as
// one process's client: it counts the process's reads and watches, and can
// act in the middle of a Watch or replace it.
type watchStore struct {
	*memory.Store
	gets, watches, acquires atomic.Int64

	mu          sync.Mutex
	beforeWatch func(n int64)                                         // before the n-th Watch subscribes (1-based)
	watch       func(n int64, key string) (store.Subscription, error) // replaces the n-th Watch, if set
}

func (w *watchStore) Get(ctx context.Context, key string) (*store.Record, error) {
	w.gets.Add(1)
	return w.Store.Get(ctx, key)
}

func (w *watchStore) Acquire(ctx context.Context, rec *store.Record, now time.Time) (*store.Record, error) {
	w.acquires.Add(1)
	return w.Store.Acquire(ctx, rec, now)
}

func (w *watchStore) Watch(ctx context.Context, key string) (store.Subscription, error) {
	n := w.watches.Add(1)
	w.mu.Lock()
	before, replace := w.beforeWatch, w.watch
	w.mu.Unlock()
	if before != nil {
		before(n)
	}
	if replace != nil {
		if sub, err := replace(n, key); sub != nil || err != nil {
			return sub, err
		}
	}
	return w.Store.Watch(ctx, key)
}

// lostSub is a subscription that its store lost at once.
type lostSub struct{ done chan struct{} }

func newLostSub() lostSub               { d := make(chan struct{}); close(d); return lostSub{d} }
func (s lostSub) Done() <-chan struct{} { return s.done }
func (s lostSub) Err() error            { return fmt.Errorf("test: connection dropped: %w", store.ErrWatchLost) }
func (s lostSub) Stop()                 {}

// settle bounds how long a test waits for a call that must return: a
// wait that is never woken fails the test instead of hanging it.
const settle = 30 * time.Second

func result[T any](t *testing.T, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(settle):
		t.Fatalf("%s: still waiting after %v: a completion was missed", what, settle)
		panic("unreachable")
	}
}

type waited struct {
	v   int
	out guard.Outcome
	err error
}

// TestWaitCompletionWhileSubscribingNotMissed: a completion that lands
// after a duplicate found the claim in progress but before its
// subscription is in effect is neither notified nor missed: the waiter
// reads the record once it has subscribed. On a fake clock that never
// moves, no poll and no budget can rescue a waiter that skipped that read.
func TestWaitCompletionWhileSubscribingNotMissed(t *testing.T) {
	for _, tc := range []struct {
		name  string
		after bool // complete just after subscribing (notified) rather than before (read)
	}{{"before the subscription", false}, {"after the subscription", true}} {
		t.Run(tc.name, func(t *testing.T) {
			s := &watchStore{Store: memory.New()}
			clock := newFakeClock()
			holder := mustGuard(t, s, adapt.WithClock(clock))
			dup := mustGuard(t, s, adapt.WithClock(clock))
			cl, _, err := adapt.Obtain(ctx, holder, "pay", "o-1")
			if err != nil || cl == nil {
				t.Fatalf("claim: %v, %v", cl, err)
			}
			complete := func() {
				b, _ := json.Marshal(7)
				if _, err := adapt.Complete(ctx, holder, *cl, store.ResultValue, b); err != nil {
					t.Errorf("complete: %v", err)
				}
			}
			s.mu.Lock()
			if tc.after {
				s.watch = func(n int64, key string) (store.Subscription, error) {
					if n != 1 {
						return nil, nil
					}
					sub, err := s.Store.Watch(ctx, key)
					complete()
					return sub, err
				}
			} else {
				s.beforeWatch = func(n int64) {
					if n == 1 {
						complete()
					}
				}
			}
			s.mu.Unlock()
			ch := make(chan waited, 1)
			go func() {
				v, out, err := adapt.Execute(ctx, dup, "pay", "o-1", func(context.Context) (int, error) { return 8, nil }, guard.WithWait(time.Hour))
				ch <- waited{v, out, err}
			}()
			got := result(t, "duplicate", ch)
			if got.err != nil || got.v != 7 || got.out != guard.OutcomeReplayed {
				t.Fatalf("duplicate: %d, %v, %v; want the holder's 7, replayed", got.v, got.out, got.err)
			}
			if n := s.watches.Load(); n < 1 {
				t.Errorf("%d watches, want the duplicate to have subscribed", n)
			}
		})
	}
}

// TestWaitLostSubscriptionPolls: a subscription the store loses, and a
// store that cannot subscribe again, leave the waiter polling the record,
// and it still returns the holder's result.
func TestWaitLostSubscriptionPolls(t *testing.T) {
	s := &watchStore{Store: memory.New()}
	holder := mustGuard(t, s)
	dup := mustGuard(t, s)
	cl, _, err := adapt.Obtain(ctx, holder, "pay", "o-2")
	if err != nil || cl == nil {
		t.Fatalf("claim: %v, %v", cl, err)
	}
	lost := make(chan struct{})
	s.mu.Lock()
	s.watch = func(n int64, key string) (store.Subscription, error) {
		if n == 1 {
			defer close(lost)
			return newLostSub(), nil
		}
		return nil, errors.New("test: server unreachable")
	}
	s.mu.Unlock()
	ch := make(chan waited, 1)
	go func() {
		v, out, err := adapt.Execute(ctx, dup, "pay", "o-2", func(context.Context) (int, error) { return 8, nil }, guard.WithWait(time.Hour), adapt.WithWaitBackoff(time.Millisecond, 10*time.Millisecond))
		ch <- waited{v, out, err}
	}()
	<-lost
	waitFor(t, "a watch after the loss", func() bool { return s.watches.Load() >= 2 })
	gets := s.gets.Load()
	b, _ := json.Marshal(7)
	if _, err := adapt.Complete(ctx, holder, *cl, store.ResultValue, b); err != nil {
		t.Fatal(err)
	}
	got := result(t, "duplicate", ch)
	if got.err != nil || got.v != 7 || got.out != guard.OutcomeReplayed {
		t.Fatalf("duplicate: %d, %v, %v; want the holder's 7, replayed", got.v, got.out, got.err)
	}
	if s.gets.Load() <= gets {
		t.Errorf("no read after the subscription was lost: the waiter did not poll")
	}
}

// TestWaitReleaseWakesOneRunner: a released key wakes its waiters, and
// exactly one of them runs the function; the others replay its result.
func TestWaitReleaseWakesOneRunner(t *testing.T) {
	s := &watchStore{Store: memory.New()}
	holder := mustGuard(t, s)
	cl, _, err := adapt.Obtain(ctx, holder, "pay", "o-3")
	if err != nil || cl == nil {
		t.Fatalf("claim: %v, %v", cl, err)
	}
	key, _, _ := holder.Key("pay", "o-3")
	const n = 20
	var runs atomic.Int64
	ch := make(chan waited, n)
	for i := range n {
		g := mustGuard(t, s)
		go func() {
			v, out, err := adapt.Execute(ctx, g, "pay", "o-3", func(context.Context) (int, error) { runs.Add(1); return 100 + i, nil }, guard.WithWait(time.Hour))
			ch <- waited{v, out, err}
		}()
	}
	waitFor(t, "every duplicate waiting", func() bool { return guard.WaitingOn(key) == n })
	if err := adapt.Release(ctx, holder, *cl); err != nil {
		t.Fatal(err)
	}
	var executed, replayed int
	first := -1
	for range n {
		got := result(t, "duplicate", ch)
		if got.err != nil {
			t.Fatalf("duplicate: %v", got.err)
		}
		if first == -1 {
			first = got.v
		}
		if got.v != first {
			t.Errorf("duplicates returned %d and %d, want one result", first, got.v)
		}
		switch got.out {
		case guard.OutcomeExecuted:
			executed++
		case guard.OutcomeReplayed:
			replayed++
		}
	}
	if runs.Load() != 1 || executed != 1 || replayed != n-1 {
		t.Errorf("after the release: %d runs, %d executed, %d replayed; want 1, 1, %d", runs.Load(), executed, replayed, n-1)
	}
}

// TestWaitTakesOverAtLeaseEnd: a holder that crashed (its claim neither
// completed nor released) is taken over by its waiter once its lease has
// lapsed, not before, although no notification ever comes.
func TestWaitTakesOverAtLeaseEnd(t *testing.T) {
	s := &watchStore{Store: memory.New()}
	dead := mustGuard(t, s, guard.WithLease(300*time.Millisecond), guard.WithClockSkew(0))
	taker := mustGuard(t, s, guard.WithClockSkew(0))
	cl, _, err := adapt.Obtain(ctx, dead, "pay", "o-4")
	if err != nil || cl == nil {
		t.Fatalf("claim: %v, %v", cl, err)
	}
	ch := make(chan waited, 1)
	go func() {
		v, out, err := adapt.Execute(ctx, taker, "pay", "o-4", func(context.Context) (int, error) { return 9, nil }, guard.WithWait(time.Hour))
		ch <- waited{v, out, err}
	}()
	got := result(t, "waiter", ch)
	if got.err != nil || got.v != 9 || got.out != guard.OutcomeExecuted {
		t.Fatalf("waiter: %d, %v, %v; want 9, executed (a takeover)", got.v, got.out, got.err)
	}
	if now := taker.Now(); now.Before(cl.LeaseExpiresAt) {
		t.Errorf("taken over at %v, before the lease end %v", now, cl.LeaseExpiresAt)
	}
	if s.watches.Load() < 1 {
		t.Errorf("the waiter never subscribed")
	}
}

// TestWaitThousandDuplicatesFourProcesses: 1,000 concurrent duplicates,
// spread over four processes (each its own store client, as four processes
// would have), run the function once; each process's waiters share one
// subscription and its reads.
func TestWaitThousandDuplicatesFourProcesses(t *testing.T) {
	const procs, perProc = 4, 250
	mem := memory.New()
	var runs atomic.Int64
	release := make(chan struct{})
	clients := make([]*watchStore, procs)
	ch := make(chan waited, procs*perProc)
	var key string
	for p := range procs {
		clients[p] = &watchStore{Store: mem}
		for range perProc {
			g := mustGuard(t, clients[p])
			if key == "" {
				key, _, _ = g.Key("pay", "o-5")
			}
			go func() {
				v, out, err := adapt.Execute(ctx, g, "pay", "o-5", func(context.Context) (int, error) {
					runs.Add(1)
					<-release
					return 5, nil
				}, guard.WithWait(time.Hour))
				ch <- waited{v, out, err}
			}()
		}
	}
	waitFor(t, "every duplicate waiting", func() bool { return guard.WaitingOn(key) == procs*perProc-1 })
	close(release)
	for range procs * perProc {
		got := result(t, "duplicate", ch)
		if got.err != nil || got.v != 5 {
			t.Fatalf("duplicate: %d, %v; want 5", got.v, got.err)
		}
	}
	if runs.Load() != 1 {
		t.Errorf("%d runs, want 1", runs.Load())
	}
	for p, c := range clients {
		// Each process: a watch and a read after it, then, notified, a
		// watch and the read that finds the result (a safety poll of a
		// slow machine may add one).
		if w, r := c.watches.Load(), c.gets.Load(); w > 3 || r > 3 {
			t.Errorf("process %d: %d watches and %d reads for its %d duplicates, want one shared subscription and its reads", p, w, r, perProc)
		}
	}
}

// silentSub is a subscription that stays in effect but never hears its
// key's completion: a notification lost without the subscription knowing.
type silentSub struct{ done chan struct{} }

func (s silentSub) Done() <-chan struct{} { return s.done }
func (s silentSub) Err() error            { return nil }
func (s silentSub) Stop()                 {}

// TestWaitSafetyReadAfterThirtySeconds: a waiter whose subscription stays
// in effect reads the record on its own only once the call has been seen
// running for 30 s, so that a lone waiter of a call shorter than that
// makes its three store calls and no more (a safety read at 10 s raced
// the completion of a 10 s call: a fourth); and a notification lost
// without the subscription knowing still ends the wait, at that read.
func TestWaitSafetyReadAfterThirtySeconds(t *testing.T) {
	s := &watchStore{Store: memory.New()}
	clock := newFakeClock()
	holder := mustGuard(t, s, adapt.WithClock(clock), guard.WithLease(time.Hour))
	dup := mustGuard(t, s, adapt.WithClock(clock))
	cl, _, err := adapt.Obtain(ctx, holder, "pay", "o-5")
	if err != nil || cl == nil {
		t.Fatalf("claim: %v, %v", cl, err)
	}
	s.mu.Lock()
	s.watch = func(int64, string) (store.Subscription, error) { return silentSub{make(chan struct{})}, nil }
	s.mu.Unlock()
	ch := make(chan waited, 1)
	go func() {
		v, out, err := adapt.Execute(ctx, dup, "pay", "o-5", func(context.Context) (int, error) { return 8, nil }, guard.WithWait(24*time.Hour))
		ch <- waited{v, out, err}
	}()
	waitFor(t, "the duplicate's watch", func() bool { return s.watches.Load() >= 1 })
	b, _ := json.Marshal(7)
	if _, err := adapt.Complete(ctx, holder, *cl, store.ResultValue, b); err != nil {
		t.Fatal(err)
	}
	// The duplicate's budget timer and its waiter's pause.
	bctx, cancel := context.WithTimeout(ctx, settle)
	defer cancel()
	if err := clock.BlockUntilContext(bctx, 2); err != nil {
		t.Fatalf("the waiter never paused: %v", err)
	}
	gets := s.gets.Load()
	clock.Advance(29 * time.Second)
	select {
	case got := <-ch:
		t.Fatalf("returned %+v after 29 s with no notification: it read the record early (%d reads)", got, s.gets.Load()-gets)
	case <-time.After(200 * time.Millisecond):
	}
	if n := s.gets.Load() - gets; n != 0 {
		t.Fatalf("%d reads within 29 s of a subscription in effect, want none", n)
	}
	clock.Advance(2 * time.Second)
	got := result(t, "duplicate", ch)
	if got.err != nil || got.v != 7 || got.out != guard.OutcomeReplayed {
		t.Fatalf("duplicate: %d, %v, %v; want the holder's 7, replayed at the safety read", got.v, got.out, got.err)
	}
}
