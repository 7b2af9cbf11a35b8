package guard

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/telemetry"
)

// Claim is a held claim on a key, for callers that cannot run the guarded
// work inside [Do]: a Temporal workflow, which claims and completes through
// separate activities, or work that spans processes. A Claim is a plain
// value that survives JSON encoding, so it can travel between those steps.
//
// Nothing extends a Claim's lease on its own: take a lease long enough for
// the work (see [WithLease]), or call [Guard.Extend].
type Claim struct {
	// Key is the idempotency key, "<scope>#<hash>".
	Key string `json:"key"`
	// Scope is the scope part of Key.
	Scope string `json:"scope,omitempty"`
	// Token is the claim's fencing token; empty for the claims of a
	// disabled guard, which hold nothing.
	Token string `json:"token"`
	// PayloadHash is the payload-validation hash, if validation is on.
	PayloadHash string `json:"payload_hash,omitempty"`
	// LeaseExpiresAt is when the claim lapses unless extended.
	LeaseExpiresAt time.Time `json:"lease_expires_at"`
}

// Claim derives the key of input within scope, as [Do] would, and claims it.
//
// It returns the Claim when this caller now holds the key; or, when a call
// with the key has completed, a nil Claim and the completed record, already
// checked against the payload; or the error [Do] would return without running
// the function ([ErrInProgress] after the wait budget in Wait mode,
// [ErrPayloadMismatch], [ErrKeyMissing], [ErrStore], …). An empty key
// selection without [WithRequireKey] is reported as [ErrKeyMissing] too:
// there is nothing to claim. A disabled guard (IDEMGUARD_DISABLED) returns
// a Claim that holds nothing, and its Complete, Extend and Release do
// nothing.
//
// A held Claim must end with [Guard.Complete] or [Guard.Release]; otherwise
// it blocks the key until its lease lapses.
func (g *Guard) Claim(ctx context.Context, scope string, input any, opts ...CallOption) (*Claim, *store.Record, error) {
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
		return &Claim{Key: d.key, Scope: d.scope, PayloadHash: d.payloadHash, LeaseExpiresAt: g.clock.Now().Add(c.leaseFor(ctx))}, nil, nil
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
	return &Claim{Key: claim.Key, Scope: d.scope, Token: claim.Token, PayloadHash: claim.PayloadHash, LeaseExpiresAt: claim.LeaseExpiresAt}, nil, nil
}

// derived returns the key of cl, for logs and the protocol's calls.
func (cl *Claim) derived() *derived {
	return &derived{key: cl.Key, scope: cl.Scope, payloadHash: cl.PayloadHash}
}

// record returns cl as the store's record of the claim.
func (cl *Claim) record() *store.Record {
	return &store.Record{Key: cl.Key, Status: store.StatusInProgress, Token: cl.Token, PayloadHash: cl.PayloadHash, LeaseExpiresAt: cl.LeaseExpiresAt}
}

// Complete records the outcome of a held claim: result is what replays get
// (the codec's bytes for [store.ResultValue], the error codec's for
// [store.ResultError]). Like [Do], it retries transient store failures while
// the lease holds and records a result too large for the store without a
// body. It returns the completed record, or [ErrLeaseLost] if the claim was
// taken over, or [ErrNotRecorded]. The record lives for the TTL of opts.
func (g *Guard) Complete(ctx context.Context, cl Claim, kind store.ResultKind, result []byte, opts ...CallOption) (*store.Record, error) {
	c, err := g.with("complete", opts)
	if err != nil {
		return nil, err
	}
	claim := cl.record()
	if g.disabled {
		return g.completed(c, claim, kind, result), nil
	}
	leaseEnd := cl.LeaseExpiresAt
	if now := g.clock.Now(); leaseEnd.Before(now.Add(storeCallTimeout)) {
		// Past the lease, one attempt still completes a claim nobody took.
		leaseEnd = now.Add(storeCallTimeout)
	}
	done, err := g.record(ctx, c, cl.derived(), claim, leaseEnd, kind, result, nil, nil)
	if errors.Is(err, ErrLeaseLost) {
		g.tel.LeaseLost.Add(ctx, 1, metric.WithAttributes(telemetry.ScopeKey.String(cl.Scope), g.tel.StoreAttr))
	}
	return done, err
}

// Finish records the outcome of a held claim as [Do] records what its
// function returned, for callers that ran the work outside Do (a Temporal
// workflow guard): with fnErr nil, v is encoded with the codec and
// completed, unless the result filter refuses it ([WithResultFilter]),
// which releases the claim; a definite fnErr ([WithDefiniteErrors]) is
// encoded with the error codec and completed; any other fnErr releases the
// claim so the next call runs again. It returns the completed record, or
// nil when the claim was released, and [ErrLeaseLost] if the claim was
// taken over. The record lives for the TTL of opts.
func (g *Guard) Finish(ctx context.Context, cl Claim, v any, fnErr error, opts ...CallOption) (*store.Record, error) {
	c, err := g.with("finish", opts)
	if err != nil {
		return nil, err
	}
	kind, data := store.ResultValue, []byte(nil)
	switch {
	case fnErr != nil && !c.isDefinite(fnErr):
		return nil, g.Release(ctx, cl)
	case fnErr != nil:
		kind = store.ResultError
		if data, err = c.errorCodec.EncodeError(fnErr); err != nil {
			kind, data = store.ResultUnavailable, nil
		}
	case c.keepResult != nil && !c.keepResult(v):
		return nil, g.Release(ctx, cl)
	default:
		if data, err = c.codec.Marshal(v); err != nil {
			kind, data = store.ResultUnavailable, nil
		}
	}
	return g.Complete(ctx, cl, kind, data, opts...)
}

// Release gives up a held claim so that the next call runs at once. A claim
// already taken over is left alone and reported as [ErrLeaseLost].
func (g *Guard) Release(ctx context.Context, cl Claim) error {
	if g.disabled {
		return nil
	}
	err := g.release(ctx, cl.derived(), cl.record())
	if errors.Is(err, store.ErrTokenMismatch) {
		return fmt.Errorf("%w (key %s)", ErrLeaseLost, cl.Key)
	}
	if err != nil {
		return &StoreError{Op: "release", Key: cl.Key, Err: err}
	}
	return nil
}

// Extend moves a held claim's lease end to leaseExpiresAt and returns the
// updated claim, or [ErrLeaseLost] if the claim was taken over. The record
// then lives until the lease end plus the TTL of opts.
func (g *Guard) Extend(ctx context.Context, cl Claim, leaseExpiresAt time.Time, opts ...CallOption) (Claim, error) {
	c, err := g.with("extend", opts)
	if err != nil {
		return cl, err
	}
	if g.disabled {
		cl.LeaseExpiresAt = leaseExpiresAt
		return cl, nil
	}
	err = g.extend(ctx, cl.Key, cl.Token, leaseExpiresAt, leaseExpiresAt.Add(c.ttl), storeCallTimeout)
	if errors.Is(err, store.ErrTokenMismatch) {
		return cl, fmt.Errorf("%w (key %s)", ErrLeaseLost, cl.Key)
	}
	if err != nil {
		return cl, &StoreError{Op: "extend", Key: cl.Key, Err: err}
	}
	cl.LeaseExpiresAt = leaseExpiresAt
	return cl, nil
}

// Decode returns the outcome stored in a completed record as [Do] would
// replay it: the value decoded with the codec, the definite error, or
// [ErrResultUnavailable].
func Decode[T any](g *Guard, rec *store.Record, opts ...CallOption) (T, error) {
	c, err := g.with("decode", opts)
	if err != nil {
		var zero T
		return zero, err
	}
	v, _, err := replay[T](context.Background(), c, &derived{key: rec.Key, payloadHash: rec.PayloadHash}, rec, OutcomeReplayed)
	return v, err
}

// CallSettings are the settings a call gets from the guard's defaults and
// its options, as [Guard.Settings] reports them, for adapters that act on
// them (a workflow guard that waits on workflow timers, an HTTP layer that
// announces a record's expiry).
type CallSettings struct {
	// TTL is how long a completed record is replayed ([WithTTL]).
	TTL time.Duration
	// Lease is the in-progress lease ([WithLease]); zero means the time
	// left until the context's deadline, else [DefaultLease].
	Lease time.Duration
	// Mode is what a call does when another holds the key ([WithWait],
	// [WithReject]), and WaitBudget how long it waits in [Wait] mode.
	Mode       Mode
	WaitBudget time.Duration
	// WaitInitial and WaitMax are the first and the longest pause between
	// polls in Wait mode ([WithWaitBackoff]).
	WaitInitial, WaitMax time.Duration
	// KeyPath is the key path's expression ([WithKeyPath]); "" when the
	// key is derived from the whole input.
	KeyPath string
}

// Settings returns the settings a call with opts gets, or the error that
// [Do] would return for invalid options, without making a call.
func (g *Guard) Settings(opts ...CallOption) (CallSettings, error) {
	c, err := g.with("settings", opts)
	if err != nil {
		return CallSettings{}, err
	}
	s := CallSettings{TTL: c.ttl, Lease: c.lease, Mode: c.mode, WaitBudget: c.waitBudget, WaitInitial: c.waitInitial, WaitMax: c.waitMax}
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
