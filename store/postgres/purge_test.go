package postgres_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/postgres"
)

// TestPurgeInBatches purges 25,000 expired rows while a claimant holds one
// of them locked (it is replacing it, in a transaction not yet committed)
// and a live claim is being extended: Purge deletes the others in
// statements of at most 10,000 rows, skips the locked row instead of
// waiting for it, and neither the claimant nor the live claim is disturbed.
func TestPurgeInBatches(t *testing.T) {
	const expired = 25_000
	f := newFixture(t)
	f.exec(t, `INSERT INTO $T (key, status, token, expires_at)
SELECT 'scope#old-' || i, 'COMPLETED', 'tok-' || i, $1 FROM generate_series(1, $2) AS i`, f.t0.Add(time.Hour), expired)

	live := f.claim("scope#live")
	live.ExpiresAt = f.t0.Add(3 * time.Hour)
	f.mustAcquire(t, live)

	// The claimant replaces scope#old-7 inside a transaction it keeps open.
	claimant, err := f.pool.Begin(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer claimant.Rollback(context.Background())
	if _, err := claimant.Exec(f.ctx, f.sql(`UPDATE $T SET status = 'INPROGRESS', token = 'claimant', expires_at = $1,
    lease_expires_at = $2 WHERE key = 'scope#old-7'`), f.t0.Add(3*time.Hour), f.t0.Add(3*time.Hour)); err != nil {
		t.Fatal(err)
	}

	// The live claim's holder keeps extending its lease while Purge runs.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var slowest time.Duration
	var extends int
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			start := time.Now()
			if err := f.s.Extend(f.ctx, live.Key, live.Token, f.t0.Add(2*time.Minute), f.t0.Add(3*time.Hour)); err != nil {
				t.Errorf("Extend of the live claim during Purge: %v", err)
				return
			}
			slowest, extends = max(slowest, time.Since(start)), extends+1
		}
	}()

	f.n.Reset()
	ctx, cancel := context.WithTimeout(f.ctx, 30*time.Second)
	defer cancel()
	n, err := f.s.Purge(ctx, f.t0.Add(2*time.Hour))
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatalf("Purge = %d, %v (did it wait for the claimant's locked row?)", n, err)
	}
	if n != expired-1 {
		t.Errorf("Purge deleted %d rows, want %d (all expired rows but the locked one)", n, expired-1)
	}
	var deletes []int64
	for _, st := range f.n.Statements() {
		if st.Op == "DELETE" {
			deletes = append(deletes, st.RowsAffected)
		}
	}
	if len(deletes) != 3 || deletes[0] != postgres.MaxPurgeBatch || deletes[1] != postgres.MaxPurgeBatch || deletes[2] != expired-1-2*postgres.MaxPurgeBatch {
		t.Errorf("Purge's statements deleted %v rows; want 10000, 10000, 4999", deletes)
	}
	t.Logf("Purge: %d rows in %d statements %v; meanwhile %d Extends of the live claim, the slowest %v",
		n, len(deletes), deletes, extends, slowest)
	if slowest > 2*time.Second {
		t.Errorf("an Extend of the live claim took %v during Purge", slowest)
	}

	if err := claimant.Commit(f.ctx); err != nil {
		t.Fatalf("the claimant's commit: %v", err)
	}
	if got, err := f.s.Get(f.ctx, "scope#old-7"); err != nil || got.Token != "claimant" {
		t.Errorf("the claimant's row after Purge = %+v, %v; want its claim", got, err)
	}
	if got, err := f.s.Get(f.ctx, live.Key); err != nil || got.Token != live.Token || got.Status != store.StatusInProgress {
		t.Errorf("the live claim after Purge = %+v, %v", got, err)
	}
	if n, err := f.s.Purge(f.ctx, f.t0.Add(2*time.Hour)); n != 0 || err != nil {
		t.Errorf("second Purge = %d, %v; want 0, nil", n, err)
	}
}

func TestPurgeBatchSize(t *testing.T) {
	f := newFixture(t, postgres.WithPurgeBatchSize(1000))
	f.exec(t, `INSERT INTO $T (key, status, token, expires_at)
SELECT 'scope#old-' || i, 'INPROGRESS', 'tok', $1 FROM generate_series(1, 2500) AS i`, f.t0)
	f.n.Reset()
	n, err := f.s.Purge(f.ctx, f.t0)
	if err != nil || n != 2500 {
		t.Fatalf("Purge = %d, %v; want 2500", n, err)
	}
	if got := f.n.Total(); got != 3 {
		t.Errorf("Purge of 2,500 rows in batches of 1,000 sent %s; want 3 round trips", f.n)
	}
}
