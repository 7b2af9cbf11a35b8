package guard

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemguard/idemguard/store"
)

// Lookup returns what the record of input's key within scope says now,
// without claiming the key or waiting: for status endpoints, and clients
// that prefer to poll rather than wait. The key is derived as [Do] derives
// it under opts. It makes one strongly consistent read ([store.Store.Get])
// and no write.
//
// The record is nil when the key has no live record (none, or a completed
// record past its TTL; a disabled guard, IDEMGUARD_DISABLED, reports none
// too): the next call with the key runs the function. A record in
// progress ([store.StatusInProgress]) has a holder until its
// LeaseExpiresAt; past it, the holder stopped and the next call takes the
// key over. A completed record ([store.StatusCompleted]) comes with what a
// replay of it returns, decoded as a replay decodes it: its value, or its
// recorded definite error ([IsDefinite]) or [ErrResultUnavailable] as err.
//
// Without a record, err is the look-up's own failure: [ErrKeyMissing] for
// an empty key selection, [ErrPayloadMismatch] when the record holds
// another payload, [ErrStore] when the store failed.
func Lookup[T any](ctx context.Context, g *Guard, scope string, input any, opts ...CallOption) (T, *store.Record, error) {
	var zero T
	c, err := g.with(scope, opts)
	if err != nil {
		return zero, nil, err
	}
	d, err := g.derive(c, scope, input)
	if err != nil {
		return zero, nil, err
	}
	if d.key == "" {
		return zero, nil, fmt.Errorf("%w (scope %s)", ErrKeyMissing, scope)
	}
	if g.disabled {
		return zero, nil, nil
	}
	rec, err := g.readRecord(ctx, d.key)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return zero, nil, nil
	case err != nil:
		return zero, nil, &storeError{Op: "get", Key: d.key, Err: err}
	}
	if !g.clock.Now().Before(rec.ExpiresAt) {
		return zero, nil, nil
	}
	if err := validate(&d, rec, d.payloadHash); err != nil {
		return zero, nil, err
	}
	if rec.Status != store.StatusCompleted {
		return zero, rec, nil
	}
	quiet := *c
	quiet.onOutcome = nil // a look-up is not a replay
	v, _, err := replay[T](ctx, &quiet, &d, rec, OutcomeReplayed)
	return v, rec, err
}
