package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemguard/idemguard/internal/testing/postgrestest"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/postgres"
	"github.com/idemguard/idemguard/store/storetest"
)

// watchProbe counts and drops a store's subscriptions through pg_locks:
// a process watching a key holds a shared advisory lock on it, classed by
// the table's channel, on its LISTEN connection.
func watchProbe(pool *pgxpool.Pool) storetest.WatchProbe {
	channel := func(t *testing.T, s store.Store) string {
		t.Helper()
		ch, err := postgres.WatchChannel(context.Background(), s.(*postgres.Store))
		if err != nil {
			t.Fatalf("the store's channel: %v", err)
		}
		return ch
	}
	return storetest.WatchProbe{
		Subscriptions: func(t *testing.T, s store.Store, key string) int {
			var n int
			if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_locks
WHERE locktype = 'advisory' AND classid = hashtext($1)::oid AND objid = hashtext($2)::oid AND objsubid = 2
  AND mode = 'ShareLock' AND granted`, channel(t, s), key).Scan(&n); err != nil {
				t.Fatalf("pg_locks: %v", err)
			}
			return n
		},
		Drop: func(t *testing.T, s store.Store) {
			var n int
			if err := pool.QueryRow(context.Background(), `SELECT count(pg_terminate_backend(pid)) FROM (
SELECT DISTINCT pid FROM pg_locks WHERE locktype = 'advisory' AND classid = hashtext($1)::oid AND objsubid = 2) AS p`,
				channel(t, s)).Scan(&n); err != nil || n != 1 {
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
	// The set-up (one round trip, SET … ; DO … LISTEN) once, and the locks
	// of the 20 keys: each Watch of a new key waits for its lock, so one
	// round trip each.
	if n := counter.Get("SET"); n != 1 {
		t.Errorf("100 watches of 20 keys set the LISTEN connection up %d times; want 1 (%v)", n, &counter.Counter)
	}
	if n := counter.Total(); n != 1+20 {
		t.Errorf("100 watches of 20 keys made %d round trips; want 21: the set-up and a lock per key (%v)", n, &counter.Counter)
	}
	for _, sub := range subs {
		sub.Stop()
	}
}

// TestWatchNotifiesOnlyWatchedKeys: a completion or release of a key no
// process watches sends no NOTIFY (PostgreSQL serialises the commits of
// notifying transactions), one of a watched key does. A connection of
// the test's own listens on the table's channel and sees what is sent.
func TestWatchNotifiesOnlyWatchedKeys(t *testing.T) {
	pool := postgrestest.NewPool(t)
	s := postgrestest.NewStore(t, pool)
	ctx := context.Background()
	channel, err := postgres.WatchChannel(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	spy, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer spy.Release()
	if _, err := spy.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	defer spy.Exec(ctx, "UNLISTEN *")
	now := time.Now()
	claim := func(key string) *store.Record {
		rec := &store.Record{Key: key, Status: store.StatusInProgress, Token: "tok-" + key,
			ExpiresAt: now.Add(time.Hour), LeaseExpiresAt: now.Add(time.Minute)}
		if _, err := s.Acquire(ctx, rec, now); err != nil {
			t.Fatalf("Acquire(%q) = %v", key, err)
		}
		return rec
	}
	complete := func(rec *store.Record) {
		done := *rec
		done.Status, done.Result = store.StatusCompleted, []byte(`1`)
		if err := s.Complete(ctx, &done); err != nil {
			t.Fatal(err)
		}
	}
	complete(claim("scope#unwatched-completed"))
	released := claim("scope#unwatched-released")
	if err := s.Release(ctx, released.Key, released.Token); err != nil {
		t.Fatal(err)
	}
	watched := claim("scope#watched")
	sub, err := s.Watch(ctx, watched.Key)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Stop()
	complete(watched)
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	// Notifications arrive in commit order: the first one seen must be
	// the watched key's.
	n, err := spy.Conn().WaitForNotification(wctx)
	if err != nil {
		t.Fatalf("no notification of the watched key's completion: %v", err)
	}
	if n.Payload != watched.Key {
		t.Errorf("the first notification sent was of %q; want %q, the only watched key", n.Payload, watched.Key)
	}
}

// TestWatchWaitsForACommittingCompletion: a Watch made while a
// completion of its key is written but not committed (a DoTx transaction
// between its completion and its COMMIT, which holds the key's lock)
// returns only once the completion commits, so the read that follows it
// sees the completion; meanwhile the store's connection keeps serving
// other keys.
func TestWatchWaitsForACommittingCompletion(t *testing.T) {
	pool := postgrestest.NewPool(t)
	s := postgrestest.NewStore(t, pool)
	ctx := context.Background()
	now := time.Now()
	rec := &store.Record{Key: "scope#committing", Status: store.StatusInProgress, Token: "tok",
		ExpiresAt: now.Add(time.Hour), LeaseExpiresAt: now.Add(time.Minute)}
	if _, err := s.Acquire(ctx, rec, now); err != nil {
		t.Fatal(err)
	}
	other := &store.Record{Key: "scope#other", Status: store.StatusInProgress, Token: "tok2",
		ExpiresAt: now.Add(time.Hour), LeaseExpiresAt: now.Add(time.Minute)}
	if _, err := s.Acquire(ctx, other, now); err != nil {
		t.Fatal(err)
	}
	tx, err := s.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	done := *rec
	done.Status, done.Result = store.StatusCompleted, []byte(`1`)
	if err := tx.Complete(ctx, &done); err != nil {
		t.Fatal(err)
	}
	type watched struct {
		sub store.Subscription
		err error
	}
	ch := make(chan watched, 1)
	go func() {
		sub, err := s.Watch(ctx, rec.Key)
		ch <- watched{sub, err}
	}()
	// Another key's watch and notification go through meanwhile.
	osub, err := s.Watch(ctx, other.Key)
	if err != nil {
		t.Fatal(err)
	}
	defer osub.Stop()
	odone := *other
	odone.Status = store.StatusCompleted
	if err := s.Complete(ctx, &odone); err != nil {
		t.Fatal(err)
	}
	select {
	case <-osub.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("a watch of another key was not notified while a completion was committing")
	}
	select {
	case w := <-ch:
		t.Fatalf("Watch returned (%v) before the completion of its key committed: a read now would miss it, and so would the watch", w.err)
	default:
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var w watched
	select {
	case w = <-ch:
	case <-time.After(20 * time.Second):
		t.Fatal("Watch did not return after the completion committed")
	}
	if w.err != nil {
		t.Fatal(w.err)
	}
	defer w.sub.Stop()
	if got, err := s.Get(ctx, rec.Key); err != nil || got.Status != store.StatusCompleted {
		t.Fatalf("Get after Watch = %v, %v; want the committed completion", got, err)
	}
}
