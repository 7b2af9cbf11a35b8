package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idemguard/idemguard/store"
)

// runPurger runs the [store.Purger] cases if the stores newStore makes
// implement it, and says so either way.
func runPurger(t *testing.T, newStore MakeStore) {
	t.Run("Purger", func(t *testing.T) {
		probe := newStore(t)
		if _, ok := probe.(store.Purger); !ok {
			t.Skipf("%T does not implement store.Purger: it expires records itself, or keeps them; Purge cases not run", probe)
		}
		t.Logf("%T implements store.Purger: running the Purge cases", probe)
		tests := []struct {
			name string
			fn   func(t *testing.T, h *harness, p store.Purger)
		}{
			{"ExpiredOnly", testPurgeExpiredOnly},
			{"Many", testPurgeMany},
			{"ContextCancelled", testPurgeCancelled},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				s := newStore(t)
				tc.fn(t, newHarness(t, s), s.(store.Purger))
			})
		}
	})
}

// testPurgeExpiredOnly purges at t0+2h-1s: the records that expired at
// t0+1h go, completed or not; records that have not expired stay as they are,
// including an in-progress one whose lease has lapsed (expiry, not the
// lease, is what Purge looks at).
func testPurgeExpiredOnly(t *testing.T, h *harness, p store.Purger) {
	expiredDone := h.claim("scope#purge-expired-done", time.Minute)
	h.mustAcquire(t, expiredDone, h.t0)
	d := *expiredDone
	d.Status, d.Result = store.StatusCompleted, []byte(`"old"`) // still expires at t0+1h
	if err := h.s.Complete(h.ctx, &d); err != nil {
		t.Fatalf("Complete = %v", err)
	}
	expiredHeld := h.claim("scope#purge-expired-held", time.Minute)
	h.mustAcquire(t, expiredHeld, h.t0)

	var keep []*store.Record
	live := h.claim("scope#purge-live", time.Minute)
	h.mustAcquire(t, live, h.t0)
	keep = append(keep, h.mustComplete(t, live, []byte(`"live"`))) // expires at t0+2h, a second after before
	lapsed := h.claim("scope#purge-lapsed-lease", 10*time.Second)
	lapsed.ExpiresAt = h.t0.Add(3 * time.Hour)
	h.mustAcquire(t, lapsed, h.t0)
	keep = append(keep, lapsed)
	zero := h.claim("scope#purge-zero-lease", 0)
	zero.ExpiresAt = h.t0.Add(3 * time.Hour)
	h.mustAcquire(t, zero, h.t0)
	keep = append(keep, zero)

	before := h.t0.Add(2*time.Hour - time.Second)
	n, err := p.Purge(h.ctx, before)
	if err != nil || n != 2 {
		t.Fatalf("Purge(t0+2h-1s) = %d, %v; want 2, the expired records", n, err)
	}
	for _, k := range []string{expiredDone.Key, expiredHeld.Key} {
		if _, err := h.s.Get(h.ctx, k); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("after Purge, Get(%q) = %v; want ErrNotFound", k, err)
		}
	}
	for _, r := range keep {
		if d := sameRecord(h.mustGet(t, r.Key), r); d != "" {
			t.Errorf("Purge changed %q, which had not expired: %s", r.Key, d)
		}
	}
	if n, err := p.Purge(h.ctx, before); err != nil || n != 0 {
		t.Errorf("second Purge = %d, %v; want 0, nil", n, err)
	}
	h.mustAcquire(t, h.claim(expiredDone.Key, time.Minute), before)
}

func testPurgeMany(t *testing.T, h *harness, p store.Purger) {
	const expired, live = 300, 40
	h.parallel(t, expired+live, func(i int) error {
		r := h.claim(fmt.Sprintf("scope#purge-many-%03d", i), time.Minute)
		if i >= expired {
			r.ExpiresAt = h.t0.Add(3 * time.Hour)
		}
		if _, err := h.s.Acquire(h.ctx, r, h.t0); err != nil {
			return fmt.Errorf("Acquire(%q) = %w", r.Key, err)
		}
		return nil
	})
	if n, err := p.Purge(h.ctx, h.t0.Add(2*time.Hour)); err != nil || n != expired {
		t.Fatalf("Purge = %d, %v; want %d", n, err, expired)
	}
	for i := range expired + live {
		_, err := h.s.Get(h.ctx, fmt.Sprintf("scope#purge-many-%03d", i))
		if gone := errors.Is(err, store.ErrNotFound); gone != (i < expired) {
			t.Fatalf("record %d: Get = %v after Purge; want it gone only if it had expired", i, err)
		}
	}
}

func testPurgeCancelled(t *testing.T, h *harness, p store.Purger) {
	rec := h.claim("scope#purge-cancelled", time.Minute)
	h.mustAcquire(t, rec, h.t0)
	ctx, cancel := context.WithCancel(h.ctx)
	cancel()
	if n, err := p.Purge(ctx, h.t0.Add(2*time.Hour)); !errors.Is(err, context.Canceled) || n != 0 {
		t.Errorf("Purge with a cancelled context = %d, %v; want 0, context.Canceled", n, err)
	}
	h.mustGet(t, rec.Key)
}
