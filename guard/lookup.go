package guard

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemguard/idemguard/store"
)

// State is what a key's record says at a look-up ([Lookup]).
type State int

const (
	// StateNone: no live record; the next call with the key runs the
	// function. A completed record past its TTL counts as none.
	StateNone State = iota
	// StateInProgress: a call holds the key. Its lease may have lapsed
	// (LeaseExpiresAt in the past): its holder stopped, and the next call
	// takes the key over.
	StateInProgress
	// StateCompleted: a call completed; the next call with the key replays
	// its outcome.
	StateCompleted
)

func (s State) String() string {
	switch s {
	case StateInProgress:
		return "in_progress"
	case StateCompleted:
		return "completed"
	}
	return "none"
}

// Status is what a key's record says now, from [Lookup].
type Status[T any] struct {
	// Key is the idempotency key looked up.
	Key string
	// State is the record's state.
	State State
	// LeaseExpiresAt is, in progress, when the holder's claim lapses
	// unless extended.
	LeaseExpiresAt time.Time
	// ExpiresAt is, completed, when the record stops being replayed.
	ExpiresAt time.Time
	// Value and Err are, completed, what a replay returns: the decoded
	// value, or the definite error, or [ErrResultUnavailable].
	Value T
	Err   error
	// Record is the store's record; nil for StateNone.
	Record *store.Record
}

// Lookup returns what the record of input's key within scope says now,
// without claiming the key or waiting: for status endpoints, and clients
// that prefer to poll rather than wait. The key is derived as [Do] derives
// it under opts; a completed outcome is decoded as a replay would decode
// it, and checked against the payload ([ErrPayloadMismatch]). It makes
// one strongly consistent read ([store.Store.Get]) and no write. An empty
// key selection is [ErrKeyMissing]; a store failure is a [*StoreError]. A
// disabled guard (IDEMGUARD_DISABLED) reports StateNone.
func Lookup[T any](ctx context.Context, g *Guard, scope string, input any, opts ...CallOption) (Status[T], error) {
	var st Status[T]
	c, err := g.with(scope, opts)
	if err != nil {
		return st, err
	}
	d, err := g.derive(c, scope, input)
	if err != nil {
		return st, err
	}
	if d.key == "" {
		return st, fmt.Errorf("%w (scope %s)", ErrKeyMissing, scope)
	}
	st.Key = d.key
	if g.disabled {
		return st, nil
	}
	rec, err := g.readRecord(ctx, d.key)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return st, nil
	case err != nil:
		return st, &StoreError{Op: "get", Key: d.key, Err: err}
	}
	now := g.clock.Now()
	if !now.Before(rec.ExpiresAt) {
		return st, nil
	}
	if err := validate(&d, rec, d.payloadHash); err != nil {
		return st, err
	}
	st.Record = rec
	if rec.Status != store.StatusCompleted {
		st.State, st.LeaseExpiresAt = StateInProgress, rec.LeaseExpiresAt
		return st, nil
	}
	st.State, st.ExpiresAt = StateCompleted, rec.ExpiresAt
	quiet := *c
	quiet.onOutcome = nil // a look-up is not a replay
	st.Value, _, st.Err = replay[T](ctx, &quiet, &d, rec, OutcomeReplayed)
	return st, nil
}
