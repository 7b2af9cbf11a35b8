package epoch

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/idemguard/idemguard/store"
)

// TestConditionAgreesWithLive checks, over random times, that the
// comparisons the stores' Acquire conditions make on the stored numbers
// (expiry in whole seconds rounded up, lease in milliseconds rounded up, now
// rounded down: DynamoDB's condition expression, Redis's claim script) give
// the same answer as store.Record.Live on the decoded record.
func TestConditionAgreesWithLive(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	jitter := func() time.Duration {
		// Within a few seconds, at every precision: whole seconds, ms, ns.
		d := time.Duration(rng.Int64N(int64(6 * time.Second)))
		switch rng.IntN(3) {
		case 0:
			d = d.Truncate(time.Second)
		case 1:
			d = d.Truncate(time.Millisecond)
		}
		return d
	}
	for i := 0; i < 200000; i++ {
		exp, lease, now := base.Add(jitter()), base.Add(jitter()), base.Add(jitter())
		stored := &store.Record{
			Status:         store.StatusInProgress,
			ExpiresAt:      time.Unix(CeilSeconds(exp), 0),
			LeaseExpiresAt: time.UnixMilli(CeilMillis(lease)),
		}
		replaceable := CeilSeconds(exp) <= FloorSeconds(now) || CeilMillis(lease) <= FloorMillis(now)
		if replaceable == stored.Live(now) {
			t.Fatalf("exp %v lease %v now %v: condition says replaceable=%v, Live says %v",
				exp, lease, now, replaceable, stored.Live(now))
		}
		// Rounding never shortens a time, and moves it less than the unit.
		if d := stored.ExpiresAt.Sub(exp); d < 0 || d >= time.Second {
			t.Fatalf("expiry %v stored as %v", exp, stored.ExpiresAt)
		}
		if d := stored.LeaseExpiresAt.Sub(lease); d < 0 || d >= time.Millisecond {
			t.Fatalf("lease %v stored as %v", lease, stored.LeaseExpiresAt)
		}
	}
}

func TestCheck(t *testing.T) {
	for _, tm := range []time.Time{{}, time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC), time.Unix(1900000000, 0)} {
		if err := Check("s", "ExpiresAt", tm); err != nil {
			t.Errorf("Check(%v) = %v", tm, err)
		}
	}
	for _, tm := range []time.Time{time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), time.Time{}.Add(-time.Second)} {
		if err := Check("s", "ExpiresAt", tm); err == nil || !strings.Contains(err.Error(), "s: ExpiresAt") {
			t.Errorf("Check(%v) = %v, want an error naming s: ExpiresAt", tm, err)
		}
	}
}
