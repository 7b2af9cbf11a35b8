package guard

import (
	"context"
	"errors"
	"time"

	"github.com/idemguard/idemguard/store"
)

// Concurrent calls with the same key and payload in one process share one
// execution: the leader runs the protocol, the followers wait for its
// outcome. Each keeps its own mode: in Reject mode it gets ErrInProgress as
// soon as the leader runs or finds the key held; in Wait mode, when the
// leader got no outcome it may replay, it goes to the store itself.

// flight is a call in progress in this process.
type flight struct {
	decided chan struct{} // closed once the leader runs the function, finds the key held, or lands
	done    chan struct{} // closed once the leader has landed

	// Protected by Guard.mu.
	dups      int       // followers that joined
	executing bool      // the leader runs the function
	busy      bool      // the leader found the key held by another caller
	leaseEnd  time.Time // the holder's lease end, when executing or busy
	isDecided bool      // decided is closed

	landing // written before done is closed
}

// landing is the outcome a leader hands its followers.
type landing struct {
	rec      *store.Record // the completed record, if any
	value    any           // the leader's result, when it has one
	hasValue bool
	err      error
	released bool // the leader ran the function and gave the key back
}

// join returns the flight for fkey, creating it (leader) if there is none.
func (g *Guard) join(fkey string) (f *flight, leader bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if f, ok := g.flights[fkey]; ok {
		f.dups++
		return f, false
	}
	if g.flights == nil {
		g.flights = make(map[string]*flight)
	}
	f = &flight{decided: make(chan struct{}), done: make(chan struct{})}
	g.flights[fkey] = f
	return f, true
}

// decide closes f.decided once; g.mu is held.
func (f *flight) decide() {
	if !f.isDecided {
		f.isDecided = true
		close(f.decided)
	}
}

// settle records that the leader of f runs the function under a lease
// ending at leaseEnd.
func (g *Guard) settle(f *flight, leaseEnd time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	f.executing, f.leaseEnd = true, leaseEnd
	f.decide()
}

// held records that the leader of f found the key held by another caller
// whose lease ends at leaseEnd. f may be nil (a claim outside Do).
func (g *Guard) held(f *flight, leaseEnd time.Time) {
	if f == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	f.busy, f.leaseEnd = true, leaseEnd
	f.decide()
}

// extended records the leader's new lease end.
func (g *Guard) extended(f *flight, leaseEnd time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	f.leaseEnd = leaseEnd
}

// land removes f from the flights and hands its outcome to the followers.
func (g *Guard) land(fkey string, f *flight, l landing) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.flights[fkey] == f {
		delete(g.flights, fkey)
	}
	f.landing = l
	f.decide()
	close(f.done)
}

// follow waits for the leader of f. again reports that the caller should
// go to the store on its own: the leader's outcome is not one this call
// may share.
func follow[T any](ctx context.Context, g *Guard, c *config, d derived, f *flight) (v T, out Outcome, err error, again bool) {
	if r, ok := ctx.Value(runningKey{}).(*running); ok && r.key == d.key {
		// A guarded function calling itself with its own key would wait for
		// itself forever.
		return v, 0, &InProgressError{Key: d.key}, false
	}
	inProgress := func() error {
		g.mu.Lock()
		defer g.mu.Unlock()
		return &InProgressError{Key: d.key, LeaseExpiresAt: f.leaseEnd}
	}
	if c.mode == Reject {
		select {
		case <-f.decided:
		case <-ctx.Done():
			return v, 0, ctx.Err(), false
		}
		g.mu.Lock()
		running := f.executing || f.busy
		g.mu.Unlock()
		if running {
			return v, 0, inProgress(), false
		}
	} else {
		budget := make(chan struct{})
		stop := g.clock.AfterFunc(c.waitBudget, func() { close(budget) })
		defer stop()
		select {
		case <-f.done:
		case <-budget:
			return v, 0, inProgress(), false
		case <-ctx.Done():
			return v, 0, ctx.Err(), false
		}
	}
	<-f.done
	switch {
	case f.err != nil:
		if isContextError(f.err) && ctx.Err() == nil {
			return v, 0, nil, true
		}
		if c.mode == Wait && (f.released || errors.Is(f.err, ErrInProgress)) {
			return v, 0, nil, true
		}
		if f.rec == nil {
			return v, 0, f.err, false
		}
		return v, OutcomeShared, f.err, false
	case f.released && c.mode == Wait:
		// The leader's result was not stored (WithResultFilter): a waiter
		// in another process would run the function again, and so does
		// this one.
		return v, 0, nil, true
	case f.hasValue:
		if v, ok := f.value.(T); ok {
			if c.onOutcome != nil && f.rec != nil {
				c.onOutcome(ctx, d.key, f.rec, OutcomeShared)
			}
			return v, OutcomeShared, nil, false
		}
	}
	if f.rec == nil {
		return v, 0, nil, true
	}
	v, out, err = replay[T](ctx, c, d, f.rec, OutcomeShared)
	return v, out, err, false
}

func isContextError(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
