package guard

import (
	"context"
	"errors"
	"time"

	"github.com/idemguard/idemguard/internal/guardhook"
	"github.com/idemguard/idemguard/store"
)

// Concurrent calls with the same key and payload in one process share one
// execution: the leader runs the protocol, the followers wait for its
// outcome. Each keeps its own mode: in reject mode it gets ErrInProgress as
// soon as the leader runs or finds the key held; in wait mode, when the
// leader got no outcome it may replay, it goes to the store itself.

// flightKey names the calls that may share an execution.
type flightKey struct{ key, payloadHash string }

// flight is a call in progress in this process. It lives in the leader's
// call; its channels are made by the first follower, so that a call that
// nobody joins makes none.
type flight struct {
	fk flightKey

	// Protected by Guard.mu.
	dups      int           // followers that joined
	executing bool          // the leader runs the function
	busy      bool          // the leader found the key held by another caller
	leaseEnd  time.Time     // the holder's lease end, when executing or busy
	isDecided bool          // the leader runs the function, found the key held, or landed
	isDone    bool          // the leader has landed
	decided   chan struct{} // closed once isDecided, if a follower made it
	done      chan struct{} // closed once isDone, if a follower made it

	landing // written before isDone is set
}

// landing is the outcome a leader hands its followers.
type landing struct {
	rec      *store.Record // the completed record, if any
	value    any           // the leader's result, if it had followers
	hasValue bool
	err      error
	released bool // the leader ran the function and gave the key back
}

// join returns the flight for fk: the one in progress, or mine, which the
// caller then leads.
func (g *Guard) join(fk flightKey, mine *flight) (f *flight, leader bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if f, ok := g.flights[fk]; ok {
		f.dups++
		if f.decided == nil {
			f.decided = make(chan struct{})
			if f.isDecided {
				close(f.decided)
			}
		}
		if f.done == nil {
			f.done = make(chan struct{})
		}
		return f, false
	}
	if g.flights == nil {
		g.flights = make(map[flightKey]*flight)
	}
	mine.fk = fk
	g.flights[fk] = mine
	return mine, true
}

// decide marks f decided; g.mu is held.
func (f *flight) decide() {
	if !f.isDecided {
		f.isDecided = true
		if f.decided != nil {
			close(f.decided)
		}
	}
}

// markExecuting records that the leader of f runs the function under a lease
// ending at leaseEnd.
func (g *Guard) markExecuting(f *flight, leaseEnd time.Time) {
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

// followed reports whether another call joined f.
func (g *Guard) followed(f *flight) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return f.dups > 0
}

// land removes f from the flights and hands its outcome to the followers;
// the leader's value is kept only if someone is there to take it.
func (g *Guard) land(f *flight, l landing) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.flights[f.fk] == f {
		delete(g.flights, f.fk)
	}
	f.landing = l
	f.decide()
	f.isDone = true
	if f.done != nil {
		close(f.done)
	}
}

// follow waits for the leader of f. again reports that the caller should
// go to the store on its own: the leader's outcome is not one this call
// may share.
func follow[T any](ctx context.Context, g *Guard, c *config, d *derived, f *flight) (v T, out Outcome, err error, again bool) {
	if r, ok := ctx.Value(runningKey{}).(*running); ok && r.d.key == d.key {
		// A guarded function calling itself with its own key would wait for
		// itself forever.
		return v, 0, &inProgressError{Key: d.key}, false
	}
	inProgress := func() error {
		g.mu.Lock()
		defer g.mu.Unlock()
		return &inProgressError{Key: d.key, LeaseExpiresAt: f.leaseEnd}
	}
	if c.mode == guardhook.Reject {
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
		if c.mode == guardhook.Wait && (f.released || errors.Is(f.err, ErrInProgress)) {
			return v, 0, nil, true
		}
		if f.rec == nil {
			return v, 0, f.err, false
		}
		return v, OutcomeShared, f.err, false
	case f.released && c.mode == guardhook.Wait:
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
