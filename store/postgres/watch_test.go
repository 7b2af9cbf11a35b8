package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemguard/idemguard/internal/postgrestest"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/postgres"
	"github.com/idemguard/idemguard/store/storetest"
)

// watchProbe counts and drops a store's LISTEN connection through
// pg_stat_activity: the listener's last statement is its LISTEN, which
// it also sends to check itself.
func watchProbe(pool *pgxpool.Pool) storetest.WatchProbe {
	listen := func(t *testing.T, s store.Store) string {
		t.Helper()
		ch, err := postgres.WatchChannel(context.Background(), s.(*postgres.Store))
		if err != nil {
			t.Fatalf("the store's channel: %v", err)
		}
		return postgres.ListenSQL(ch)
	}
	return storetest.WatchProbe{
		Subscriptions: func(t *testing.T, s store.Store, _ string) int {
			var n int
			if err := pool.QueryRow(context.Background(),
				`SELECT count(*) FROM pg_stat_activity WHERE query = $1`, listen(t, s)).Scan(&n); err != nil {
				t.Fatalf("pg_stat_activity: %v", err)
			}
			return n
		},
		Drop: func(t *testing.T, s store.Store) {
			var n int
			if err := pool.QueryRow(context.Background(),
				`SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE query = $1`, listen(t, s)).Scan(&n); err != nil || n != 1 {
				t.Fatalf("pg_terminate_backend of the LISTEN connection: %d, %v; want 1", n, err)
			}
		},
	}
}

// TestWatchTxCompletion: a completion in a DoTx transaction notifies its
// watchers when the transaction commits, and a rolled-back one not at
// all: the NOTIFY is part of the transaction.
func TestWatchTxCompletion(t *testing.T) {
	pool := postgrestest.NewPool(t)
	s := postgrestest.NewStore(t, pool)
	ctx := context.Background()
	now := time.Now()
	claim := func(key string) *store.Record {
		rec := &store.Record{Key: key, Status: store.StatusInProgress, Token: "tok-" + key,
			ExpiresAt: now.Add(time.Hour), LeaseExpiresAt: now.Add(time.Minute)}
		if _, err := s.Acquire(ctx, rec, now); err != nil {
			t.Fatalf("Acquire(%q) = %v", key, err)
		}
		return rec
	}
	completeIn := func(rec *store.Record, commit bool) {
		tx, err := s.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		done := *rec
		done.Status, done.Result = store.StatusCompleted, []byte(`1`)
		if err := tx.Complete(ctx, &done); err != nil {
			t.Fatalf("Tx.Complete = %v", err)
		}
		if commit {
			err = tx.Commit(ctx)
		} else {
			err = tx.Rollback(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	rolled, committed := claim("scope#tx-rolled-back"), claim("scope#tx-committed")
	subRolled, err := s.Watch(ctx, rolled.Key)
	if err != nil {
		t.Fatal(err)
	}
	defer subRolled.Stop()
	subCommitted, err := s.Watch(ctx, committed.Key)
	if err != nil {
		t.Fatal(err)
	}
	defer subCommitted.Stop()

	completeIn(rolled, false)
	tx, err := s.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	done := *committed
	done.Status, done.Result = store.StatusCompleted, []byte(`2`)
	if err := tx.Complete(ctx, &done); err != nil {
		t.Fatalf("Tx.Complete = %v", err)
	}
	// Uncommitted: PostgreSQL holds the notification until COMMIT.
	if _, err := tx.Handle().Exec(ctx, "SELECT pg_sleep(0.05)"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-subCommitted.Done():
		t.Fatalf("notified before the transaction committed (Err %v)", subCommitted.Err())
	default:
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-subCommitted.Done():
		if err := subCommitted.Err(); err != nil {
			t.Fatalf("the watch ended with %v; want the commit's notification", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no notification of the committed completion")
	}
	// The rolled-back completion's notification, had it been sent, would
	// have reached the listener before the committed one's.
	select {
	case <-subRolled.Done():
		t.Errorf("a rolled-back completion notified its watchers (Err %v)", subRolled.Err())
	default:
	}
}

// TestWatchOneConnectionPerStore: watches of many keys share the store's
// one LISTEN connection, which it keeps while they last.
func TestWatchOneConnectionPerStore(t *testing.T) {
	var counter *postgrestest.Counter
	pool := postgrestest.NewPool(t, func(c *pgxpool.Config) { counter = postgrestest.CountStatements(c) })
	s := postgrestest.NewStore(t, pool)
	ctx := context.Background()
	counter.Reset()
	var subs []store.Subscription
	for i := range 20 {
		for range 5 {
			sub, err := s.Watch(ctx, "scope#k"+string(rune('a'+i)))
			if err != nil {
				t.Fatal(err)
			}
			subs = append(subs, sub)
		}
	}
	if n := postgres.ListenSessions(s); n != 1 {
		t.Errorf("100 watches of 20 keys opened %d LISTEN connections; want 1", n)
	}
	if n := counter.Get("LISTEN"); n != 1 {
		t.Errorf("100 watches of 20 keys sent LISTEN %d times; want 1 (%v)", n, &counter.Counter)
	}
	for _, sub := range subs {
		sub.Stop()
	}
}
