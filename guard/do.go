package guard

import "context"

// The entry points of a single call, Do and Wrap, and what a guarded
// function reads of its call. DoTx, Step and DoBatch are the other entry
// points (tx.go, step.go, batch_run.go); all of them go down run.go's path.

// Do runs fn at most once for the key derived from input within scope, and
// returns its result, or the stored result of an earlier call with the same
// key. Scope names what is guarded, so that two guarded functions never
// share keys; input is what the key is derived from (see [WithKeyPath]).
// The key is bound before fn runs, so fn may change input.
//
// If fn returns an error the record is released and the next call runs fn
// again, unless the error is definite (see [WithDefiniteErrors]), in which
// case it is stored and replayed. If fn panics the record is released and
// the panic continues in the caller. If something panics after fn returned
// (a result's MarshalJSON, a codec, a predicate), the side effect has
// happened: the record is completed without a result (replays get
// [ErrResultUnavailable]) and the panic continues in the caller.
func Do[T any](ctx context.Context, g *Guard, scope string, input any, fn func(context.Context) (T, error), opts ...CallOption) (T, error) {
	c, err := g.with(scope, opts)
	if err != nil {
		var zero T
		return zero, err
	}
	v, out, err := execute(ctx, &request{g: g, c: c, label: scope}, input, noTx(fn))
	if c.report != nil {
		*c.report = out
	}
	return v, err
}

// Wrap returns a function with fn's signature that runs fn through [Do],
// deriving the key from its input argument. Options are checked once,
// here, and so is scope: a scope whose keys the store cannot hold is
// refused ([Guard.CheckScope]).
func Wrap[In, Out any](g *Guard, scope string, fn func(context.Context, In) (Out, error), opts ...CallOption) (func(context.Context, In) (Out, error), error) {
	c, err := g.with(scope, opts)
	if err != nil {
		return nil, err
	}
	if err := g.CheckScope(scope); err != nil {
		return nil, err
	}
	return func(ctx context.Context, in In) (Out, error) {
		v, _, err := execute(ctx, &request{g: g, c: c, label: scope}, in, func(ctx context.Context, _ txn) (Out, error) { return fn(ctx, in) })
		return v, err
	}, nil
}

// KeyFromContext returns the idempotency key of the guarded call running
// with ctx, "<scope>#<hash>". Inside the function, pass it downstream (for
// example as a payment provider's Idempotency-Key header): it is the same on
// every retry, which closes the one window no store can close, a crash after
// the side effect and before its completion is recorded. It reports false
// outside a guarded call, and inside one that runs unguarded (an empty key
// selection, a disabled guard), where there is no key.
func KeyFromContext(ctx context.Context) (string, bool) {
	r, ok := ctx.Value(runningKey{}).(*running)
	if !ok || r.d.key == "" {
		return "", false
	}
	return r.d.key, true
}
