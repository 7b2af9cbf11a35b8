package guard

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/idemguard/idemguard/internal/guardhook"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/telemetry"
)

// The two-step claim API, for adapters that cannot run the guarded work
// inside a call (a Temporal workflow, which claims and completes through
// separate activities): obtain, then complete (or finish), extend or
// release. Adapters reach it through internal/adapt.

// obtain derives the key of input within scope, as [Do] would, and claims it.
//
// It returns the Claim when this caller now holds the key; or, when a call
// with the key has completed, a nil Claim and the completed record, already
// checked against the payload; or the error [Do] would return without running
// the function ([ErrInProgress] after the wait budget in wait mode,
// [ErrPayloadMismatch], [ErrKeyMissing], [ErrStore], …). An empty key
// selection without [WithRequireKey] is reported as [ErrKeyMissing] too:
// there is nothing to claim. A disabled guard (IDEMGUARD_DISABLED) returns
// a Claim that holds nothing, and its Complete, Extend and Release do
// nothing.
//
// A held claim must end with completeClaim or releaseClaim; otherwise
// it blocks the key until its lease lapses.
func (g *Guard) obtain(ctx context.Context, scope string, input any, opts ...CallOption) (*heldClaim, *store.Record, error) {
	c, err := g.with(scope, opts)
	if err != nil {
		return nil, nil, err
	}
	d, err := g.derive(c, scope, input)
	if err != nil {
		return nil, nil, err
	}
	if d.key == "" {
		return nil, nil, fmt.Errorf("%w (scope %s)", ErrKeyMissing, scope)
	}
	if g.disabled {
		return &heldClaim{Key: d.key, Scope: d.scope, PayloadHash: d.payloadHash, LeaseExpiresAt: g.clock.Now().Add(c.leaseFor(ctx))}, nil, nil
	}
	if rec, ok := g.cached(d.key); ok {
		if err := validate(&d, rec, d.payloadHash); err != nil {
			return nil, nil, err
		}
		return nil, rec, nil
	}
	var claim store.Record
	existing, err := g.acquire(ctx, c, &d, nil, &claim)
	if err != nil {
		return nil, nil, err
	}
	if existing != nil {
		g.remember(existing)
		return nil, existing, nil
	}
	return &heldClaim{Key: claim.Key, Scope: d.scope, Token: claim.Token, PayloadHash: claim.PayloadHash, LeaseExpiresAt: claim.LeaseExpiresAt}, nil, nil
}

// claimDerived returns the key of cl, for logs and the protocol's calls.
func claimDerived(cl *heldClaim) *derived {
	return &derived{key: cl.Key, scope: cl.Scope, payloadHash: cl.PayloadHash}
}

// claimRecord returns cl as the store's record of the claim.
func claimRecord(cl *heldClaim) *store.Record {
	return &store.Record{Key: cl.Key, Status: store.StatusInProgress, Token: cl.Token, PayloadHash: cl.PayloadHash, LeaseExpiresAt: cl.LeaseExpiresAt}
}

// completeClaim records the outcome of a held claim: result is what replays get
// (the codec's bytes for [store.ResultValue], the error codec's for
// [store.ResultError]). Like [Do], it retries transient store failures while
// the lease holds and records a result too large for the store without a
// body. It returns the completed record, or [ErrLeaseLost] if the claim was
// taken over, or [ErrNotRecorded]. The record lives for the TTL of opts.
func (g *Guard) completeClaim(ctx context.Context, cl heldClaim, kind store.ResultKind, result []byte, opts ...CallOption) (*store.Record, error) {
	c, err := g.with("complete", opts)
	if err != nil {
		return nil, err
	}
	claim := claimRecord(&cl)
	if g.disabled {
		return g.completedRecord(c, claim, kind, result), nil
	}
	leaseEnd := cl.LeaseExpiresAt
	if now := g.clock.Now(); leaseEnd.Before(now.Add(storeCallTimeout)) {
		// Past the lease, one attempt still completes a claim nobody took.
		leaseEnd = now.Add(storeCallTimeout)
	}
	w := &call{g: g, c: c, d: *claimDerived(&cl), claim: *claim}
	done, err := w.writeOutcome(ctx, leaseEnd, kind, result, nil)
	if errors.Is(err, ErrLeaseLost) {
		g.tel.LeaseLost.Add(ctx, 1, metric.WithAttributes(telemetry.ScopeKey.String(cl.Scope), g.tel.StoreAttr))
	}
	return done, err
}

// finishClaim records the outcome of a held claim as [Do] records what its
// function returned, for callers that ran the work outside Do (a Temporal
// workflow guard): with fnErr nil, v is encoded with the codec and
// completed, unless the result filter refuses it ([WithResultFilter]),
// which releases the claim; a definite fnErr ([WithDefiniteErrors]) is
// encoded with the error codec and completed; any other fnErr releases the
// claim so the next call runs again. It returns the completed record, or
// nil when the claim was released, and [ErrLeaseLost] if the claim was
// taken over. The record lives for the TTL of opts.
func (g *Guard) finishClaim(ctx context.Context, cl heldClaim, v any, fnErr error, opts ...CallOption) (*store.Record, error) {
	c, err := g.with("finish", opts)
	if err != nil {
		return nil, err
	}
	kind, data := store.ResultValue, []byte(nil)
	switch {
	case fnErr != nil && !c.isDefinite(fnErr):
		return nil, g.releaseClaim(ctx, cl)
	case fnErr != nil:
		kind = store.ResultError
		if data, err = c.errorCodec.EncodeError(fnErr); err != nil {
			kind, data = store.ResultUnavailable, nil
		}
	case c.keepResult != nil && !c.keepResult(v):
		return nil, g.releaseClaim(ctx, cl)
	default:
		if data, err = c.codec.Marshal(v); err != nil {
			kind, data = store.ResultUnavailable, nil
		}
	}
	return g.completeClaim(ctx, cl, kind, data, opts...)
}

// releaseClaim gives up a held claim so that the next call runs at once. A claim
// already taken over is left alone and reported as [ErrLeaseLost].
func (g *Guard) releaseClaim(ctx context.Context, cl heldClaim) error {
	if g.disabled {
		return nil
	}
	err := g.release(ctx, claimDerived(&cl), claimRecord(&cl))
	if errors.Is(err, store.ErrTokenMismatch) {
		return fmt.Errorf("%w (key %s)", ErrLeaseLost, cl.Key)
	}
	if err != nil {
		return &storeError{Op: "release", Key: cl.Key, Err: err}
	}
	return nil
}

// extendClaim moves a held claim's lease end to leaseExpiresAt and returns the
// updated claim, or [ErrLeaseLost] if the claim was taken over. The record
// then lives until the lease end plus the TTL of opts.
func (g *Guard) extendClaim(ctx context.Context, cl heldClaim, leaseExpiresAt time.Time, opts ...CallOption) (heldClaim, error) {
	c, err := g.with("extend", opts)
	if err != nil {
		return cl, err
	}
	if g.disabled {
		cl.LeaseExpiresAt = leaseExpiresAt
		return cl, nil
	}
	err = g.extend(ctx, claimRecord(&cl), leaseExpiresAt, leaseExpiresAt.Add(c.ttl), storeCallTimeout)
	if errors.Is(err, store.ErrTokenMismatch) {
		return cl, fmt.Errorf("%w (key %s)", ErrLeaseLost, cl.Key)
	}
	if err != nil {
		return cl, &storeError{Op: "extend", Key: cl.Key, Err: err}
	}
	cl.LeaseExpiresAt = leaseExpiresAt
	return cl, nil
}

// decodeInto decodes the outcome stored in a completed record into v, a
// pointer to the result's type, as [Do] would replay it: the value decoded
// with the codec, the definite error, or [ErrResultUnavailable].
func (g *Guard) decodeInto(rec *store.Record, v any, opts ...CallOption) error {
	c, err := g.with("decode", opts)
	if err != nil {
		return err
	}
	if c.onOutcome != nil {
		c.onOutcome(context.Background(), rec.Key, rec, OutcomeReplayed)
	}
	return decode(c, rec.Key, rec, v)
}

// callSettings returns the settings a call with opts gets, or the error that
// [Do] would return for invalid options, without making a call.
func (g *Guard) callSettings(opts ...CallOption) (guardhook.CallSettings, error) {
	c, err := g.with("settings", opts)
	if err != nil {
		return guardhook.CallSettings{}, err
	}
	s := guardhook.CallSettings{TTL: c.ttl, Lease: c.lease, Mode: c.mode, WaitBudget: c.waitBudget, WaitInitial: c.waitInitial, WaitMax: c.waitMax}
	if c.keyPath != nil {
		s.KeyPath = c.keyPath.String()
	}
	return s, nil
}

// Key returns the idempotency key [Do] derives for input within scope under
// opts, and the payload hash it stores with payload validation on (else
// ""). The key is "" when the selection is empty. It touches no store; the
// idemguard command-line tool uses it to find an input's record.
func (g *Guard) Key(scope string, input any, opts ...CallOption) (key, payloadHash string, err error) {
	c, err := g.with(scope, opts)
	if err != nil {
		return "", "", err
	}
	d, err := g.derive(c, scope, input)
	return d.key, d.payloadHash, err
}
