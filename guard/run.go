package guard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/idemguard/idemguard/internal/guardhook"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/telemetry"
)

// Lead and run: a call's path from its key to its outcome. execute
// derives the key; guarded tries the local cache and the in-process
// flight; lead claims the key (acquire.go), runs the function under the
// lease keeper (lease.go) and records what it returned (complete.go).
// follow is a call that waits for its flight's leader in this process.

// execute is the path of every guarded call: the key of rq's input, then
// guarded. rq.label is the call's scope.
func execute[T any](ctx context.Context, rq *request, input any, fn body[T]) (T, Outcome, error) {
	g, c := rq.g, rq.c
	if g.disabled {
		v, err := runUnguarded(context.WithValue(ctx, runningKey{}, &running{g: g, c: c, d: &derived{scope: rq.label}}), g, fn, rq.begin)
		return v, OutcomeUnguarded, err
	}
	var err error
	rq.d, err = g.derive(c, rq.label, input)
	return guarded(ctx, rq, err, fn)
}

// unguarded runs fn without a record: in a transaction of its own when the
// call is transactional (begin is not nil), begun, committed and rolled
// back through g.timed as every store call is.
func runUnguarded[T any](ctx context.Context, g *Guard, fn body[T], begin beginner) (v T, err error) {
	if begin == nil {
		return fn(ctx, nil)
	}
	var tx txn
	if err := g.timed(ctx, "begin", func() (err error) { tx, err = begin(ctx); return err }); err != nil {
		return v, &storeError{Op: "begin", Err: err}
	}
	committed := false
	defer func() {
		if !committed {
			_ = g.timed(ctx, "rollback", func() error { return tx.Rollback(context.WithoutCancel(ctx)) })
		}
	}()
	if v, err = fn(ctx, tx); err != nil {
		return v, err
	}
	committed = true
	if err := g.timed(ctx, "commit", func() error { return tx.Commit(ctx) }); errors.Is(err, store.ErrRefused) {
		return v, &refusedError{Err: err}
	} else if err != nil {
		return v, err
	}
	return v, nil
}

// guarded runs the call rq, whose key is rq.d (or whose key could not be
// derived, derr): the local cache, then the in-process flight, then the
// store protocol in lead.
func guarded[T any](ctx context.Context, rq *request, derr error, fn body[T]) (v T, out Outcome, err error) {
	g, c, d := rq.g, rq.c, &rq.d
	o := observation{scope: rq.label, step: rq.step, c: c}
	ctx, o.span = g.span(ctx, telemetry.SpanExecute)
	defer func() { g.endExecute(ctx, &o, d, out, err) }()
	switch {
	case derr != nil:
		return v, 0, derr
	case d.key == "" && c.requireKey:
		return v, 0, fmt.Errorf("%w (scope %s)", ErrKeyMissing, d.scope)
	case d.key == "":
		g.unguardedRun(ctx, d)
		ud := *d // a copy, so that d stays on the stack of the other paths
		v, err = runUnguarded(context.WithValue(ctx, runningKey{}, &running{g: g, c: c, d: &ud}), g, fn, rq.begin)
		return v, OutcomeUnguarded, err
	}
	if g.cache != nil {
		o.cache = "miss"
		if rec, ok := g.cached(d.key); ok {
			o.cache = "hit"
			v, out, err = replay[T](ctx, c, d, rec, OutcomeReplayed)
			if rq.parent != nil && out != 0 {
				rq.parent.steps.addReplayed(d, rec)
			}
			return v, out, err
		}
	}
	// Calls share an execution only when their payloads hash the same, so a
	// shared outcome is exactly what the call would have read from the store.
	cl := &call{g: g, c: c, d: *d, begin: rq.begin, parent: rq.parent}
	for {
		f, leader := g.flights.join(flightKey{d.key, d.payloadHash}, &cl.flight)
		if leader {
			return lead(ctx, cl, fn)
		}
		var again bool
		if v, out, err, again = follow[T](ctx, g, c, d, f); !again {
			return v, out, err
		}
	}
}

// lead runs the protocol for one key: claim, then replay, or run the
// function and record its outcome. Followers in this process get what it
// lands.
func lead[T any](ctx context.Context, cl *call, fn body[T]) (v T, out Outcome, err error) {
	g, c, f := cl.g, cl.c, &cl.flight
	// Until the flight lands or the runner takes the call over, a panic (in
	// the store, a lookup under a previous secret) lands the flight and
	// gives back a claim made, so that no later call in this process joins
	// a flight that never lands.
	var existing *store.Record
	landed := false
	defer func() {
		if !landed {
			cl.abandon(ctx, existing == nil, recover())
		}
	}()
	existing, err = g.acquire(ctx, c, &cl.d, f, &cl.claim)
	switch {
	case err != nil:
		landed = true
		g.flights.land(f, landing{err: err})
		return v, 0, err
	case existing != nil:
		// Landed before the replay, which runs the outcome hook and the
		// codec: the followers replay the record themselves.
		landed = true
		g.flights.land(f, landing{rec: existing})
		g.remember(existing)
		v, out, err = replay[T](ctx, c, &cl.d, existing, OutcomeReplayed)
		if cl.parent != nil && out != 0 {
			// A step that replays is one of its call's steps all the same:
			// released with them if the call's result filter refuses it.
			cl.parent.steps.addReplayed(&cl.d, existing)
		}
		return v, out, err
	}
	g.flights.markExecuting(f, cl.claim.LeaseExpiresAt)

	cl.run = running{g: g, c: c, d: &cl.d}
	switch {
	case cl.parent != nil:
		// A step: in its call's transaction, noted in its call's steps.
		cl.run.tx, cl.run.steps = cl.parent.tx, cl.parent.steps
	case cl.begin != nil || c.keepResult != nil:
		cl.run.steps = &steps{}
	}
	cctx, cancel := context.WithCancelCause(ctx)
	cl.ctx = runCtx{Context: cctx, r: &cl.run}
	cl.keeper.init(ctx, cl, cancel)
	r := runner[T]{cl: cl, ctx: ctx}
	landed = true // from here on, by the runner
	defer r.settleOnPanic(cancel)
	cl.keeper.start()
	if cl.begin != nil {
		var tx txn
		berr := g.timed(ctx, "begin", func() (err error) { tx, err = cl.begin(&cl.ctx); return err })
		if berr != nil {
			cl.keeper.stop()
			g.release(ctx, &cl.d, &cl.claim)
			r.settled = true
			err = &storeError{Op: "begin", Key: cl.d.key, Err: berr}
			g.flights.land(f, landing{err: err})
			cancel(nil)
			return v, 0, err
		}
		cl.run.tx = tx
	}
	v, err = fn(&cl.ctx, cl.run.tx)
	r.returned = true
	leaseEnd, lost := cl.keeper.stop()
	cancel(nil)
	v, out, err = r.conclude(v, err, leaseEnd, lost)
	r.settled = true
	return v, out, err
}

// runner records the outcome of a call that ran its function.
type runner[T any] struct {
	cl       *call
	ctx      context.Context // the caller's context, for the records' store calls
	returned bool            // the function returned: its side effect happened
	settled  bool            // the outcome is recorded or released, and landed
}

// conclude records what the function returned (v, fnErr), with the lease
// that ended at leaseEnd, or lost, and lands it.
func (r *runner[T]) conclude(v T, fnErr error, leaseEnd time.Time, lost error) (T, Outcome, error) {
	cl, ctx := r.cl, r.ctx
	g, c := cl.g, cl.c
	var l landing
	out := OutcomeExecuted
	switch {
	case fnErr != nil:
		if lost != nil {
			fnErr = fmt.Errorf("%w: %w", lost, fnErr)
		}
		cl.rollback(ctx)
		if lost != nil || !c.isDefinite(fnErr) {
			g.release(ctx, &cl.d, &cl.claim)
			l = landing{err: fnErr, released: true}
			out = OutcomeReleased
			break
		}
		data, encErr := c.errorCodec.EncodeError(fnErr)
		rec, cerr := cl.writeOutcome(ctx, leaseEnd, store.ResultError, data, encErr)
		if cerr != nil {
			fnErr = errors.Join(fnErr, cerr)
		}
		l = landing{rec: rec, err: fnErr}
	case c.keepResult != nil && !c.keepResult(v):
		// The caller gets the result; the next call runs again, and so do
		// the steps of this call. A step's refusal releases the step
		// alone (its claim, never completed): the transaction it ran in
		// and the steps before it are its call's.
		var err error
		tx := cl.run.tx
		if cl.parent != nil {
			tx = nil
		}
		switch {
		case tx != nil && lost != nil:
			// The lease was lost (perhaps taken over): a holder that may
			// be a zombie commits nothing.
			cl.rollback(ctx)
			err = fmt.Errorf("%w: the transaction was rolled back", lost)
		case tx != nil:
			err = g.timed(ctx, "commit", func() error { return tx.Commit(context.WithoutCancel(ctx)) })
			cl.run.tx = nil
		}
		g.release(ctx, &cl.d, &cl.claim)
		if cl.parent == nil {
			cl.run.steps.retire(ctx, g)
		}
		out = OutcomeReleased
		l = landing{hasValue: err == nil, err: err, released: true}
		if l.hasValue && g.flights.followed(&cl.flight) {
			l.value = v
		}
		fnErr = err
	default:
		data, encErr := c.codec.Marshal(v)
		rec, cerr := cl.writeOutcome(ctx, leaseEnd, store.ResultValue, data, encErr)
		if cerr != nil {
			var zero T
			v, fnErr = zero, cerr
		}
		l = landing{rec: rec, hasValue: cerr == nil}
		if cl.released {
			// The transaction did not commit and the key was released
			// (refused by the function's own condition, or failed).
			out = OutcomeReleased
			l = landing{err: cerr, released: true}
		}
		if l.hasValue && g.flights.followed(&cl.flight) {
			l.value = v // boxed only for followers
		}
	}
	g.flights.land(&cl.flight, l)
	return v, out, fnErr
}

// settleOnPanic settles a call left unsettled by a panic or
// runtime.Goexit, in the function or after it returned, and lets the panic
// go on.
func (r *runner[T]) settleOnPanic(cancel context.CancelCauseFunc) {
	if r.settled {
		return
	}
	cancel(nil)
	cl, ctx := r.cl, r.ctx
	g := cl.g
	p := recover()
	leaseEnd, _ := cl.keeper.stop()
	perr := error(errGoexit)
	if p != nil {
		perr = &panicError{Value: p, Stack: debug.Stack()}
	}
	rec := cl.done
	switch {
	case rec != nil:
		// The outcome is recorded (a panic in the outcome hook): keep it.
	case cl.begin != nil || (cl.parent != nil && cl.parent.tx != nil):
		// The function's writes roll back with the transaction (or
		// committed with the completion, which Release leaves alone); a
		// step's roll back with its call's, which goes on panicking.
		cl.rollback(ctx)
		g.release(ctx, &cl.d, &cl.claim)
	case r.returned:
		// The side effect happened: never run it again.
		done := g.completedRecord(cl.c, &cl.claim, store.ResultUnavailable, nil)
		if g.complete(ctx, &cl.d, done, leaseEnd) == nil {
			rec = done
		}
		g.log(ctx, slog.LevelError, "idemguard: panic after the guarded function returned; recorded without a result", &cl.d, slog.Any("panic", p))
	default:
		g.release(ctx, &cl.d, &cl.claim)
	}
	g.flights.land(&cl.flight, landing{rec: rec, err: perr})
	if p != nil {
		panic(p)
	}
}

// abandon settles a call that panicked (with p), or called
// runtime.Goexit, before it ran its function: it releases the claim if the
// call may hold one (claimed), lands the flight and lets the panic go on.
func (cl *call) abandon(ctx context.Context, claimed bool, p any) {
	perr := error(errAbandoned)
	if p != nil {
		perr = &panicError{Value: p, Stack: debug.Stack()}
	}
	if claimed && cl.claim.Token != "" {
		// Fenced by the token: a no-op unless the claim is still ours.
		cl.g.release(ctx, &cl.d, &cl.claim)
	}
	cl.g.flights.land(&cl.flight, landing{err: perr})
	if p != nil {
		panic(p)
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
		g.flights.mu.Lock()
		defer g.flights.mu.Unlock()
		return &inProgressError{Key: d.key, LeaseExpiresAt: f.leaseEnd}
	}
	if c.mode == guardhook.Reject {
		select {
		case <-f.decided:
		case <-ctx.Done():
			return v, 0, ctx.Err(), false
		}
		g.flights.mu.Lock()
		running := f.executing || f.busy
		g.flights.mu.Unlock()
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
