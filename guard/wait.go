package guard

import (
	"context"
	"errors"
	"math/rand/v2"
	"reflect"
	"sync"
	"time"

	"github.com/idemguard/idemguard/store"
)

// Waiting for another call's claim (Wait mode), issue 38.
//
// The duplicates of a key that wait in one process share one waiter: a
// goroutine that watches the key when the store is a [store.Watcher] (one
// subscription for the process, not one per duplicate), reads the record
// once after subscribing (so that a completion between a duplicate's claim
// attempt and the subscription is not missed), and reads it again at each
// notification, at a slow safety poll (a notification can be lost) and at
// the holder's lease end. On a store without push it polls the record with
// Get, a read, at an interval that grows with how long the call has been
// seen running, up to the longest pause of WithWaitBackoff, and at the
// holder's lease end. It ends with the completed record, which every
// duplicate replays without a store call of its own, or with "try to
// claim": the key was released or deleted, its record expired, or the
// holder's lease lapsed; the duplicates then try Acquire, and one of them
// runs the function (or takes the claim over).

// A waiter whose store pushes completions reads the record anyway, in case
// a notification was lost without its subscription knowing (a lost
// connection ends the subscription, and is read after at once): after as
// long as the call has been seen running, from watchSafetyMin up to
// watchSafetyMax. A call's lone waiter thus reads nothing more for a call
// shorter than watchSafetyMin, and about log2(D/watchSafetyMin) times more
// for a longer one, D; a lost notification, which takes a server that
// drops a message on a connection it keeps, delays the wait by at most
// the time the call had been running, 30 s at least and a minute at most.
// (At 10 s, the first safety read raced the completion of 10 s calls, a
// fourth store call for their lone waiters.)
const (
	watchSafetyMin = 30 * time.Second
	watchSafetyMax = time.Minute
)

// waitKey identifies a shared waiter: the store, the key, and what decides
// when a lease has lapsed (the guard's skew tolerance, and its clock when
// it is not the system clock: a test's fake clock is not shared).
type waitKey struct {
	store any
	key   string
	skew  time.Duration
	owner *Guard // set when the guard's clock or store cannot be shared
}

// keyWaiter is the shared waiter of one key in this process.
type keyWaiter struct {
	k      waitKey
	refs   int // protected by waitersMu
	cancel context.CancelFunc
	done   chan struct{}
	rec    *store.Record // the completed record, or nil: try to claim; written before done is closed
	reads  int           // the reads it made, for tests; written before done is closed
}

var (
	waitersMu sync.Mutex
	waiters   = map[waitKey]*keyWaiter{} // protected by waitersMu
)

// errWaitBudget is what waitHeld returns when the wait budget ends first.
var errWaitBudget = errors.New("wait budget spent")

// waitHeld waits, until waitEnd on the guard's clock, for the claim old
// on d.key to end. It returns the completed record (not yet validated
// against the caller's payload), or nil and nil when the caller should try
// to claim the key again, or errWaitBudget, or ctx's error.
func (g *Guard) waitHeld(ctx context.Context, c *config, key string, old *store.Record, waitEnd time.Time) (*store.Record, error) {
	w := g.joinWait(ctx, c, key, old)
	defer w.leave()
	defer beatWhileWaiting(ctx)()
	budget := make(chan struct{})
	stop := g.clock.AfterFunc(waitEnd.Sub(g.clock.Now()), func() { close(budget) })
	defer stop()
	select {
	case <-w.done:
		return w.rec, nil
	case <-budget:
		return nil, errWaitBudget
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// joinWait returns key's shared waiter in this process, started if need
// be from old, the record the caller found.
func (g *Guard) joinWait(ctx context.Context, c *config, key string, old *store.Record) *keyWaiter {
	k := waitKey{store: g.store, key: key, skew: g.skew}
	if !g.sysClock || !reflect.TypeOf(g.store).Comparable() {
		k = waitKey{key: key, owner: g}
	}
	waitersMu.Lock()
	defer waitersMu.Unlock()
	w := waiters[k]
	if w == nil {
		wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		w = &keyWaiter{k: k, cancel: cancel, done: make(chan struct{})}
		waiters[k] = w
		go g.runWait(wctx, c, w, old)
	}
	w.refs++
	return w
}

// leave ends a duplicate's wait; the last to leave stops the waiter.
func (w *keyWaiter) leave() {
	waitersMu.Lock()
	defer waitersMu.Unlock()
	if w.refs--; w.refs == 0 {
		if waiters[w.k] == w {
			delete(waiters, w.k)
		}
		w.cancel()
	}
}

// finish hands rec to the duplicates. The waiter leaves the registry
// first, so that a duplicate that finds the key held again after this
// starts a new one rather than join an ended one.
func (w *keyWaiter) finish(rec *store.Record, reads int) {
	waitersMu.Lock()
	if waiters[w.k] == w {
		delete(waiters, w.k)
	}
	waitersMu.Unlock()
	w.rec, w.reads = rec, reads
	close(w.done)
}

// runWait is the shared waiter's goroutine: see the comment at the top.
func (g *Guard) runWait(ctx context.Context, c *config, w *keyWaiter, rec *store.Record) {
	defer w.cancel()
	watcher, _ := g.store.(store.Watcher)
	var sub store.Subscription
	defer func() {
		if sub != nil {
			sub.Stop()
		}
	}()
	key := w.k.key
	seen := g.clock.Now() // when this process first saw the claim running
	read := false         // whether rec must be read again before it is judged
	reads := 0
	for {
		var got *watchGot // the read the store made with the subscription
		if watcher != nil && (sub == nil || fired(sub.Done())) {
			// (Re)subscribe before the read, and keep a fired
			// subscription until the new one is in effect, so that the
			// store keeps the key's server subscription between them.
			next, nextGot, err := g.watch(ctx, watcher, key)
			if sub != nil {
				sub.Stop()
			}
			sub = next
			switch {
			case errors.Is(err, store.ErrSkip):
				watcher = nil
			case err == nil:
				read, got = true, nextGot
			}
		}
		if read {
			var err error
			if got != nil {
				rec, err = got.rec, got.err
			} else {
				rec, err = g.readRecord(ctx, key)
			}
			reads++
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				// Gone (released, deleted) or unreadable: the duplicates
				// try to claim, which runs the function or reports the
				// store's failure as a claim attempt would.
				w.finish(nil, reads)
				return
			}
		}
		read = true
		now := g.clock.Now()
		lapse := rec.LeaseExpiresAt.Add(g.skew)
		switch {
		case rec.Status == store.StatusCompleted && now.Before(rec.ExpiresAt):
			w.finish(rec, reads)
			return
		case rec.Status != store.StatusInProgress, !now.Before(rec.ExpiresAt),
			!rec.LeaseExpiresAt.IsZero() && !now.Before(lapse):
			w.finish(nil, reads)
			return
		}
		var pause time.Duration
		var notified <-chan struct{}
		if sub != nil {
			notified = sub.Done()
			pause = min(max(now.Sub(seen), watchSafetyMin), watchSafetyMax)
		} else {
			pause = pollPause(c, now.Sub(seen))
		}
		if !rec.LeaseExpiresAt.IsZero() && lapse.Sub(now) < pause {
			pause = lapse.Sub(now) + time.Millisecond
		}
		tick := make(chan struct{})
		stop := g.clock.AfterFunc(pause, func() { close(tick) })
		select {
		case <-ctx.Done():
			stop()
			return
		case <-notified:
			stop()
		case <-tick:
		}
	}
}

// pollPause is the pause before the next read of a record whose claim has
// been seen running for running, on a store that does not push: as long
// again (a call seen running for a while is likely to run a while longer),
// from WithWaitBackoff's first pause up to its longest, less a random part
// of up to a quarter so that the processes waiting for a key spread their
// reads. It never exceeds the longest pause. A process therefore reads a
// key whose call runs for D about log2(min(D, max)/initial) + 1 times, and
// then once per longest pause (at most D/(0.75·max) more), plus once at the
// holder's lease end if it comes first.
func pollPause(c *config, running time.Duration) time.Duration {
	p := min(max(running, c.waitInitial), c.waitMax)
	return p - time.Duration(rand.Int64N(int64(p/4)+1))
}

// watchGot is the record a [store.WatchGetter] read with a subscription,
// or the error its read met: it stands for the read that follows the
// subscription.
type watchGot struct {
	rec *store.Record
	err error
}

// watch subscribes to key's completion, bounded by the store call timeout.
// A store.WatchGetter reads the record with the subscription (got).
func (g *Guard) watch(ctx context.Context, w store.Watcher, key string) (store.Subscription, *watchGot, error) {
	sctx, cancel := context.WithTimeout(ctx, storeCallTimeout)
	defer cancel()
	var (
		sub store.Subscription
		got *watchGot
	)
	err := g.timed(ctx, "watch", func() (err error) {
		if wg, ok := w.(store.WatchGetter); ok {
			var rec *store.Record
			if sub, rec, err = wg.WatchGet(sctx, key); sub == nil {
				return err
			}
			got = &watchGot{rec, err} // subscribed; err is the read's
			return nil
		}
		sub, err = w.Watch(sctx, key)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	return sub, got, nil
}

// readRecord reads key's record, bounded by the store call timeout.
func (g *Guard) readRecord(ctx context.Context, key string) (*store.Record, error) {
	sctx, cancel := context.WithTimeout(ctx, storeCallTimeout)
	defer cancel()
	var rec *store.Record
	err := g.timed(ctx, "get", func() (err error) {
		rec, err = g.store.Get(sctx, key)
		return err
	})
	return rec, err
}

func fired(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// sleep pauses for d on clock, or until ctx is done.
func sleep(ctx context.Context, clock timeSource, d time.Duration) error {
	ch := make(chan struct{})
	stop := clock.AfterFunc(d, func() { close(ch) })
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		stop()
		return ctx.Err()
	}
}
