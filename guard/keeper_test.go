package guard_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/store"
)

// A claim that comes back from a slow store with less than a third of its
// lease left is extended at once, not given up at its lease end, and every
// extension writes the lease the call asked for, not what the slow claim
// left of it.
func TestLeaseKeeperAfterSlowClaim(t *testing.T) {
	const lease = 3 * time.Second
	for _, left := range []time.Duration{100 * time.Millisecond, 500 * time.Millisecond, 900 * time.Millisecond, 2 * time.Second} {
		t.Run(left.String(), func(t *testing.T) {
			m := newMemoryStore()
			clock := newFakeClock()
			cs := newCounting(m)
			// The store answers the claim when all but left of its lease
			// has passed.
			cs.set(func(c *countingStore) {
				c.onAcquire = func(rec *store.Record) { clock.Advance(rec.LeaseExpiresAt.Sub(clock.Now()) - left) }
			})
			g := mustGuard(t, cs, adapt.WithClock(clock), guard.WithLease(lease))

			inside := make(chan context.Context)
			release := make(chan struct{})
			done := make(chan error, 1)
			go func() {
				_, err := guard.Do(ctx, g, "job", "slow-claim", func(ctx context.Context) (int, error) {
					inside <- ctx
					<-release
					return 1, nil
				})
				done <- err
			}()
			fctx := <-inside
			key := "job#" // the record's key, found below
			extendedAt := clock.Now()
			if left >= lease/3 {
				// Time enough: the first extension comes a third of a
				// lease on.
				if err := clock.BlockUntilContext(ctx, 1); err != nil {
					t.Fatal(err)
				}
				clock.Advance(lease / 3)
				extendedAt = extendedAt.Add(lease / 3)
			}
			waitFor(t, "an extension of the slow claim", func() bool { return cs.extends.Load() >= 1 })
			m.each(func(r store.Record) { key = r.Key })
			rec, err := m.Get(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if want := extendedAt.Add(lease); !rec.LeaseExpiresAt.Equal(want) {
				t.Errorf("first extension wrote lease end %v, want %v: the claim's whole lease from the extension", rec.LeaseExpiresAt, want)
			}

			// Past the claim's own lease end, the keeper goes on extending
			// by the whole lease.
			for i := range 3 {
				if err := clock.BlockUntilContext(ctx, 1); err != nil {
					t.Fatal(err)
				}
				clock.Advance(lease / 3)
				want := int64(i + 2)
				waitFor(t, "a later extension", func() bool { return cs.extends.Load() >= want })
			}
			if err := fctx.Err(); err != nil {
				t.Fatalf("the function's context ended while the keeper could extend: %v (%v)", err, context.Cause(fctx))
			}
			rec, err = m.Get(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if want := clock.Now().Add(lease); !rec.LeaseExpiresAt.Equal(want) {
				t.Errorf("later extension wrote lease end %v, want %v", rec.LeaseExpiresAt, want)
			}
			close(release)
			if err := <-done; err != nil {
				t.Fatalf("Do: %v", err)
			}
		})
	}
}
