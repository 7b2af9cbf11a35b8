package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/testing/postgrestest"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/postgres"
)

// heldLocks returns how many watch locks s's LISTEN connection holds on
// key, or on any key when key is "", asking through pool.
func heldLocks(t *testing.T, pool *pgxpool.Pool, s *postgres.Store, key string) int {
	t.Helper()
	ch, err := postgres.WatchChannelVia(context.Background(), pool, s)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_locks
WHERE locktype = 'advisory' AND classid = hashtext($1)::oid AND ($2 = '' OR objid = hashtext($2)::oid) AND objsubid = 2
  AND mode = 'ShareLock' AND granted`, ch, key).Scan(&n); err != nil {
		t.Fatalf("pg_locks: %v", err)
	}
	return n
}

// warmWatch opens s's LISTEN connection, so that the round trips counted
// after it are a watch's own: a watch of another key, stopped.
func warmWatch(t *testing.T, s *postgres.Store) {
	t.Helper()
	sub, err := s.Watch(context.Background(), "scope#warm-up")
	if err != nil {
		t.Fatal(err)
	}
	sub.Stop()
}

// TestWatchGetIsOneRoundTrip: WatchGet subscribes and reads in one round
// trip (the key's lock and the read pipelined), and reads alone, in one
// round trip, when the key's lock is held already; it returns what Get
// would, ErrNotFound included.
func TestWatchGetIsOneRoundTrip(t *testing.T) {
	f := newFixture(t)
	warmWatch(t, f.s)
	rec := &store.Record{Key: "scope#watchget", Status: store.StatusInProgress, Token: "tok",
		ExpiresAt: f.t0.Add(time.Hour), LeaseExpiresAt: time.Now().Add(time.Minute)}
	if _, err := f.s.Acquire(f.ctx, rec, time.Now()); err != nil {
		t.Fatal(err)
	}
	f.n.Reset()
	sub, got, err := f.s.WatchGet(f.ctx, rec.Key)
	if err != nil {
		t.Fatalf("WatchGet = %v", err)
	}
	defer sub.Stop()
	if got.Status != store.StatusInProgress || got.Token != "tok" {
		t.Fatalf("WatchGet read %+v; want the claim", got)
	}
	if n := f.n.Total(); n != 1 {
		t.Errorf("WatchGet of a key not watched made %d round trips; want 1 (%v)", n, &f.n.Counter)
	}
	if n := heldLocks(t, f.pool, f.s, rec.Key); n != 1 {
		t.Errorf("after WatchGet the key's lock is held %d times; want 1", n)
	}
	done := *rec
	done.Status, done.Result = store.StatusCompleted, []byte(`7`)
	if err := f.s.Complete(f.ctx, &done); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sub.Done():
		if err := sub.Err(); err != nil {
			t.Fatalf("the watch ended with %v; want the completion's notification", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no notification of the completion")
	}
	f.n.Reset()
	again, got, err := f.s.WatchGet(f.ctx, rec.Key) // the key's lock is held: the read alone
	if err != nil {
		t.Fatalf("WatchGet = %v", err)
	}
	again.Stop()
	if got.Status != store.StatusCompleted || string(got.Result) != `7` {
		t.Fatalf("WatchGet after the completion read %+v; want it completed with 7", got)
	}
	if n := f.n.Total(); n != 1 {
		t.Errorf("WatchGet of a watched key made %d round trips; want 1 (%v)", n, &f.n.Counter)
	}
	missing, got, err := f.s.WatchGet(f.ctx, "scope#no-record")
	if missing == nil || !errors.Is(err, store.ErrNotFound) || got != nil {
		t.Fatalf("WatchGet of a key without a record = %v, %v, %v; want a subscription and ErrNotFound", missing, got, err)
	}
	missing.Stop()
}

// TestWatchGetWaitsForACommittingCompletion: a WatchGet made while a
// completion of its key is written but not committed (whose lock the
// completion holds, so that it will not notify) returns only once the
// completion committed, with the completion: a read made while the lock
// could not be taken would show the claim, and nothing would tell of the
// completion.
func TestWatchGetWaitsForACommittingCompletion(t *testing.T) {
	f := newFixture(t)
	warmWatch(t, f.s)
	now := time.Now()
	rec := &store.Record{Key: "scope#committing", Status: store.StatusInProgress, Token: "tok",
		ExpiresAt: now.Add(time.Hour), LeaseExpiresAt: now.Add(time.Minute)}
	if _, err := f.s.Acquire(f.ctx, rec, now); err != nil {
		t.Fatal(err)
	}
	tx, err := f.s.Begin(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(f.ctx)
	done := *rec
	done.Status, done.Result = store.StatusCompleted, []byte(`1`)
	if err := tx.Complete(f.ctx, &done); err != nil {
		t.Fatal(err)
	}
	type watched struct {
		sub store.Subscription
		rec *store.Record
		err error
	}
	ch := make(chan watched, 1)
	f.n.Reset()
	go func() {
		sub, got, err := f.s.WatchGet(f.ctx, rec.Key)
		ch <- watched{sub, got, err}
	}()
	// The listener tries the lock, fails, and tries again; let it.
	deadline := time.Now().Add(20 * time.Second)
	for f.n.Get("BATCH") < 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	select {
	case w := <-ch:
		t.Fatalf("WatchGet returned (%+v, %v) before the completion of its key committed", w.rec, w.err)
	default:
	}
	if err := tx.Commit(f.ctx); err != nil {
		t.Fatal(err)
	}
	var w watched
	select {
	case w = <-ch:
	case <-time.After(20 * time.Second):
		t.Fatal("WatchGet did not return after the completion committed")
	}
	if w.err != nil || w.sub == nil {
		t.Fatalf("WatchGet = %v, %v", w.sub, w.err)
	}
	defer w.sub.Stop()
	if w.rec.Status != store.StatusCompleted {
		t.Fatalf("WatchGet read %v; want the committed completion", w.rec.Status)
	}
}

// TestWatchLockKeptAfterLastWatch: a key's lock outlives its last watch
// by a grace, so that its next watch costs no round trip, and is then
// dropped with the next statements the listener sends, in the same round
// trip.
func TestWatchLockKeptAfterLastWatch(t *testing.T) {
	f := newFixture(t)
	warmWatch(t, f.s)
	sub, err := f.s.Watch(f.ctx, "scope#hot")
	if err != nil {
		t.Fatal(err)
	}
	sub.Stop()
	f.n.Reset()
	sub, err = f.s.Watch(f.ctx, "scope#hot")
	if err != nil {
		t.Fatal(err)
	}
	sub.Stop()
	if n := f.n.Total(); n != 0 {
		t.Errorf("a watch of a key watched a moment ago made %d round trips; want 0 (%v)", n, &f.n.Counter)
	}
	if n := heldLocks(t, f.pool, f.s, "scope#hot"); n != 1 {
		t.Fatalf("the key's lock is held %d times after its last watch; want 1 (kept)", n)
	}
	postgres.SetWatchLockGrace(t, 0)
	f.n.Reset()
	other, err := f.s.Watch(f.ctx, "scope#other")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Stop()
	if n := f.n.Total(); n != 1 {
		t.Errorf("a watch of a new key made %d round trips; want 1, the old keys' locks dropped in it (%v)", n, &f.n.Counter)
	}
	if n := heldLocks(t, f.pool, f.s, "scope#hot"); n != 0 {
		t.Errorf("the key's lock is held %d times after its grace and the next statements; want 0", n)
	}
	if n := heldLocks(t, f.pool, f.s, ""); n != 1 {
		t.Errorf("the listener holds %d locks; want 1, the watched key's", n)
	}
}

// TestWatchLockDroppedWithTheHealthCheck: a lock kept after its key's last
// watch is dropped with the listener's health check when nothing else is
// sent, the connection still open for another key's watch.
func TestWatchLockDroppedWithTheHealthCheck(t *testing.T) {
	f := newFixture(t)
	postgres.SetWatchLockGrace(t, 0)
	postgres.SetWatchHealthEvery(t, 20*time.Millisecond)
	open, err := f.s.Watch(f.ctx, "scope#open")
	if err != nil {
		t.Fatal(err)
	}
	defer open.Stop()
	sub, err := f.s.Watch(f.ctx, "scope#stopped")
	if err != nil {
		t.Fatal(err)
	}
	sub.Stop()
	for deadline := time.Now().Add(20 * time.Second); heldLocks(t, f.pool, f.s, "scope#stopped") > 0; {
		if time.Now().After(deadline) {
			t.Fatal("a lock whose grace is over is still held after 20 s of health checks")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := heldLocks(t, f.pool, f.s, "scope#open"); n != 1 {
		t.Errorf("the watched key's lock is held %d times; want 1", n)
	}
	if n := postgres.ListenSessions(f.s); n != 1 {
		t.Errorf("%d LISTEN connections opened; want 1 (the lock dropped on the open connection)", n)
	}
}

// TestWatchLocksBounded: locks kept after their last watch count against
// MaxWatchedKeys: a watch of one more key drops one of them, in its own
// round trip, and the listener never holds more than MaxWatchedKeys; when
// every key is watched, a watch of one more declines (ErrSkip).
func TestWatchLocksBounded(t *testing.T) {
	f := newFixture(t)
	ctx := f.ctx
	var subs []store.Subscription
	for i := range postgres.MaxWatchedKeys {
		sub, err := f.s.Watch(ctx, fmt.Sprintf("scope#bounded-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		subs = append(subs, sub)
	}
	if _, err := f.s.Watch(ctx, "scope#one-more"); !errors.Is(err, store.ErrSkip) {
		t.Fatalf("a watch of one key more than MaxWatchedKeys = %v; want ErrSkip", err)
	}
	for _, sub := range subs[:10] {
		sub.Stop()
	}
	f.n.Reset()
	sub, err := f.s.Watch(ctx, "scope#one-more")
	if err != nil {
		t.Fatalf("a watch with kept locks to drop = %v", err)
	}
	defer sub.Stop()
	if n := f.n.Total(); n != 1 {
		t.Errorf("the watch made %d round trips; want 1 (%v)", n, &f.n.Counter)
	}
	if n := heldLocks(t, f.pool, f.s, ""); n > postgres.MaxWatchedKeys {
		t.Errorf("the listener holds %d locks; want at most %d", n, postgres.MaxWatchedKeys)
	}
	if n := heldLocks(t, f.pool, f.s, "scope#one-more"); n != 1 {
		t.Errorf("the new key's lock is held %d times; want 1", n)
	}
	for _, sub := range subs[10:] {
		sub.Stop()
	}
}

// TestWaiterRoundTrips: a lone duplicate waiting for a running call in
// another process (another guard on another pool) makes at most three
// round trips: its claim attempt, the subscription with its read, and the
// read after the notification, on the LISTEN connection. The LISTEN
// connection's set-up is made before, as a process that watches already
// has it.
func TestWaiterRoundTrips(t *testing.T) {
	holderPool := postgrestest.NewPool(t)
	table := postgrestest.NewTable(t, holderPool, "")
	var counter *postgrestest.Counter
	waiterPool := postgrestest.NewPool(t, func(c *pgxpool.Config) {
		counter = postgrestest.CountStatements(c)
		counter.Log = true
	})
	holderStore, err := postgres.New(holderPool, postgres.WithTable(table))
	if err != nil {
		t.Fatal(err)
	}
	waiterStore, err := postgres.New(waiterPool, postgres.WithTable(table))
	if err != nil {
		t.Fatal(err)
	}
	holder, err := guard.New(holderStore)
	if err != nil {
		t.Fatal(err)
	}
	waiter, err := guard.New(waiterStore)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	postgres.SetWatchLockGrace(t, time.Hour) // the warm-up key's lock stays: counted below
	if _, err := waiterStore.Get(ctx, "scope#warm-up"); !errors.Is(err, store.ErrNotFound) {
		t.Fatal(err)
	}
	warmWatch(t, waiterStore)
	counter.Reset()

	var runs atomic.Int32
	claimed, release := make(chan struct{}), make(chan struct{})
	holderDone := make(chan error, 1)
	go func() {
		_, err := guard.Do(ctx, holder, "scope", "input", func(context.Context) (string, error) {
			runs.Add(1)
			close(claimed)
			<-release
			return "holder", nil
		})
		holderDone <- err
	}()
	<-claimed
	type result struct {
		v   string
		err error
	}
	waited := make(chan result, 1)
	go func() {
		v, err := guard.Do(ctx, waiter, "scope", "input", func(context.Context) (string, error) {
			runs.Add(1)
			return "waiter", nil
		}, guard.WithWait(time.Minute))
		waited <- result{v, err}
	}()
	// Complete once the waiter watches (its process holds the key's lock).
	for heldLocks(t, holderPool, waiterStore, "") < 2 {
		select {
		case r := <-waited:
			t.Fatalf("the waiter returned %v, %v before the holder completed", r.v, r.err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	close(release)
	if err := <-holderDone; err != nil {
		t.Fatal(err)
	}
	r := <-waited
	if r.err != nil || r.v != "holder" {
		t.Fatalf("the waiter got %q, %v; want the holder's result", r.v, r.err)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the function ran %d times; want 1", n)
	}
	if n := counter.Total(); n > 3 {
		t.Errorf("the waiter made %d round trips; want at most 3 (%v)", n, &counter.Counter)
		for _, st := range counter.Statements() {
			t.Logf("%s: %.80q", st.Op, st.SQL)
		}
	}
}
