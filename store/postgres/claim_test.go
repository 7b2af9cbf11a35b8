package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemguard/idemguard/internal/testing/postgrestest"
	"github.com/idemguard/idemguard/store"
)

// TestAcquireWaitsForAConcurrentWriter pins the claim races one at a time:
// another transaction writes the key and holds its row while Acquire is
// sent, so that Acquire's statement takes its snapshot first, waits for the
// row, and sees the other transaction commit (or roll back) only then. On a
// fresh or an expired key the snapshot has no live row to return, and
// Acquire must answer from its READ COMMITTED pipeline, a second round
// trip: the winner's record, never none or the expired one. On a live key
// that the other transaction is completing, the snapshot's live version is
// the answer, in one round trip and without waiting for the row.
func TestAcquireWaitsForAConcurrentWriter(t *testing.T) {
	f := newFixture(t)
	other := postgrestest.NewPool(t) // the writer's and the observer's connections, not counted
	const insert = `INSERT INTO $T (key, status, token, expires_at, lease_expires_at, result) VALUES ($1, $2, $3, $4, $5, $6)`
	const takeOver = `UPDATE $T SET status = 'INPROGRESS', token = $2, expires_at = $3, lease_expires_at = $4, result = NULL WHERE key = $1`
	const complete = `UPDATE $T SET status = 'COMPLETED', result = $2, lease_expires_at = NULL WHERE key = $1`
	hour, minute := f.t0.Add(time.Hour), f.t0.Add(time.Minute)
	for _, c := range []struct {
		name string
		// before writes what the key holds before the race.
		before func(t *testing.T, key string)
		// write is the other transaction's write, left uncommitted.
		write    func(tx pgx.Tx, key string) error
		rollback bool
		// noWait: Acquire answers without waiting for the row.
		noWait bool
		// want: whether Acquire wins, else the token and status of the
		// record it returns, and what it sends.
		won        bool
		token      string
		status     store.Status
		roundTrips string
	}{
		{
			name:   "fresh key, the other claim commits",
			before: func(*testing.T, string) {},
			write: func(tx pgx.Tx, key string) error {
				_, err := tx.Exec(f.ctx, f.sql(insert), key, "INPROGRESS", "winner", hour, minute, nil)
				return err
			},
			token: "winner", status: store.StatusInProgress,
			roundTrips: "2 round trips: BATCH=1 WITH=1",
		},
		{
			name:   "fresh key, the other claim rolls back",
			before: func(*testing.T, string) {},
			write: func(tx pgx.Tx, key string) error {
				_, err := tx.Exec(f.ctx, f.sql(insert), key, "INPROGRESS", "winner", hour, minute, nil)
				return err
			},
			rollback: true, won: true,
			roundTrips: "1 round trip: WITH=1",
		},
		{
			name: "expired key, the other claim takes it over",
			before: func(t *testing.T, key string) {
				f.exec(t, insert, key, "COMPLETED", "expired", f.t0.Add(-time.Second), nil, []byte(`"old"`))
			},
			write: func(tx pgx.Tx, key string) error {
				_, err := tx.Exec(f.ctx, f.sql(takeOver), key, "winner", hour, minute)
				return err
			},
			token: "winner", status: store.StatusInProgress,
			roundTrips: "2 round trips: BATCH=1 WITH=1",
		},
		{
			name: "live claim, its holder completes it",
			before: func(t *testing.T, key string) {
				f.exec(t, insert, key, "INPROGRESS", "holder", hour, minute, nil)
			},
			write: func(tx pgx.Tx, key string) error {
				_, err := tx.Exec(f.ctx, f.sql(complete), key, []byte(`"done"`))
				return err
			},
			// The version the statement's snapshot has, live when the
			// statement began, read without the upsert's row lock.
			noWait: true,
			token:  "holder", status: store.StatusInProgress,
			roundTrips: "1 round trip: WITH=1",
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			key := "scope#race-" + c.name
			c.before(t, key)
			tx, err := other.Begin(f.ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(context.WithoutCancel(f.ctx))
			if err := c.write(tx, key); err != nil {
				t.Fatal(err)
			}
			f.n.Reset()
			type result struct {
				old *store.Record
				err error
			}
			done := make(chan result, 1)
			go func() {
				old, err := f.s.Acquire(f.ctx, f.claim(key), f.t0)
				done <- result{old, err}
			}()
			if c.noWait {
				r := <-done
				done <- r
			} else {
				waitForLockWait(t, &fixture{pool: other, ctx: f.ctx}, "WITH live AS") // polled on the uncounted pool
			}
			if c.rollback {
				err = tx.Rollback(f.ctx)
			} else {
				err = tx.Commit(f.ctx)
			}
			if err != nil {
				t.Fatal(err)
			}
			r := <-done
			switch {
			case c.won && r.err != nil:
				t.Errorf("Acquire = %+v, %v; want it to win", r.old, r.err)
			case !c.won && (!errors.Is(r.err, store.ErrConflict) || r.old == nil):
				t.Errorf("Acquire = %+v, %v; want ErrConflict and the record", r.old, r.err)
			case !c.won && (r.old.Token != c.token || r.old.Status != c.status):
				t.Errorf("Acquire returned the record of %q, %v; want %q, %v", r.old.Token, r.old.Status, c.token, c.status)
			}
			if got := f.n.String(); got != c.roundTrips {
				t.Errorf("Acquire sent %s; want %s", got, c.roundTrips)
			}
		})
	}
}
