package postgres_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/postgres"
)

// A lock timeout (SQLSTATE 55P03) is "retry later": the store's calls
// that meet a row another transaction holds report it as ErrThrottled,
// and a failed Acquire leaves its connection clean for the next call.
func TestLockTimeoutIsThrottled(t *testing.T) {
	f := newFixtureWith(t, func(c *pgxpool.Config) {
		c.ConnConfig.RuntimeParams["lock_timeout"] = "100ms"
		c.MaxConns = 2
	})
	rec := f.claim("scope#locked")
	f.mustAcquire(t, rec)
	holder, err := f.pool.Begin(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(context.Background())
	if _, err := holder.Exec(f.ctx, f.sql(`SELECT FROM $T WHERE key = $1 FOR UPDATE`), rec.Key); err != nil {
		t.Fatal(err)
	}
	check := func(op string, err error) {
		t.Helper()
		var pg *pgconn.PgError
		var oe *store.OpError
		if !errors.Is(err, store.ErrThrottled) || !errors.As(err, &pg) || pg.Code != "55P03" || !errors.As(err, &oe) || oe.Op != op {
			t.Errorf("%s on a locked row = %v; want an OpError for %s matching ErrThrottled, SQLSTATE 55P03", op, err, op)
		}
	}
	// A live record is the answer as it stands: Acquire does not wait for
	// its row.
	if old, err := f.s.Acquire(f.ctx, f.claim(rec.Key), f.t0); !errors.Is(err, store.ErrConflict) || old == nil || old.Token != rec.Token {
		t.Errorf("Acquire of the live locked record = %+v, %v; want it and ErrConflict", old, err)
	}
	// One that has expired by now must be replaced, under the row's lock.
	_, err = f.s.Acquire(f.ctx, f.claim(rec.Key), f.t0.Add(2*time.Hour))
	check("Acquire", err)
	check("Complete", f.s.Complete(f.ctx, f.completed(rec, []byte(`1`))))
	check("Extend", f.s.Extend(f.ctx, rec.Key, rec.Token, f.t0.Add(time.Hour), f.t0.Add(time.Hour)))
	check("Release", f.s.Release(f.ctx, rec.Key, rec.Token))
	if err := holder.Rollback(f.ctx); err != nil {
		t.Fatal(err)
	}
	// The failed calls' transactions were rolled back, not left open for
	// the pool to drop: the connections are reused.
	if n := f.pool.Stat().NewConnsCount(); n > 2 {
		t.Errorf("the pool opened %d connections; the failed calls' ones were dropped, not reused", n)
	}
	if _, err := f.s.Acquire(f.ctx, f.claim("scope#after"), f.t0); err != nil {
		t.Errorf("Acquire after the failures = %v", err)
	}
	if err := f.s.Complete(f.ctx, f.completed(rec, []byte(`1`))); err != nil {
		t.Errorf("Complete once the lock is gone = %v", err)
	}
}

// A pool with no free connection, waited on until the context's deadline,
// is a store that cannot keep up: ErrThrottled, and the deadline too.
func TestPoolExhaustedIsThrottled(t *testing.T) {
	f := newFixtureWith(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
	held, err := f.pool.Acquire(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release()
	ctx, cancel := context.WithTimeout(f.ctx, 100*time.Millisecond)
	defer cancel()
	_, err = f.s.Get(ctx, "scope#any")
	if !errors.Is(err, store.ErrThrottled) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Get with the pool exhausted = %v; want ErrThrottled and DeadlineExceeded", err)
	}
	// A caller that gives up is not throttling.
	ctx, cancel = context.WithCancel(f.ctx)
	cancel()
	_, err = f.s.Get(ctx, "scope#any")
	if !errors.Is(err, context.Canceled) || errors.Is(err, store.ErrThrottled) {
		t.Errorf("Get with a cancelled context = %v; want context.Canceled, not ErrThrottled", err)
	}
}

// Other server errors are wrapped, named, and not throttling: here the
// table does not exist.
func TestMissingTable(t *testing.T) {
	f := newFixture(t)
	s, err := postgres.New(f.pool, postgres.WithTable("no_such_table"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Acquire(f.ctx, f.claim("scope#k"), f.t0)
	var pg *pgconn.PgError
	if !errors.As(err, &pg) || pg.Code != "42P01" || errors.Is(err, store.ErrThrottled) || errors.Is(err, store.ErrConflict) {
		t.Errorf("Acquire on a missing table = %v; want SQLSTATE 42P01, not throttled", err)
	}
	if msg := err.Error(); !strings.Contains(msg, `Acquire "scope#k" in table "no_such_table"`) {
		t.Errorf("error %q does not name the operation, key and table", msg)
	}
	if f.pool.Stat().AcquiredConns() != 0 {
		t.Errorf("a connection is still acquired after the failed Acquire")
	}
}

func TestTooLargeNotSent(t *testing.T) {
	f := newFixture(t, postgres.WithMaxResultSize(1000))
	rec := f.claim("scope#big")
	f.mustAcquire(t, rec)
	f.n.Reset()
	if err := f.s.Complete(f.ctx, f.completed(rec, make([]byte, 1001))); !errors.Is(err, store.ErrTooLarge) {
		t.Errorf("Complete of 1,001 bytes with a limit of 1,000 = %v, want ErrTooLarge", err)
	}
	if f.n.Total() != 0 {
		t.Errorf("the refused Complete sent %s", f.n)
	}
	if err := f.s.Complete(f.ctx, f.completed(rec, make([]byte, 1000))); err != nil {
		t.Errorf("Complete of 1,000 bytes = %v", err)
	}
}
