package guard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/telemetry"
)

// keeper extends a claim's lease while the guarded function runs, every
// third of a lease, so that one failed extension still leaves time for
// another. It ends the function's context with cause ErrLeaseLost when an
// extension finds the claim taken over, or when the lease end it last wrote
// passes on the guard's clock without a successful extension (a pause, a
// partition): past that point another caller may hold the key, so the
// function must not go on to its side effect.
type keeper struct {
	g      *Guard
	c      *config
	ctx    context.Context // the caller's context (its values, for the extensions)
	f      *flight         // told of each new lease end
	key    string
	token  string
	lease  time.Duration
	cancel context.CancelCauseFunc // ends the function's context

	mu        sync.Mutex  // protects the fields below
	stopped   bool        // no more extensions
	extending bool        // an extension is in flight
	leaseEnd  time.Time   // the lease end last written
	expiresAt time.Time   // the record expiry last written
	lost      error       // why the function's context was ended, if it was
	timer     func() bool // stops the armed timer
}

func (g *Guard) keep(ctx context.Context, c *config, claim *store.Record, f *flight, cancel context.CancelCauseFunc) *keeper {
	return &keeper{
		g: g, c: c, ctx: ctx, f: f, key: claim.Key, token: claim.Token, cancel: cancel,
		leaseEnd: claim.LeaseExpiresAt, expiresAt: claim.ExpiresAt,
	}
}

// start arms the first extension.
func (k *keeper) start() {
	k.mu.Lock()
	defer k.mu.Unlock()
	now := k.g.clock.Now()
	k.lease = max(k.leaseEnd.Sub(now), MinLease)
	k.arm(min(k.lease/3, k.leaseEnd.Sub(now)))
}

// arm sets the timer to tick after d; k.mu is held.
func (k *keeper) arm(d time.Duration) {
	if k.timer != nil {
		k.timer()
	}
	k.timer = k.g.clock.AfterFunc(max(d, 0), k.tick)
}

// tick extends the lease, or ends the function's context if the lease end
// has passed.
func (k *keeper) tick() {
	k.mu.Lock()
	if k.stopped {
		k.mu.Unlock()
		return
	}
	now := k.g.clock.Now()
	if !now.Before(k.leaseEnd) {
		k.lose(fmt.Errorf("%w (key %s): the lease ended at %s without an extension", ErrLeaseLost, k.key, k.leaseEnd.UTC().Format(time.RFC3339Nano)))
		k.mu.Unlock()
		k.g.log(k.ctx, slog.LevelWarn, "idemguard: lease lapsed while the function ran; cancelling it", k.key)
		return
	}
	if k.extending {
		// This wake-up guards the lease end while an extension is slow.
		k.arm(k.leaseEnd.Sub(now))
		k.mu.Unlock()
		return
	}
	k.extending = true
	k.arm(k.leaseEnd.Sub(now)) // fires at the lease end unless the extension returns first
	leaseEnd := now.Add(k.lease)
	expiresAt := k.expiresAt
	if expiresAt.Before(leaseEnd) {
		expiresAt = leaseEnd
	}
	timeout := max(k.leaseEnd.Sub(now), storeCallTimeout)
	k.mu.Unlock()

	sctx, span := k.g.child(context.WithoutCancel(k.ctx), telemetry.SpanExtend)
	ctx, cancel := context.WithTimeout(sctx, timeout)
	start := time.Now()
	err := k.g.store.Extend(ctx, k.key, k.token, leaseEnd, expiresAt)
	k.g.timeStore(sctx, "extend", start)
	cancel()
	recordErrorIf(span, err)
	span.End()

	k.mu.Lock()
	defer k.mu.Unlock()
	k.extending = false
	if k.stopped {
		return
	}
	switch {
	case err == nil:
		k.leaseEnd, k.expiresAt = leaseEnd, expiresAt
		k.g.extended(k.f, leaseEnd)
		k.arm(k.lease / 3)
	case errors.Is(err, store.ErrTokenMismatch):
		k.lose(fmt.Errorf("%w (key %s)", ErrLeaseLost, k.key))
		k.g.log(sctx, slog.LevelWarn, "idemguard: lease lost to another caller; cancelling the guarded function", k.key)
	default:
		// The lease stands as it was; try again a third of a lease on, or
		// at its end.
		k.g.log(sctx, slog.LevelWarn, "idemguard: lease extension failed; retrying before the lease lapses", k.key, slog.Any("error", err))
		k.arm(min(k.lease/3, k.leaseEnd.Sub(k.g.clock.Now())))
	}
}

// lose ends the function's context with cause err and the extensions;
// k.mu is held.
func (k *keeper) lose(err error) {
	k.lost, k.stopped = err, true
	if k.timer != nil {
		k.timer()
	}
	k.cancel(err)
}

// stop ends the extensions and returns the lease end last written, and why
// the function's context was ended early, if it was.
func (k *keeper) stop() (time.Time, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.stopped = true
	if k.timer != nil {
		k.timer()
	}
	return k.leaseEnd, k.lost
}
