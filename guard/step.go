package guard

import (
	"context"
	"errors"
)

// ErrNotInCall is returned by [Step] called outside a guarded call: there is
// no enclosing call's key to derive the step's key from. It is a
// programming error; retrying fails the same way.
var ErrNotInCall = errors.New("idemguard: guard.Step called outside a guarded call")

// Step runs fn at most once as the step called name of the guarded call
// running with ctx: the function of a [Do], [Execute], [Wrap] or guarded
// activity that does several side effects in turn. The step is guarded like
// a call of its own, under a key derived from the enclosing call's key and
// name, with the enclosing call's TTL, lease and mode, overridden by opts.
// Its value and a definite error are encoded with the guard's codecs (those
// given to [New], [JSON] and [MessageErrors] by default, or the step's own
// [WithCodec]), never with a codec an adapter set for the enclosing call's
// result; the enclosing call's key path, result filter and outcome hook do
// not apply to it.
//
// It makes a function of several side effects resumable, as Stripe's
// recovery points do: when step 3 fails, the enclosing call fails and
// releases its key, and its retry replays steps 1 and 2 from their records
// and runs only step 3:
//
//	func SendInvoice(ctx context.Context, inv Invoice) (Receipt, error) {
//		pdf, err := guard.Step(ctx, "render", func(ctx context.Context) (string, error) { return render(ctx, inv) })
//		...
//		_, err = guard.Step(ctx, "email", func(ctx context.Context) (struct{}, error) { return struct{}{}, mail(ctx, inv, pdf) })
//		...
//	}
//
// Step names must be unique and stable within the function: a step's key
// is its name, not its position. Outside a guarded call Step returns
// [ErrNotInCall] without running fn; inside a call that runs unguarded (an
// empty key selection, a disabled guard) it runs fn unguarded too.
func Step[T any](ctx context.Context, name string, fn func(context.Context) (T, error), opts ...CallOption) (T, error) {
	var zero T
	r, ok := ctx.Value(runningKey{}).(*running)
	switch {
	case !ok:
		return zero, ErrNotInCall
	case name == "":
		return zero, invalidOption("empty step name")
	case r.key == "":
		return fn(ctx)
	}
	c := *r.c
	// What selects, filters or observes the enclosing call's own input and
	// result does not apply to a step's, and its values are encoded as the
	// guard encodes values: the enclosing call's codec may be an adapter's,
	// made for that call's result alone (an HTTP response, a gRPC message).
	c.keyPath, c.validationPath, c.claimToken, c.keepResult, c.onOutcome = nil, nil, "", nil, nil
	c.codec, c.errorCodec, c.isDefinite = r.g.cfg.codec, r.g.cfg.errorCodec, r.g.cfg.isDefinite
	for _, o := range opts {
		o.applyCall(&c)
	}
	if c.err != nil {
		return zero, c.err
	}
	c.explicitKey, c.hasKey = r.key, true
	v, _, err := execute(ctx, r.g, &c, r.scope+"/"+name, nil, noTx(fn))
	return v, err
}
