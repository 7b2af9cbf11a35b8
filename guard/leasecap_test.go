package guard_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/internal/leasecap"
)

// A context whose deadline ends the process (an AWS Lambda invocation,
// marked by its adapter) bounds the claim: the lease taken is at most the
// time left, explicit lease or not, and the keeper never extends it past
// the deadline, so that the claim lapses when its holder is dead. Without
// the mark the keeper extends the lease past the deadline, as a function
// may outlive its context.
func TestLeaseCappedAtMarkedDeadline(t *testing.T) {
	for _, c := range []struct {
		name   string
		marked bool
		opts   []guard.CallOption
	}{
		{"deadline lease, marked", true, nil},
		{"explicit lease, marked", true, []guard.CallOption{guard.WithLease(10 * time.Minute)}},
		{"deadline lease, not marked", false, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			clock := newFakeClock()
			m, cs := newMemory()
			g := mustGuard(t, cs, adapt.WithClock(clock))
			const left = time.Minute
			dctx, cancel := context.WithTimeout(ctx, left)
			defer cancel()
			if c.marked {
				dctx = leasecap.AtDeadline(dctx)
			}
			start := clock.Now()
			limit := start.Add(left)
			leaseEnd := func(ctx context.Context) time.Time {
				k, _ := guard.KeyFromContext(ctx)
				rec, err := m.Get(ctx, k)
				if err != nil {
					t.Fatal(err)
				}
				return rec.LeaseExpiresAt
			}
			ran := make(chan struct{})
			done := make(chan time.Time)
			go func() {
				var end time.Time
				_, _ = guard.Do(dctx, g, "s", 1, func(ctx context.Context) (int, error) {
					close(ran)
					if end = leaseEnd(ctx); end.After(limit) {
						t.Errorf("claimed until %v, past the deadline %v", end.Sub(start), left)
					}
					// Past two thirds of the lease: the keeper has
					// extended it twice, or found nothing to extend.
					clock.BlockUntil(1)
					clock.Advance(left / 3)
					clock.BlockUntil(1)
					clock.Advance(left / 3)
					clock.BlockUntil(1)
					end = leaseEnd(ctx)
					return 1, nil
				}, c.opts...)
				done <- end
			}()
			<-ran
			end := <-done
			switch {
			case c.marked && (end.After(limit) || cs.extends.Load() != 0):
				t.Errorf("lease end %v after %d extensions; want at most the deadline, %v, and no extension past it", end.Sub(start), cs.extends.Load(), left)
			case !c.marked && !end.After(limit):
				t.Errorf("lease end %v after %d extensions; want it extended past the context's deadline, %v", end.Sub(start), cs.extends.Load(), left)
			}
		})
	}
}
