package guard

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/idemguard/idemguard/internal/guardhook"
	"github.com/idemguard/idemguard/store"
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
	v, _, err := guarded(ctx, r.g, &c, d, err, r.d.scope, noTx(fn), nil, r, name)
	return v, err
}

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

// releaseInTx releases the claims of the steps completed inside a
// transaction that did not commit: their records are in progress again,
// under their own tokens.
func (s *steps) releaseInTx(ctx context.Context, g *Guard) {
	for _, st := range s.take(func(st stepClaim) bool { return st.inTx }) {
		g.release(ctx, st.d, &st.claim)
	}
}

// retire releases the steps of a call whose result the filter refused,
// those completed in this attempt and those replayed from an earlier one,
// so that the next call runs them again. A step replayed under a rotating
// key secret is retired under the previous secrets too, where the next
// call would find it.
func (s *steps) retire(ctx context.Context, g *Guard) {
	for _, st := range s.take(func(stepClaim) bool { return true }) {
		g.retire(ctx, st.d, st.claim)
		if !st.replayed {
			continue
		}
		for _, p := range st.d.previous {
			rec, err := g.getFresh(ctx, p.key)
			if err == nil && rec.Status == store.StatusCompleted {
				g.retire(ctx, st.d, *rec)
			}
		}
	}
}

// retire completes the record of a step, rec, again as already expired,
// fenced by its token (a completed record is never deleted by a release),
// and drops it from the local cache.
func (g *Guard) retire(ctx context.Context, d *derived, rec store.Record) {
	rec.Status, rec.ResultKind, rec.Result = store.StatusCompleted, store.ResultUnavailable, nil
	rec.ExpiresAt, rec.LeaseExpiresAt = g.clock.Now().Add(-time.Hour-g.skew), time.Time{}
	sctx := newStoreContext(ctx, storeCallTimeout)
	err := g.timed(ctx, "complete", func() error { return g.store.Complete(sctx, &rec) })
	sctx.cancel()
	if err != nil && !errors.Is(err, store.ErrTokenMismatch) {
		g.log(ctx, slog.LevelWarn, "idemguard: releasing a step of a call whose result was filtered out failed; the step replays until it expires", d, slog.Any("error", err))
	}
	if g.cache != nil {
		g.cache.lru.Remove(rec.Key)
	}
}
