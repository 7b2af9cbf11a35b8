package storetest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/idemguard/idemguard/store"
)

// WatchProbe lets the [store.Watcher] cases look at a store's server
// subscriptions, for stores that subscribe through a server. Give it with
// [WithWatchProbe]; without it the cases that need it are not run (an
// in-process store has no server subscription to count or to drop).
type WatchProbe struct {
	// Subscriptions returns how many server subscriptions (subscribed
	// connections, as the server counts them) s has that can deliver a
	// notification of key.
	Subscriptions func(t *testing.T, s store.Store, key string) int
	// Drop cuts s's subscriber connections from the server's side
	// (CLIENT KILL, pg_terminate_backend), as a failover or a network
	// fault would.
	Drop func(t *testing.T, s store.Store)
}

// WithWatchProbe gives the [store.Watcher] cases a probe of the store's
// server subscriptions.
func WithWatchProbe(p WatchProbe) Option { return func(c *config) { c.watchProbe = &p } }

// watchWait bounds how long a case waits for a notification that must
// come: a correct store delivers it in milliseconds, and a missing one
// fails the case rather than hang it.
const watchWait = 20 * time.Second

// runWatcher runs the [store.Watcher] cases if the stores newStore makes
// implement it, and says so either way.
func runWatcher(t *testing.T, newStore MakeStore, cfg config) {
	t.Run("Watcher", func(t *testing.T) {
		probe := newStore(t)
		if _, ok := probe.(store.Watcher); !ok {
			t.Skipf("%T does not implement store.Watcher: waiters poll it; Watch cases not run", probe)
		}
		tests := []struct {
			name string
			fn   func(t *testing.T, h *harness, w store.Watcher)
		}{
			{"CompletionNotifies", testWatchCompletion},
			{"ReleaseNotifies", testWatchRelease},
			{"WriteBeforeWatchIsRead", testWatchAfterWrite},
			{"WatchThenReadMissesNothing", testWatchThenRead},
			{"OnlyItsKey", testWatchOnlyItsKey},
			{"ManyWatchersOneNotification", testWatchMany},
			{"StopAndCancel", testWatchStop},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				s := newStore(t)
				tc.fn(t, newHarness(t, s), s.(store.Watcher))
			})
		}
		if p := cfg.watchProbe; p != nil {
			if p.Subscriptions != nil {
				t.Run("OneServerSubscriptionPerKey", func(t *testing.T) {
					s := newStore(t)
					testWatchShared(t, newHarness(t, s), s.(store.Watcher), p)
				})
			}
			if p.Drop != nil {
				t.Run("DroppedConnection", func(t *testing.T) {
					s := newStore(t)
					testWatchDropped(t, newHarness(t, s), s.(store.Watcher), p)
				})
			}
		}
		// Last, so that the connections the cases above left lingering
		// have been closed or are counted in the baseline.
		t.Run("NoGoroutineLeft", func(t *testing.T) {
			s := newStore(t)
			testWatchNoLeak(t, newHarness(t, s), s.(store.Watcher))
		})
	})
}

// mustWatch watches key and fails the test on an error.
func (h *harness) mustWatch(t *testing.T, w store.Watcher, key string) store.Subscription {
	t.Helper()
	sub, err := w.Watch(h.ctx, key)
	if err != nil {
		t.Fatalf("Watch(%q) = %v", key, err)
	}
	t.Cleanup(sub.Stop)
	return sub
}

// awaitNotified waits for sub's notification and fails the test if it
// does not come, or comes as a loss.
func awaitNotified(t *testing.T, sub store.Subscription, what string) {
	t.Helper()
	select {
	case <-sub.Done():
		if err := sub.Err(); err != nil {
			t.Fatalf("after %s, the watch ended with %v; want a notification", what, err)
		}
	case <-time.After(watchWait):
		t.Fatalf("after %s, no notification within %v", what, watchWait)
	}
}

// notified reports whether sub's Done channel is closed now.
func notified(sub store.Subscription) bool {
	select {
	case <-sub.Done():
		return true
	default:
		return false
	}
}

// testWatchCompletion: a completion notifies a watch of its key, and the
// completed record is visible when the notification arrives (Get after
// Done reads it).
func testWatchCompletion(t *testing.T, h *harness, w store.Watcher) {
	rec := h.claim("scope#watch-complete", time.Minute)
	h.mustAcquire(t, rec, h.t0)
	sub := h.mustWatch(t, w, rec.Key)
	if notified(sub) || sub.Err() != nil {
		t.Fatalf("the watch ended before anything was written (Err %v)", sub.Err())
	}
	h.mustComplete(t, rec, []byte(`"done"`))
	awaitNotified(t, sub, "Complete")
	if got := h.mustGet(t, rec.Key); got.Status != store.StatusCompleted {
		t.Errorf("Get after the notification = %v; want COMPLETED: a notification must follow the write's visibility", got.Status)
	}
	sub.Stop()
	sub.Stop() // harmless
}

// testWatchRelease: a release notifies a watch of its key, and the record
// is gone when the notification arrives.
func testWatchRelease(t *testing.T, h *harness, w store.Watcher) {
	rec := h.claim("scope#watch-release", time.Minute)
	h.mustAcquire(t, rec, h.t0)
	sub := h.mustWatch(t, w, rec.Key)
	if err := h.s.Release(h.ctx, rec.Key, rec.Token); err != nil {
		t.Fatalf("Release = %v", err)
	}
	awaitNotified(t, sub, "Release")
	if _, err := h.s.Get(h.ctx, rec.Key); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Get after the release's notification = %v; want ErrNotFound", err)
	}
}

// testWatchAfterWrite: a watch made after the completion is not notified
// of it (nothing promises that), but the read that follows the watch sees
// it: that is the ordering rule's other half.
func testWatchAfterWrite(t *testing.T, h *harness, w store.Watcher) {
	rec := h.claim("scope#watch-after", time.Minute)
	h.mustAcquire(t, rec, h.t0)
	h.mustComplete(t, rec, []byte(`"early"`))
	h.mustWatch(t, w, rec.Key)
	if got := h.mustGet(t, rec.Key); got.Status != store.StatusCompleted {
		t.Errorf("Get after Watch = %v; want the completion written before the watch", got.Status)
	}
}

// testWatchThenRead races completions against watchers that watch, then
// read: a watcher whose read still finds the claim in progress must be
// notified. Each key is completed by one goroutine while another watches
// and reads it, at staggered moments, so that some completions land
// before the watch, some between the watch and the read, some after.
func testWatchThenRead(t *testing.T, h *harness, w store.Watcher) {
	const keys = 60
	var wg sync.WaitGroup
	var mu sync.Mutex
	var missed []string
	var inProgress int
	for i := range keys {
		rec := h.claim(fmt.Sprintf("scope#watch-race-%d", i), time.Minute)
		h.mustAcquire(t, rec, h.t0)
		start := make(chan struct{})
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			for range i % 7 {
				runtime.Gosched()
			}
			done := *rec
			done.Status, done.Result, done.ExpiresAt = store.StatusCompleted, []byte(`1`), h.t0.Add(2*time.Hour)
			if err := h.s.Complete(h.ctx, &done); err != nil {
				t.Errorf("Complete(%q) = %v", rec.Key, err)
			}
		}()
		go func() {
			defer wg.Done()
			<-start
			sub, err := w.Watch(h.ctx, rec.Key)
			if err != nil {
				t.Errorf("Watch(%q) = %v", rec.Key, err)
				return
			}
			defer sub.Stop()
			got, err := h.s.Get(h.ctx, rec.Key)
			if err != nil {
				t.Errorf("Get(%q) = %v", rec.Key, err)
				return
			}
			if got.Status == store.StatusCompleted {
				return
			}
			mu.Lock()
			inProgress++
			mu.Unlock()
			select {
			case <-sub.Done():
				if err := sub.Err(); err != nil {
					t.Errorf("the watch of %q ended with %v", rec.Key, err)
				}
			case <-time.After(watchWait):
				mu.Lock()
				missed = append(missed, rec.Key)
				mu.Unlock()
			}
		}()
		close(start)
	}
	wg.Wait()
	if len(missed) > 0 {
		t.Errorf("%d of %d watchers read the claim in progress after watching and were never notified of its completion: %v", len(missed), keys, missed)
	}
	t.Logf("%d of %d watchers read the claim in progress and were notified", inProgress, keys)
}

// testWatchOnlyItsKey: writes to other keys and an Extend of the key
// notify nothing; the notification of another key, watched too, is the
// marker that they have been delivered if they were sent.
func testWatchOnlyItsKey(t *testing.T, h *harness, w store.Watcher) {
	rec := h.claim("scope#watch-mine", time.Minute)
	other := h.claim("scope#watch-other", time.Minute)
	prefix := h.claim("scope#watch-mine-2", time.Minute)
	for _, r := range []*store.Record{rec, other, prefix} {
		h.mustAcquire(t, r, h.t0)
	}
	sub := h.mustWatch(t, w, rec.Key)
	marker := h.mustWatch(t, w, other.Key)
	if err := h.s.Extend(h.ctx, rec.Key, rec.Token, h.t0.Add(2*time.Minute), h.t0.Add(time.Hour)); err != nil {
		t.Fatalf("Extend = %v", err)
	}
	h.mustComplete(t, prefix, []byte(`2`))
	if err := h.s.Release(h.ctx, rec.Key, "not-the-token"); !errors.Is(err, store.ErrTokenMismatch) {
		t.Fatalf("Release under another token = %v; want ErrTokenMismatch", err)
	}
	h.mustComplete(t, other, []byte(`3`))
	awaitNotified(t, marker, "the other key's completion")
	if notified(sub) {
		t.Errorf("a watch of %q was notified by an Extend, a fenced-out Release or other keys' completions (Err %v)", rec.Key, sub.Err())
	}
	h.mustComplete(t, rec, []byte(`1`))
	awaitNotified(t, sub, "Complete")
}

// testWatchMany: many watches of one key, made concurrently, are all
// notified by one completion; a watch made after the notification waits
// for the next write.
func testWatchMany(t *testing.T, h *harness, w store.Watcher) {
	const n = 50
	rec := h.claim("scope#watch-many", time.Minute)
	h.mustAcquire(t, rec, h.t0)
	subs := make([]store.Subscription, n)
	var wg sync.WaitGroup
	for i := range subs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sub, err := w.Watch(h.ctx, rec.Key)
			if err != nil {
				t.Errorf("Watch = %v", err)
				return
			}
			subs[i] = sub
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	for _, sub := range subs {
		t.Cleanup(sub.Stop)
	}
	h.mustComplete(t, rec, []byte(`"many"`))
	for _, sub := range subs {
		awaitNotified(t, sub, "Complete")
	}
	// Used up: a new watch of the key waits for the next write, a
	// retried completion under the same token.
	again := h.mustWatch(t, w, rec.Key)
	for _, sub := range subs[:n/2] {
		sub.Stop()
	}
	h.mustComplete(t, rec, []byte(`"again"`))
	awaitNotified(t, again, "a second Complete")
}

// testWatchStop: Stop before any write leaves the store usable and the
// subscription unnotified; a Watch with a done context fails.
func testWatchStop(t *testing.T, h *harness, w store.Watcher) {
	rec := h.claim("scope#watch-stop", time.Minute)
	h.mustAcquire(t, rec, h.t0)
	sub, err := w.Watch(h.ctx, rec.Key)
	if err != nil {
		t.Fatalf("Watch = %v", err)
	}
	sub.Stop()
	sub.Stop()
	ctx, cancel := context.WithCancel(h.ctx)
	cancel()
	if s, err := w.Watch(ctx, rec.Key); err == nil {
		s.Stop()
		t.Errorf("Watch with a cancelled context succeeded; want the context's error")
	} else if !errors.Is(err, context.Canceled) {
		t.Errorf("Watch with a cancelled context = %v; want an error matching context.Canceled", err)
	}
	live := h.mustWatch(t, w, rec.Key)
	h.mustComplete(t, rec, []byte(`1`))
	awaitNotified(t, live, "Complete after another watch's Stop")
}

// testWatchShared: fifty watches of one key in one store are served by
// one server subscription, and two keys by as many as the store needs
// for each (one each: a connection of its own at most).
func testWatchShared(t *testing.T, h *harness, w store.Watcher, p *WatchProbe) {
	rec := h.claim("scope#watch-shared", time.Minute)
	h.mustAcquire(t, rec, h.t0)
	subs := make([]store.Subscription, 50)
	for i := range subs {
		subs[i] = h.mustWatch(t, w, rec.Key)
	}
	if n := p.Subscriptions(t, h.s, rec.Key); n != 1 {
		t.Errorf("50 watches of one key: the server counts %d subscriptions that deliver it; want 1", n)
	}
	rec2 := h.claim("scope#watch-shared-2", time.Minute)
	h.mustAcquire(t, rec2, h.t0)
	sub2 := h.mustWatch(t, w, rec2.Key)
	if n := p.Subscriptions(t, h.s, rec2.Key); n != 1 {
		t.Errorf("a watch of a second key: the server counts %d subscriptions that deliver it; want 1", n)
	}
	h.mustComplete(t, rec, []byte(`1`))
	for _, sub := range subs {
		awaitNotified(t, sub, "Complete")
	}
	h.mustComplete(t, rec2, []byte(`2`))
	awaitNotified(t, sub2, "Complete")
}

// testWatchDropped: when the server drops the subscriber's connection,
// every watch it served ends with ErrWatchLost, and a new watch
// subscribes again and is notified.
func testWatchDropped(t *testing.T, h *harness, w store.Watcher, p *WatchProbe) {
	rec := h.claim("scope#watch-dropped", time.Minute)
	h.mustAcquire(t, rec, h.t0)
	subs := []store.Subscription{h.mustWatch(t, w, rec.Key), h.mustWatch(t, w, rec.Key)}
	other := h.claim("scope#watch-dropped-other", time.Minute)
	h.mustAcquire(t, other, h.t0)
	subs = append(subs, h.mustWatch(t, w, other.Key))
	p.Drop(t, h.s)
	for _, sub := range subs {
		select {
		case <-sub.Done():
			if err := sub.Err(); !errors.Is(err, store.ErrWatchLost) {
				t.Errorf("after the connection was dropped, the watch ended with %v; want an error matching ErrWatchLost", err)
			}
		case <-time.After(watchWait):
			t.Fatalf("the connection was dropped and the watch was not told within %v", watchWait)
		}
	}
	// The caller watches again, then reads; the store subscribes anew.
	var again store.Subscription
	for deadline := time.Now().Add(watchWait); ; {
		var err error
		if again, err = w.Watch(h.ctx, rec.Key); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Watch after the drop = %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	defer again.Stop()
	if got := h.mustGet(t, rec.Key); got.Status != store.StatusInProgress {
		t.Fatalf("Get = %v; want the claim still in progress", got.Status)
	}
	h.mustComplete(t, rec, []byte(`1`))
	awaitNotified(t, again, "Complete after the store subscribed again")
}

// testWatchNoLeak: once every watch is stopped, the store's subscriber
// goroutines end (after the store's idle delay, if it keeps its
// connection a while).
func testWatchNoLeak(t *testing.T, h *harness, w store.Watcher) {
	runtime.GC()
	before := runtime.NumGoroutine()
	var subs []store.Subscription
	for i := range 5 {
		rec := h.claim(fmt.Sprintf("scope#watch-leak-%d", i), time.Minute)
		h.mustAcquire(t, rec, h.t0)
		for range 3 {
			sub, err := w.Watch(h.ctx, rec.Key)
			if err != nil {
				t.Fatalf("Watch = %v", err)
			}
			subs = append(subs, sub)
		}
		if i%2 == 0 {
			h.mustComplete(t, rec, []byte(`1`))
		}
	}
	for _, sub := range subs {
		sub.Stop()
	}
	deadline := time.Now().Add(watchWait)
	for {
		n := runtime.NumGoroutine()
		if n <= before {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			t.Fatalf("%d goroutines %v after every watch was stopped, %d before:\n%s", n, watchWait, before, buf)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
