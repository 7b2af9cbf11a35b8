package guard

import (
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
	base   context.Context // the caller's context without its cancellation
	key    string
	token  string
	lease  time.Duration
	cancel context.CancelCauseFunc // cancels the function's context; set before start

	mu        sync.Mutex  // protects the fields below, and serialises ticks with stop
	stopped   bool        // no more extensions
	leaseEnd  time.Time   // the lease end last written
	expiresAt time.Time   // the record expiry last written
	lost      bool        // the store said the claim is held by another token
	stopTimer func() bool // cancels the next tick
}

func (g *Guard) keep(ctx context.Context, c *config, claim *store.Record) *keeper {
	return &keeper{
		g:         g,
		c:         c,
		base:      context.WithoutCancel(ctx),
		key:       claim.Key,
		token:     claim.Token,
		lease:     max(claim.LeaseExpiresAt.Sub(c.clock.Now()), MinLease),
		leaseEnd:  claim.LeaseExpiresAt,
		expiresAt: claim.ExpiresAt,
	}
}

func (k *keeper) start() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.schedule()
}

// schedule arms the next tick; k.mu is held.
func (k *keeper) schedule() {
	k.stopTimer = k.c.clock.AfterFunc(k.interval(), k.tick)
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
	sctx, span := k.g.child(k.base, telemetry.SpanExtend)
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
	k.schedule()
}

// stop ends the extensions, waiting for one in flight, and returns the lease
// end last written.
func (k *keeper) stop() time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.stopped = true
	if k.stopTimer != nil {
		k.stopTimer()
	}
	return k.leaseEnd
}
