package guard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/idemguard/idemguard/internal/leasecap"
	"github.com/idemguard/idemguard/store"
)

// init prepares the keeper of cl's claim; ctx is the caller's context.
func (k *keeper) init(ctx context.Context, cl *call, cancel context.CancelCauseFunc) {
	k.cl, k.ctx, k.cancel = cl, ctx, cancel
	k.leaseEnd, k.expiresAt = cl.claim.LeaseExpiresAt, cl.claim.ExpiresAt
}

// start arms the first extension.
func (k *keeper) start() {
	k.mu.Lock()
	defer k.mu.Unlock()
	now := k.cl.g.clock.Now()
	// Extensions run the lease the call asks for, not what is left of the
	// claim's when the store answered.
	k.lease = k.cl.c.leaseFor(k.ctx)
	if dl, ok := leasecap.Deadline(k.ctx); ok {
		// The process ends at the deadline: so does the claim.
		k.capEnd, k.capped = now.Add(time.Until(dl)), true
	}
	k.tick = k.extend
	first := k.lease / 3
	if k.leaseEnd.Sub(now) < first {
		// A slow claim left less than a third of its lease: extend at
		// once, while there is time, rather than at the lease end.
		first = 0
	}
	k.arm(first)
}

// arm sets the timer to tick after d; k.mu is held.
func (k *keeper) arm(d time.Duration) {
	d = max(d, 0)
	if k.cl.g.sysClock {
		if k.timer == nil {
			k.timer = time.AfterFunc(d, k.tick)
		} else {
			k.timer.Reset(d)
		}
		return
	}
	if k.stopTimer != nil {
		k.stopTimer()
	}
	k.stopTimer = k.cl.g.clock.AfterFunc(d, k.tick)
}

// disarm stops the timer; k.mu is held.
func (k *keeper) disarm() {
	switch {
	case k.timer != nil:
		k.timer.Stop()
	case k.stopTimer != nil:
		k.stopTimer()
	}
}

// extend extends the lease, or ends the function's context if the lease
// end has passed.
func (k *keeper) extend() {
	g, cl := k.cl.g, k.cl
	k.mu.Lock()
	if k.stopped {
		k.mu.Unlock()
		return
	}
	now := g.clock.Now()
	if !now.Before(k.leaseEnd) {
		k.lose(fmt.Errorf("%w (key %s): the lease ended at %s without an extension", ErrLeaseLost, cl.d.key, k.leaseEnd.UTC().Format(time.RFC3339Nano)))
		k.mu.Unlock()
		g.log(k.ctx, slog.LevelWarn, "idemguard: lease lapsed while the function ran; cancelling it", &cl.d)
		return
	}
	if k.extending {
		// This wake-up guards the lease end while an extension is slow.
		k.arm(k.leaseEnd.Sub(now))
		k.mu.Unlock()
		return
	}
	leaseEnd := now.Add(k.lease)
	if k.capped && leaseEnd.After(k.capEnd) {
		leaseEnd = k.capEnd
	}
	if !leaseEnd.After(k.leaseEnd) {
		// Capped: nothing left to extend. Wake at the lease end, to end
		// the function's context if it still runs.
		k.arm(k.leaseEnd.Sub(now))
		k.mu.Unlock()
		return
	}
	k.extending = true
	k.arm(k.leaseEnd.Sub(now)) // fires at the lease end unless the extension returns first
	expiresAt := k.expiresAt
	if expiresAt.Before(leaseEnd) {
		expiresAt = leaseEnd
	}
	timeout := max(k.leaseEnd.Sub(now), storeCallTimeout)
	k.mu.Unlock()

	err := g.extend(k.ctx, &cl.claim, leaseEnd, expiresAt, timeout)

	k.mu.Lock()
	defer k.mu.Unlock()
	k.extending = false
	if k.stopped {
		return
	}
	switch {
	case err == nil:
		k.leaseEnd, k.expiresAt = leaseEnd, expiresAt
		g.flights.extended(&cl.flight, leaseEnd)
		k.arm(k.lease / 3)
	case errors.Is(err, store.ErrTokenMismatch):
		k.lose(fmt.Errorf("%w (key %s)", ErrLeaseLost, cl.d.key))
		g.log(k.ctx, slog.LevelWarn, "idemguard: lease lost to another caller; cancelling the guarded function", &cl.d)
	default:
		// The lease stands as it was; try again a third of a lease on, or
		// at its end.
		g.log(k.ctx, slog.LevelWarn, "idemguard: lease extension failed; retrying before the lease lapses", &cl.d, slog.Any("error", err))
		k.arm(min(k.lease/3, k.leaseEnd.Sub(g.clock.Now())))
	}
}

// lose ends the function's context with cause err and the extensions;
// k.mu is held.
func (k *keeper) lose(err error) {
	k.lost, k.stopped = err, true
	k.disarm()
	k.cancel(err)
}

// stop ends the extensions and returns the lease end last written, and why
// the function's context was ended early, if it was.
func (k *keeper) stop() (time.Time, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.stopped = true
	k.disarm()
	return k.leaseEnd, k.lost
}
