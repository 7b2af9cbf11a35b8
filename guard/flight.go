package guard

import (
	"sync"
	"time"

	"github.com/idemguard/idemguard/store"
)

// Concurrent calls with the same key and payload in one process share one
// execution: the leader runs the protocol, the followers wait for its
// outcome (follow, in run.go); here are the flights they meet in. Each keeps its own mode: in reject mode it gets ErrInProgress as
// soon as the leader runs or finds the key held; in wait mode, when the
// leader got no outcome it may replay, it goes to the store itself.

// flightKey names the calls that may share an execution.
type flightKey struct{ key, payloadHash string }

// flight is a call in progress in this process. It lives in the leader's
// call; its channels are made by the first follower, so that a call that
// nobody joins makes none.
type flight struct {
	fk flightKey

	// Protected by flights.mu.
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

// flights are the calls in progress in this process, by flight key.
type flights struct {
	mu sync.Mutex
	m  map[flightKey]*flight // protected by mu
}

// join returns the flight for fk: the one in progress, or mine, which the
// caller then leads.
func (fl *flights) join(fk flightKey, mine *flight) (f *flight, leader bool) {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if f, ok := fl.m[fk]; ok {
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
	if fl.m == nil {
		fl.m = make(map[flightKey]*flight)
	}
	mine.fk = fk
	fl.m[fk] = mine
	return mine, true
}

// decide marks f decided; fl.mu is held.
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
func (fl *flights) markExecuting(f *flight, leaseEnd time.Time) {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	f.executing, f.leaseEnd = true, leaseEnd
	f.decide()
}

// held records that the leader of f found the key held by another caller
// whose lease ends at leaseEnd. f may be nil (a claim outside Do).
func (fl *flights) held(f *flight, leaseEnd time.Time) {
	if f == nil {
		return
	}
	fl.mu.Lock()
	defer fl.mu.Unlock()
	f.busy, f.leaseEnd = true, leaseEnd
	f.decide()
}

// extended records the leader's new lease end.
func (fl *flights) extended(f *flight, leaseEnd time.Time) {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	f.leaseEnd = leaseEnd
}

// followed reports whether another call joined f.
func (fl *flights) followed(f *flight) bool {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	return f.dups > 0
}

// land removes f from the flights and hands its outcome to the followers;
// the leader's value is kept only if someone is there to take it.
func (fl *flights) land(f *flight, l landing) {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if fl.m[f.fk] == f {
		delete(fl.m, f.fk)
	}
	f.landing = l
	f.decide()
	f.isDone = true
	if f.done != nil {
		close(f.done)
	}
}
