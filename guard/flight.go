package guard

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/idemguard/idemguard/store"
)

// Concurrent calls with the same key and payload in one process share one
// execution: the first (the leader) runs the protocol, the others (followers)
// wait for its outcome instead of going to the store.

// flight is a call in progress in this process, which concurrent calls with
// the same key and payload join instead of going to the store.
type flight struct {
	// Protected by Guard.mu.
	done      chan struct{} // made by the first follower; closed once the leader has an outcome
	dups      int           // followers that joined
	settled   bool          // the leader knows whether it runs the function
	executing bool          // the leader runs the function (valid once settled)
	leaseEnd  time.Time     // the leader's lease end when executing
	decided   chan struct{} // made by a Reject-mode follower, closed once settled

	// Written before done is closed.
	rec      *store.Record // the completed record, if any
	value    any           // the leader's result, when followers exist and it returned one
	hasValue bool
	err      error
}

// join returns the flight for fkey, creating it (leader) if there is none.
func (g *Guard) join(fkey string) (f *flight, leader bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if f, ok := g.flights[fkey]; ok {
		f.dups++
		if f.done == nil {
			f.done = make(chan struct{})
		}
		return f, false
	}
	if g.flights == nil {
		g.flights = make(map[string]*flight)
	}
	f = flightPool.Get().(*flight)
	g.flights[fkey] = f
	return f, true
}

// flightPool recycles flights that nobody joined: most calls have no
// concurrent duplicate.
var flightPool = sync.Pool{New: func() any { return new(flight) }}

// settle records whether the leader runs the function.
func (g *Guard) settle(f *flight, executing bool, leaseEnd time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	f.settled, f.executing, f.leaseEnd = true, executing, leaseEnd
	if f.decided != nil {
		close(f.decided)
	}
}

// land removes f from the flights and hands its outcome to the followers.
func land[T any](g *Guard, fkey string, f *flight, rec *store.Record, v T, hasValue bool, err error) {
	g.mu.Lock()
	if g.flights[fkey] == f {
		delete(g.flights, fkey)
	}
	if !f.settled {
		f.settled = true
		if f.decided != nil {
			close(f.decided)
		}
	}
	dups, done := f.dups, f.done
	g.mu.Unlock()
	if dups == 0 {
		// Nobody joined, and nobody can any more: f is the leader's alone.
		*f = flight{}
		flightPool.Put(f)
		return
	}
	f.rec, f.err = rec, err
	if hasValue {
		f.value, f.hasValue = v, true
	}
	close(done)
}

// follow waits for the leader of f. again reports that the leader's context
// ended while the caller's did not, so the caller should try on its own.
func follow[T any](ctx context.Context, g *Guard, c *config, d derived, f *flight) (v T, out Outcome, err error, again bool) {
	if k, ok := KeyFromContext(ctx); ok && k == d.key {
		// A guarded function calling itself with its own key would wait for
		// itself forever.
		return v, 0, &InProgressError{Key: d.key}, false
	}
	if c.mode == Reject {
		g.mu.Lock()
		if !f.settled {
			if f.decided == nil {
				f.decided = make(chan struct{})
			}
			ch := f.decided
			g.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				return v, 0, ctx.Err(), false
			}
			g.mu.Lock()
		}
		executing, leaseEnd := f.executing, f.leaseEnd
		g.mu.Unlock()
		if executing {
			return v, 0, &InProgressError{Key: d.key, LeaseExpiresAt: leaseEnd}, false
		}
	}
	select {
	case <-f.done:
	case <-ctx.Done():
		return v, 0, ctx.Err(), false
	}
	switch {
	case f.err != nil:
		if isContextError(f.err) && ctx.Err() == nil {
			return v, 0, nil, true
		}
		return v, OutcomeShared, f.err, false
	case f.hasValue:
		if v, ok := f.value.(T); ok {
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
