package guard

import (
	"context"

	"github.com/idemguard/idemguard/internal/guardhook"
)

// Step runs fn at most once as the step called name of the guarded call
// running with ctx: the function of a [Do], [Wrap], [DoTx],
// [DoBatch] item or an adapter's call (a guarded activity, HTTP handler,
// gRPC method or message handler) that does several side effects in turn.
// It makes such a function resumable, as Stripe's recovery points do: when
// step 3 fails, the enclosing call fails and releases its key, and its
// retry replays steps 1 and 2 from their records and runs only step 3:
//
//	func SendInvoice(ctx context.Context, inv Invoice) (Receipt, error) {
//		pdf, err := guard.Step(ctx, "render", func(ctx context.Context) (string, error) { return render(ctx, inv) })
//		...
//		_, err = guard.Step(ctx, "email", func(ctx context.Context) (struct{}, error) { return struct{}{}, mail(ctx, inv, pdf) })
//		...
//	}
//
// A step keeps the enclosing call's promises:
//
//   - Its key is derived from the enclosing call's key and name; step names
//     must be unique and stable within the function (a step's key is its
//     name, not its position).
//   - Its record carries the enclosing call's payload hash
//     ([WithPayloadValidation]): a later call with the same key but another
//     payload gets [ErrPayloadMismatch] at the step, never the step's
//     earlier result.
//   - Inside a transactional call ([DoTx]) it completes inside the call's
//     transaction: its record commits with the function's writes, and its
//     claim is released if they roll back.
//   - When the enclosing call's result filter refuses its result
//     ([WithResultFilter]), its steps are released with it, those it
//     replayed from an earlier attempt too, so that the next call runs
//     them again. A step's own result filter releases the step alone: it
//     never ends the call's transaction nor releases the call's other
//     steps.
//   - Under a rotating key secret ([WithKeySecret]) it is looked up under
//     the previous secrets as the call is.
//
// The step is guarded like a call of its own, with the enclosing call's TTL,
// lease and mode, overridden by opts. Its value and a definite error are
// encoded with the guard's codecs (those given to [New], encoding/json and
// the error's message by default, or the step's own [WithCodec]), never with a
// codec an adapter set for the enclosing call's result; the enclosing
// call's key path, result filter and outcome hook do not apply to it. In
// telemetry a step counts under its call's scope, its name on its span.
//
// Outside a guarded call Step returns an error without running fn;
// inside a call that runs unguarded (an empty key selection, a disabled
// guard) it runs fn unguarded too.
func Step[T any](ctx context.Context, name string, fn func(context.Context) (T, error), opts ...CallOption) (T, error) {
	var zero T
	r, ok := ctx.Value(runningKey{}).(*running)
	switch {
	case !ok:
		return zero, guardhook.ErrNotInCall
	case name == "":
		return zero, invalidOption("empty step name")
	case r.d.key == "":
		return fn(ctx)
	}
	c := *r.c
	// What selects, filters or observes the enclosing call's own input and
	// result does not apply to a step's, and its values are encoded as the
	// guard encodes values: the enclosing call's codec may be an adapter's,
	// made for that call's result alone (an HTTP response, a gRPC message).
	c.keyPath, c.validationPath, c.claimToken, c.keepResult, c.onOutcome = nil, nil, "", nil, nil
	c.hasKey, c.explicitKey = false, nil
	c.codec, c.errorCodec, c.isDefinite = r.g.cfg.codec, r.g.cfg.errorCodec, r.g.cfg.isDefinite
	c.callSet, c.fixed = 0, 0 // what the call's adapter fixed is not the step's
	for _, o := range opts {
		o.applyCall(&c)
	}
	if c.err != nil {
		return zero, c.err
	}
	d, err := r.g.deriveStep(r.d, name)
	v, _, err := guarded(ctx, &request{g: r.g, c: &c, d: d, label: r.d.scope, step: name, parent: r}, err, noTx(fn))
	return v, err
}
