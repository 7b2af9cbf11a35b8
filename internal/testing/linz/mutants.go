package linz

import (
	"context"
	"errors"
	"time"

	"github.com/idemguard/idemguard/store"
)

// A mutant is a store with one of the contract's conditions broken, built
// over any real store from the Store methods alone: it reads the record to
// learn its token and then forges the fenced write that the broken
// condition would have let through. The checker must tell each one from
// the real store.
type mutant struct {
	name string
	wrap func(store.Store) store.Store
}

// forgeTimeout bounds a mutant's forgery.
const forgeTimeout = 10 * time.Second

// forging returns the context of a mutant's forgery: the operation's,
// without its deadline, for at most forgeTimeout. A forgery takes two or
// three calls where the real store takes one; under the operation's own
// deadline (a quarter of HistoryConfig.OpTimeout to all of it) a slow
// store, as DynamoDB Local is on a loaded machine, ran most forgeries out
// of time, so that the broken write was recorded as an answer lost, which
// the checker rightly accepts as possibly applied, or never made — and
// the mutant went uncaught. The forgery still ends before the operation
// returns, so the history holds it within the operation's span.
func forging(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), forgeTimeout)
}

// mutants are the checker's mutation test: each breaks one condition.
var mutants = []mutant{
	{"ClaimAlwaysSucceeds", func(s store.Store) store.Store { return claimAlways{s} }},
	{"CompleteUnfenced", func(s store.Store) store.Store { return completeUnfenced{s} }},
	{"ReleaseIgnoresToken", func(s store.Store) store.Store { return releaseIgnoresToken{s} }},
	{"TakeoverUnreported", func(s store.Store) store.Store { return takeoverUnreported{s} }},
}

// takeoverUnreported is a store whose Acquire never says that it took a
// lapsed claim over, as one that ignores the record it replaced would.
type takeoverUnreported struct{ store.Store }

func (m takeoverUnreported) Acquire(ctx context.Context, rec *store.Record, now time.Time) (*store.Record, error) {
	old, err := m.Store.Acquire(ctx, rec, now)
	if err == nil {
		return nil, nil
	}
	return old, err
}

// claimAlways is a store whose Acquire always succeeds: it overwrites a
// live record as a claim without its condition would.
type claimAlways struct{ store.Store }

func (m claimAlways) Acquire(ctx context.Context, rec *store.Record, now time.Time) (*store.Record, error) {
	fctx, cancel := forging(ctx)
	defer cancel()
	for i := range 3 {
		if i > 0 {
			ctx = fctx
		}
		old, err := m.Store.Acquire(ctx, rec, now)
		if !errors.Is(err, store.ErrConflict) {
			return old, err
		}
		if old == nil || old.Token == rec.Token {
			return nil, nil
		}
		// Make the holder's record not live, then claim again.
		if old.Status == store.StatusInProgress {
			err = m.Store.Release(ctx, rec.Key, old.Token)
		} else {
			dead := *old
			dead.ExpiresAt = now.Truncate(time.Second).Add(-time.Second)
			dead.LeaseExpiresAt = time.Time{}
			err = m.Store.Complete(ctx, &dead)
		}
		if err != nil && !errors.Is(err, store.ErrTokenMismatch) {
			return nil, err
		}
	}
	return nil, nil
}

// completeUnfenced is a store whose Complete writes whoever holds the
// record, as an update without its token condition would.
type completeUnfenced struct{ store.Store }

func (m completeUnfenced) Complete(ctx context.Context, rec *store.Record) error {
	err := m.Store.Complete(ctx, rec)
	if !errors.Is(err, store.ErrTokenMismatch) {
		return err
	}
	ctx, cancel := forging(ctx)
	defer cancel()
	cur, gerr := m.Store.Get(ctx, rec.Key)
	if gerr != nil {
		if errors.Is(gerr, store.ErrNotFound) {
			return err // an update of nothing
		}
		return gerr
	}
	forged := *rec
	forged.Token = cur.Token
	return m.Store.Complete(ctx, &forged)
}

// releaseIgnoresToken is a store whose Release deletes any claim in
// progress, as a delete conditional on the status alone would.
type releaseIgnoresToken struct{ store.Store }

func (m releaseIgnoresToken) Release(ctx context.Context, key, token string) error {
	err := m.Store.Release(ctx, key, token)
	if !errors.Is(err, store.ErrTokenMismatch) {
		return err
	}
	ctx, cancel := forging(ctx)
	defer cancel()
	cur, gerr := m.Store.Get(ctx, key)
	if gerr != nil {
		if errors.Is(gerr, store.ErrNotFound) {
			return err
		}
		return gerr
	}
	if cur.Status != store.StatusInProgress {
		return err
	}
	return m.Store.Release(ctx, key, cur.Token)
}
