package guard

import (
	"container/heap"
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/telemetry"
)

// keeper extends a claim's lease while the guarded function runs. It extends
// at a third of the lease, so one failed extension still leaves time for
// another before the lease lapses. If the store reports the claim taken over,
// it cancels the function's context with cause ErrLeaseLost and stops.
type keeper struct {
	g      *Guard
	c      *config
	ctx    context.Context // the caller's context (its values, for the extensions)
	key    string
	token  string
	lease  time.Duration           // set by start
	cancel context.CancelCauseFunc // cancels the function's context; set before start
	timer  *leaseTimer

	mu        sync.Mutex // protects the fields below, and serialises ticks with stop
	stopped   bool       // no more extensions
	leaseEnd  time.Time  // the lease end last written
	expiresAt time.Time  // the record expiry last written
	lost      bool       // the store said the claim is held by another token

	// Protected by timer.mu.
	due   time.Time // when the next extension is due
	index int       // in timer.due; -1 when not waiting
}

func (g *Guard) keep(ctx context.Context, c *config, claim *store.Record) *keeper {
	t := c.leases
	if t == nil { // a per-call clock
		t = &leaseTimer{clock: c.clock}
	}
	return &keeper{
		g:         g,
		c:         c,
		ctx:       ctx,
		key:       claim.Key,
		token:     claim.Token,
		leaseEnd:  claim.LeaseExpiresAt,
		expiresAt: claim.ExpiresAt,
		timer:     t,
		index:     -1,
	}
}

func (k *keeper) start() {
	k.mu.Lock()
	defer k.mu.Unlock()
	now := k.c.clock.Now()
	k.lease = max(k.leaseEnd.Sub(now), MinLease)
	k.schedule(now)
}

// schedule arms the next tick; k.mu is held.
func (k *keeper) schedule(now time.Time) {
	k.timer.add(k, now.Add(k.interval()))
}

func (k *keeper) interval() time.Duration {
	return max(k.lease/3, time.Millisecond)
}

func (k *keeper) tick() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.stopped {
		return
	}
	now := k.c.clock.Now()
	leaseEnd := now.Add(k.lease)
	expiresAt := k.expiresAt
	if expiresAt.Before(leaseEnd) {
		expiresAt = leaseEnd
	}
	sctx, span := k.g.child(context.WithoutCancel(k.ctx), telemetry.SpanExtend)
	ctx, cancel := newStoreContext(sctx, max(k.leaseEnd.Sub(now), storeCallTimeout))
	start := k.g.storeStart()
	err := k.g.store.Extend(ctx, k.key, k.token, leaseEnd, expiresAt)
	k.g.timeStore(sctx, "extend", start)
	cancel()
	recordErrorIf(span, err)
	span.End()
	switch {
	case err == nil:
		k.leaseEnd, k.expiresAt = leaseEnd, expiresAt
	case errors.Is(err, store.ErrTokenMismatch):
		k.lost = true
		k.stopped = true
		k.cancel(ErrLeaseLost)
		k.g.log(sctx, slog.LevelWarn, "idemguard: lease lost to another caller; cancelling the guarded function", k.key)
		return
	default:
		k.g.log(sctx, slog.LevelWarn, "idemguard: lease extension failed; retrying before the lease lapses", k.key, slog.Any("error", err))
	}
	// A transient failure leaves the lease as it was; the next tick, a
	// third of a lease later, tries again before it lapses.
	k.schedule(now)
}

// stop ends the extensions, waiting for one in flight, and returns the lease
// end last written.
func (k *keeper) stop() time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.stopped = true
	k.timer.remove(k)
	return k.leaseEnd
}

// leaseTimer wakes keepers when their extensions are due, on one timer for
// all of a guard's calls rather than one per call: most calls end long
// before their first extension, and arming and stopping a timer for each
// cost more than the rest of a call to an in-process store. The timer fires
// at the earliest due extension; a keeper that stops leaves the heap, and the
// timer then may fire for nothing, at most once per interval.
type leaseTimer struct {
	clock Clock

	mu     sync.Mutex
	due    keeperHeap  // waiting keepers, earliest due first
	wakeAt time.Time   // when the armed timer fires; zero if none is armed
	stop   func() bool // stops the armed timer
}

func (t *leaseTimer) add(k *keeper, due time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	k.due = due
	heap.Push(&t.due, k)
	if t.wakeAt.IsZero() || due.Before(t.wakeAt) {
		t.arm(due)
	}
}

func (t *leaseTimer) remove(k *keeper) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if k.index >= 0 {
		heap.Remove(&t.due, k.index)
	}
}

// arm sets the timer to fire at at; t.mu is held.
func (t *leaseTimer) arm(at time.Time) {
	if t.stop != nil {
		t.stop()
	}
	t.wakeAt = at
	t.stop = t.clock.AfterFunc(at.Sub(t.clock.Now()), t.fire)
}

// fire starts the extensions that are due, and arms the timer for the next.
func (t *leaseTimer) fire() {
	t.mu.Lock()
	now := t.clock.Now()
	var ready []*keeper
	for len(t.due) > 0 && !t.due[0].due.After(now) {
		ready = append(ready, heap.Pop(&t.due).(*keeper))
	}
	t.wakeAt = time.Time{}
	if len(t.due) > 0 {
		t.arm(t.due[0].due)
	}
	t.mu.Unlock()
	for _, k := range ready {
		go k.tick()
	}
}

// keeperHeap orders keepers by due time (container/heap).
type keeperHeap []*keeper

func (h keeperHeap) Len() int           { return len(h) }
func (h keeperHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h keeperHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *keeperHeap) Push(x any) {
	k := x.(*keeper)
	k.index = len(*h)
	*h = append(*h, k)
}
func (h *keeperHeap) Pop() any {
	old := *h
	k := old[len(old)-1]
	old[len(old)-1] = nil
	k.index = -1
	*h = old[:len(old)-1]
	return k
}
