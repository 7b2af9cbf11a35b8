package guard

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/idemguard/idemguard/store"
)

// The call value: what one guarded call carries down its phases (run.go,
// acquire.go, complete.go, lease.go), and what its function's context
// carries for Step and KeyFromContext. The files of the phases use it;
// it uses none of them.

// body is a guarded function; tx is nil unless the call runs in a store
// transaction (DoTx).
type body[T any] func(ctx context.Context, tx txn) (T, error)

func noTx[T any](fn func(context.Context) (T, error)) body[T] {
	return func(ctx context.Context, _ txn) (T, error) { return fn(ctx) }
}

// request is what an entry point asks of one call, before the call claims
// anything: the guard, the call's settings and key, where it runs, and how
// telemetry names it. It lives on the entry point's stack; the call value
// (call) is made from it when the call leads.
type request struct {
	g      *Guard
	c      *config
	d      derived
	label  string   // the call's scope in telemetry: a step's is its call's
	step   string   // the step's name, for a step
	begin  beginner // nil unless the call is transactional
	parent *running // the enclosing call, for a step
}

// running is what a guarded function's context carries about its call:
// what Step and KeyFromContext read.
type running struct {
	g     *Guard
	c     *config
	d     *derived // d.key is empty when the call runs unguarded
	tx    txn      // the call's transaction (DoTx), or nil
	steps *steps   // the steps the call completed, made by the first
}

type runningKey struct{}

// runCtx is a guarded function's context: its call's running, over the
// context that the lease keeper cancels.
type runCtx struct {
	context.Context
	r *running
}

func (c *runCtx) Value(key any) any {
	if key == (runningKey{}) {
		return c.r
	}
	return c.Context.Value(key)
}

// call is one guarded call that claims its key: everything its path needs,
// in one allocation.
type call struct {
	g      *Guard
	c      *config
	d      derived
	begin  beginner      // nil unless the call is transactional
	parent *running      // the enclosing call, when this call is a step
	claim  store.Record  // the claim this call made
	done   *store.Record // the claim's completion, once written
	flight flight        // followers in this process wait on it
	keeper keeper
	run    running
	ctx    runCtx

	// released: recording the outcome released the claim instead (a
	// transaction that did not commit), so the call's outcome is
	// OutcomeReleased.
	released bool
}

var (
	errGoexit    = errors.New("idemguard: guarded function called runtime.Goexit")
	errAbandoned = errors.New("idemguard: runtime.Goexit before the guarded function ran")
)

// keeper extends a claim's lease while the guarded function runs, every
// third of a lease, so that one failed extension still leaves time for
// another. It ends the function's context with cause ErrLeaseLost when an
// extension finds the claim taken over, or when the lease end it last wrote
// passes on the guard's clock without a successful extension (a pause, a
// partition): past that point another caller may hold the key, so the
// function must not go on to its side effect.
type keeper struct {
	cl     *call
	ctx    context.Context         // the caller's context (its values, for the extensions)
	cancel context.CancelCauseFunc // ends the function's context
	tick   func()                  // k.extend, made once

	mu        sync.Mutex // protects the fields below
	stopped   bool       // no more extensions
	extending bool       // an extension is in flight
	lease     time.Duration
	leaseEnd  time.Time // the lease end last written
	expiresAt time.Time // the record expiry last written
	lost      error     // why the function's context was ended, if it was
	capEnd    time.Time // when capped, the lease never extends past this (internal/leasecap)
	capped    bool
	timer     *time.Timer // on the system clock: one timer, reset
	stopTimer func() bool // on another clock: stops the armed timer
}

// txn is a store transaction as the protocol sees it, whatever its handle.
type txn interface {
	Complete(ctx context.Context, rec *store.Record) error
	Commit(ctx context.Context) error
	Rollback(ctx context.Context) error
}

// beginner begins a store transaction; nil for a call without one.
type beginner func(ctx context.Context) (txn, error)

// steps are the steps a call completed: what becomes of them depends on
// how the call ends (see Step). A call makes its list when it may need it:
// a transactional call, or one with a result filter.
type steps struct {
	mu   sync.Mutex
	done []stepClaim // protected by mu
}

// stepClaim is a step's claim, completed, or the record it replayed.
type stepClaim struct {
	d        *derived
	claim    store.Record
	inTx     bool // completed inside the call's transaction
	replayed bool // replayed, from an earlier attempt, perhaps under a previous key secret
}

// add notes a completed step; s may be nil.
func (s *steps) add(d *derived, claim *store.Record, inTx bool) {
	if s == nil {
		return
	}
	s.note(stepClaim{d: d, claim: *claim, inTx: inTx})
}

// addReplayed notes a step, d, that replayed rec, completed by an earlier
// attempt of the call; s may be nil. It keeps a copy of d.
func (s *steps) addReplayed(d *derived, rec *store.Record) {
	if s == nil {
		return
	}
	dc := *d
	s.note(stepClaim{d: &dc, claim: *rec, replayed: true})
}

func (s *steps) note(st stepClaim) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.done = append(s.done, st)
}

// take returns the steps noted that match keep, and forgets them.
func (s *steps) take(keep func(stepClaim) bool) []stepClaim {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out, rest []stepClaim
	for _, st := range s.done {
		if keep(st) {
			out = append(out, st)
		} else {
			rest = append(rest, st)
		}
	}
	s.done = rest
	return out
}
