package postgres_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/postgres"
)

// txFixture is a fixture with a business table, ledger, whose rows the
// transactions write next to their completions.
type txFixture struct {
	*fixture
	ledger string
}

func newTxFixture(t *testing.T, adjust func(*pgxpool.Config)) *txFixture {
	t.Helper()
	f := &txFixture{fixture: newFixtureWith(t, adjust)}
	f.ledger = f.table + "_ledger"
	f.exec(t, `CREATE TABLE "`+f.ledger+`" (id text PRIMARY KEY)`)
	t.Cleanup(func() {
		_, _ = f.pool.Exec(context.Background(), `DROP TABLE IF EXISTS "`+f.ledger+`"`)
	})
	return f
}

func (f *txFixture) begin(t *testing.T) store.Tx[pgx.Tx] {
	t.Helper()
	tx, err := f.s.Begin(f.ctx)
	if err != nil {
		t.Fatalf("Begin: %v", err)
	}
	return tx
}

// write is the business write of a guarded function: one ledger row.
func (f *txFixture) write(t *testing.T, tx store.Tx[pgx.Tx], id string) {
	t.Helper()
	if _, err := tx.Handle().Exec(f.ctx, `INSERT INTO "`+f.ledger+`" (id) VALUES ($1)`, id); err != nil {
		t.Fatalf("business write: %v", err)
	}
}

// rows counts the committed ledger rows with id.
func (f *txFixture) rows(t *testing.T, id string) int {
	t.Helper()
	var n int
	if err := f.pool.QueryRow(f.ctx, `SELECT count(*) FROM "`+f.ledger+`" WHERE id = $1`, id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (f *txFixture) get(t *testing.T, key string) *store.Record {
	t.Helper()
	rec, err := f.s.Get(f.ctx, key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	return rec
}

// checkReleased fails if a transaction kept its pool connection.
func (f *txFixture) checkReleased(t *testing.T) {
	t.Helper()
	if n := f.pool.Stat().AcquiredConns(); n != 0 {
		t.Errorf("%d pool connections still acquired after the transaction ended", n)
	}
}

// A completion inside a transaction that rolls back leaves the claim in
// progress and the business write undone; the next transaction commits
// both.
func TestTxRollbackKeepsClaim(t *testing.T) {
	f := newTxFixture(t, nil)
	rec := f.claim("scope#tx-rollback")
	f.mustAcquire(t, rec)

	tx := f.begin(t)
	f.write(t, tx, "transfer-1")
	if err := tx.Complete(f.ctx, f.completed(rec, []byte(`"done"`))); err != nil {
		t.Fatalf("Tx.Complete: %v", err)
	}
	if err := tx.Rollback(f.ctx); err != nil {
		t.Fatalf("Rollback: %v", err)
	}
	if got := f.get(t, rec.Key); got.Status != store.StatusInProgress || got.Token != rec.Token || got.Result != nil {
		t.Errorf("after the rollback the record is %v under %q with %q; want the claim, in progress", got.Status, got.Token, got.Result)
	}
	if n := f.rows(t, "transfer-1"); n != 0 {
		t.Errorf("the rolled-back business write left %d rows", n)
	}
	f.checkReleased(t)

	tx = f.begin(t)
	f.write(t, tx, "transfer-1")
	done := f.completed(rec, []byte(`"done"`))
	if err := tx.Complete(f.ctx, done); err != nil {
		t.Fatalf("Tx.Complete: %v", err)
	}
	if err := tx.Commit(f.ctx); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	if err := tx.Rollback(f.ctx); err != nil {
		t.Errorf("Rollback after Commit = %v, want nil (harmless)", err)
	}
	if got := f.get(t, rec.Key); got.Status != store.StatusCompleted || string(got.Result) != `"done"` {
		t.Errorf("after the commit the record is %v with %q; want COMPLETED with the result", got.Status, got.Result)
	}
	if n := f.rows(t, "transfer-1"); n != 1 {
		t.Errorf("the committed business write left %d rows, want 1", n)
	}
	f.checkReleased(t)
}

// A zombie whose lease was taken over finds its completion fenced out;
// the transaction stays usable, and rolling it back undoes its business
// write with it.
func TestTxStaleTokenRollsBackBusinessWrite(t *testing.T) {
	f := newTxFixture(t, nil)
	zombie := f.claim("scope#tx-zombie")
	zombie.LeaseExpiresAt = f.t0.Add(10 * time.Second)
	f.mustAcquire(t, zombie)

	tx := f.begin(t)
	f.write(t, tx, "transfer-zombie")

	holder := f.claim(zombie.Key)
	holder.LeaseExpiresAt = f.t0.Add(time.Hour)
	if old, err := f.s.Acquire(f.ctx, holder, f.t0.Add(10*time.Second)); err != nil {
		t.Fatalf("takeover = %+v, %v", old, err)
	}

	f.n.Reset()
	if err := tx.Complete(f.ctx, f.completed(zombie, []byte(`"zombie"`))); !errors.Is(err, store.ErrTokenMismatch) {
		t.Fatalf("the zombie's Tx.Complete = %v, want ErrTokenMismatch", err)
	}
	var one int
	if err := tx.Handle().QueryRow(f.ctx, "SELECT 1").Scan(&one); err != nil {
		t.Errorf("the transaction is not usable after ErrTokenMismatch: %v", err)
	}
	if err := tx.Rollback(f.ctx); err != nil {
		t.Fatalf("Rollback: %v", err)
	}
	if n := f.rows(t, "transfer-zombie"); n != 0 {
		t.Errorf("the zombie's business write survived: %d rows", n)
	}
	if got := f.get(t, zombie.Key); got.Token != holder.Token || got.Status != store.StatusInProgress {
		t.Errorf("the holder's claim after the zombie's attempt = %v under %q", got.Status, got.Token)
	}
	f.checkReleased(t)
}

// A claimant that arrives while a completion is written but not committed
// waits on the row lock — even with the holder's lease lapsed on its
// clock — and then sees the completion; if the transaction rolls back
// instead, the claimant takes the lapsed claim over.
func TestTxClaimantWaitsForCompletion(t *testing.T) {
	for _, commit := range []bool{true, false} {
		name := map[bool]string{true: "commit", false: "rollback"}[commit]
		t.Run(name, func(t *testing.T) {
			f := newTxFixture(t, nil)
			rec := f.claim("scope#tx-race")
			f.mustAcquire(t, rec)

			tx := f.begin(t)
			f.write(t, tx, "transfer-race")
			done := f.completed(rec, []byte(`"done"`))
			if err := tx.Complete(f.ctx, done); err != nil {
				t.Fatalf("Tx.Complete: %v", err)
			}

			type result struct {
				old *store.Record
				err error
			}
			got := make(chan result, 1)
			go func() {
				// Two minutes on: the holder's one-minute lease has lapsed.
				old, err := f.s.Acquire(f.ctx, f.claim(rec.Key), f.t0.Add(2*time.Minute))
				got <- result{old, err}
			}()
			select {
			case r := <-got:
				t.Fatalf("the claimant did not wait for the open completion: %+v, %v", r.old, r.err)
			case <-time.After(300 * time.Millisecond):
			}
			end := tx.Rollback
			if commit {
				end = tx.Commit
			}
			if err := end(f.ctx); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			r := <-got
			switch {
			case commit && (!errors.Is(r.err, store.ErrConflict) || r.old == nil || r.old.Status != store.StatusCompleted || string(r.old.Result) != `"done"`):
				t.Errorf("after the commit the claimant got %+v, %v; want ErrConflict with the completed record", r.old, r.err)
			case !commit && r.err != nil:
				t.Errorf("after the rollback the claimant got %+v, %v; want the lapsed claim taken over", r.old, r.err)
			}
			if want := map[bool]int{true: 1, false: 0}[commit]; f.rows(t, "transfer-race") != want {
				t.Errorf("business rows = %d, want %d", f.rows(t, "transfer-race"), want)
			}
		})
	}
}

// The lease keeper extends the claim from another connection while the
// transaction runs. At READ COMMITTED, which Begin pins even when the
// server's default is SERIALIZABLE, the completion reads the newest row
// and succeeds. A function that raises its transaction to REPEATABLE READ
// and reads before the extension gets a serialization failure instead,
// which matches store.ErrThrottled.
func TestTxCompletesAfterConcurrentExtend(t *testing.T) {
	f := newTxFixture(t, func(c *pgxpool.Config) {
		c.ConnConfig.RuntimeParams["default_transaction_isolation"] = "serializable"
	})
	for _, raise := range []bool{false, true} {
		rec := f.claim("scope#tx-extend-" + map[bool]string{false: "rc", true: "rr"}[raise])
		f.mustAcquire(t, rec)
		tx := f.begin(t)
		if raise {
			if _, err := tx.Handle().Exec(f.ctx, "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"); err != nil {
				t.Fatal(err)
			}
		}
		var level string
		if err := tx.Handle().QueryRow(f.ctx, "SHOW transaction_isolation").Scan(&level); err != nil {
			t.Fatal(err)
		}
		if want := map[bool]string{false: "read committed", true: "repeatable read"}[raise]; level != want {
			t.Fatalf("transaction isolation %q, want %q", level, want)
		}
		f.write(t, tx, rec.Key) // the snapshot is taken here
		if err := f.s.Extend(f.ctx, rec.Key, rec.Token, f.t0.Add(2*time.Minute), f.t0.Add(time.Hour)); err != nil {
			t.Fatalf("Extend: %v", err)
		}
		err := tx.Complete(f.ctx, f.completed(rec, []byte(`1`)))
		if !raise {
			if err != nil {
				t.Fatalf("Tx.Complete at read committed after an Extend: %v", err)
			}
			if err := tx.Commit(f.ctx); err != nil {
				t.Fatalf("Commit: %v", err)
			}
			continue
		}
		var pg *pgconn.PgError
		if !errors.Is(err, store.ErrThrottled) || !errors.As(err, &pg) || pg.Code != "40001" {
			t.Errorf("Tx.Complete at repeatable read after an Extend = %v; want a serialization failure matching ErrThrottled", err)
		}
		if err := tx.Commit(f.ctx); err == nil {
			t.Errorf("Commit of the failed transaction succeeded")
		}
		if got := f.get(t, rec.Key); got.Status != store.StatusInProgress {
			t.Errorf("the failed transaction completed the record: %v", got.Status)
		}
	}
	f.checkReleased(t)
}

// Tx.Complete refuses an oversize result before sending anything, and the
// transaction goes on.
func TestTxCompleteTooLarge(t *testing.T) {
	f := newTxFixture(t, nil)
	rec := f.claim("scope#tx-too-large")
	f.mustAcquire(t, rec)
	tx := f.begin(t)
	defer tx.Rollback(f.ctx)
	f.n.Reset()
	err := tx.Complete(f.ctx, f.completed(rec, make([]byte, postgres.DefaultMaxResultSize+1)))
	if !errors.Is(err, store.ErrTooLarge) {
		t.Fatalf("Tx.Complete of %d bytes = %v, want ErrTooLarge", postgres.DefaultMaxResultSize+1, err)
	}
	if f.n.Total() != 0 {
		t.Errorf("the refused completion sent %s", f.n)
	}
	unavailable := f.completed(rec, nil)
	unavailable.ResultKind = store.ResultUnavailable
	if err := tx.Complete(f.ctx, unavailable); err != nil {
		t.Fatalf("Tx.Complete without a body: %v", err)
	}
	if err := tx.Commit(f.ctx); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	if got := f.get(t, rec.Key); got.ResultKind != store.ResultUnavailable || got.Status != store.StatusCompleted {
		t.Errorf("record = %v %v, want COMPLETED unavailable", got.Status, got.ResultKind)
	}
}

// A business statement that fails aborts the transaction: the completion
// fails, Commit reports that nothing committed, and the claim is left in
// progress.
func TestTxFailedStatement(t *testing.T) {
	f := newTxFixture(t, nil)
	rec := f.claim("scope#tx-failed")
	f.mustAcquire(t, rec)
	f.exec(t, `INSERT INTO "`+f.ledger+`" (id) VALUES ('dup')`)
	tx := f.begin(t)
	if _, err := tx.Handle().Exec(f.ctx, `INSERT INTO "`+f.ledger+`" (id) VALUES ('dup')`); err == nil {
		t.Fatal("the duplicate insert succeeded")
	}
	if err := tx.Complete(f.ctx, f.completed(rec, []byte(`1`))); err == nil || errors.Is(err, store.ErrTokenMismatch) {
		t.Errorf("Tx.Complete in an aborted transaction = %v, want the server's error", err)
	}
	err := tx.Commit(f.ctx)
	if !errors.Is(err, pgx.ErrTxCommitRollback) {
		t.Errorf("Commit of an aborted transaction = %v, want pgx.ErrTxCommitRollback", err)
	}
	var oe *store.OpError
	if !errors.As(err, &oe) || oe.Op != "Tx.Commit" || !strings.Contains(err.Error(), f.table) {
		t.Errorf("Commit error %v is not an OpError naming Tx.Commit and the table", err)
	}
	if got := f.get(t, rec.Key); got.Status != store.StatusInProgress {
		t.Errorf("record = %v, want INPROGRESS", got.Status)
	}
	f.checkReleased(t)
}

// Release deletes only a claim in progress: a completed record survives
// a release under its own token (see TestDoTxCommitLandsDuringRelease for
// why the transactional guard needs this).
func TestReleaseLeavesCompletedRecord(t *testing.T) {
	f := newTxFixture(t, nil)
	rec := f.claim("scope#release-completed")
	f.mustAcquire(t, rec)
	f.complete(t, rec, []byte(`1`))
	if err := f.s.Release(f.ctx, rec.Key, rec.Token); !errors.Is(err, store.ErrTokenMismatch) {
		t.Errorf("Release of a completed record = %v, want ErrTokenMismatch", err)
	}
	if got := f.get(t, rec.Key); got.Status != store.StatusCompleted {
		t.Errorf("after the Release the record is %v, want COMPLETED", got.Status)
	}
}
