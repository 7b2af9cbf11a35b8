package linz

import (
	"context"
	"testing"
	"time"

	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/memory"
)

// slowStore answers every call 40 ms late, as a store on a loaded machine
// does; a call whose deadline passes first is not made.
type slowStore struct{ store.Store }

func (s slowStore) wait(ctx context.Context) error {
	t := time.NewTimer(40 * time.Millisecond)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func (s slowStore) Acquire(ctx context.Context, rec *store.Record, now time.Time) (*store.Record, error) {
	if err := s.wait(ctx); err != nil {
		return nil, err
	}
	return s.Store.Acquire(ctx, rec, now)
}

func (s slowStore) Complete(ctx context.Context, rec *store.Record) error {
	if err := s.wait(ctx); err != nil {
		return err
	}
	return s.Store.Complete(ctx, rec)
}

func (s slowStore) Extend(ctx context.Context, key, token string, lease, exp time.Time) error {
	if err := s.wait(ctx); err != nil {
		return err
	}
	return s.Store.Extend(ctx, key, token, lease, exp)
}

func (s slowStore) Release(ctx context.Context, key, token string) error {
	if err := s.wait(ctx); err != nil {
		return err
	}
	return s.Store.Release(ctx, key, token)
}

func (s slowStore) Get(ctx context.Context, key string) (*store.Record, error) {
	if err := s.wait(ctx); err != nil {
		return nil, err
	}
	return s.Store.Get(ctx, key)
}

// A mutant forges its broken write with more calls than the operation it
// stands for (a release that meets another token reads the record, then
// releases under the token read). On a store slow against the operation's
// deadline, as DynamoDB Local is on a loaded machine, the forgery must not
// run out of the operation's time: a forgery cut short is recorded as an
// answer lost, which the checker rightly accepts as possibly applied, and
// the mutant went uncaught (TestLinearizableMutants/ReleaseIgnoresToken on
// DynamoDB). Here one call fits in the operation's deadline and three do
// not; each broken write must still be made, and reported as done.
func TestMutantsForgeOnASlowStore(t *testing.T) {
	now := time.Now()
	held := func(s store.Store, key, tok string) {
		t.Helper()
		rec := &store.Record{Key: key, Status: store.StatusInProgress, Token: tok, LeaseExpiresAt: now.Add(time.Hour), ExpiresAt: now.Add(time.Hour)}
		if _, err := s.Acquire(context.Background(), rec, now); err != nil {
			t.Fatal(err)
		}
	}
	op := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), 100*time.Millisecond)
	}
	mutant := func(name string) func(store.Store) store.Store {
		for _, m := range mutants {
			if m.name == name {
				return m.wrap
			}
		}
		t.Fatalf("no mutant %s", name)
		return nil
	}

	t.Run("ReleaseIgnoresToken", func(t *testing.T) {
		real := memory.New()
		held(real, "k", "holder")
		ctx, cancel := op()
		defer cancel()
		if err := mutant("ReleaseIgnoresToken")(slowStore{real}).Release(ctx, "k", "other"); err != nil {
			t.Fatalf("the forged release: %v", err)
		}
		if rec, err := real.Get(context.Background(), "k"); err == nil {
			t.Fatalf("the holder's claim survived the forged release: %+v", rec)
		}
	})
	t.Run("CompleteUnfenced", func(t *testing.T) {
		real := memory.New()
		held(real, "k", "holder")
		ctx, cancel := op()
		defer cancel()
		done := &store.Record{Key: "k", Status: store.StatusCompleted, Token: "other", ExpiresAt: now.Add(time.Hour)}
		if err := mutant("CompleteUnfenced")(slowStore{real}).Complete(ctx, done); err != nil {
			t.Fatalf("the forged completion: %v", err)
		}
		if rec, err := real.Get(context.Background(), "k"); err != nil || rec.Status != store.StatusCompleted {
			t.Fatalf("after the forged completion: %+v, %v", rec, err)
		}
	})
	t.Run("ClaimAlwaysSucceeds", func(t *testing.T) {
		real := memory.New()
		held(real, "k", "holder")
		ctx, cancel := op()
		defer cancel()
		rec := &store.Record{Key: "k", Status: store.StatusInProgress, Token: "other", LeaseExpiresAt: now.Add(time.Hour), ExpiresAt: now.Add(time.Hour)}
		if _, err := mutant("ClaimAlwaysSucceeds")(slowStore{real}).Acquire(ctx, rec, now); err != nil {
			t.Fatalf("the forged claim: %v", err)
		}
		if got, err := real.Get(context.Background(), "k"); err != nil || got.Token != "other" {
			t.Fatalf("after the forged claim: %+v, %v", got, err)
		}
	})
}
