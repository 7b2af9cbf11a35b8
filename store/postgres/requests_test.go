package postgres_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemguard/idemguard/guard/guardtest"
	"github.com/idemguard/idemguard/internal/testing/postgrestest"
	"github.com/idemguard/idemguard/store"
)

// TestRequestCounts checks the round trips of each store call, counted by
// a tracer on the pool: one per statement or batch. Every call is one
// statement on a server whose sessions default to READ COMMITTED: Acquire's
// WITH (the upsert and the read of the row it lost to), and the fenced
// UPDATE or DELETE of the others.
func TestRequestCounts(t *testing.T) {
	f := newFixture(t)
	step := func(what string, want map[string]int, call func() error) {
		t.Helper()
		f.n.Reset()
		if err := call(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		got, total := f.n.Snapshot(), 0
		for op, w := range want {
			total += w
			if got[op] != w {
				t.Errorf("%s sent %s; want %s=%d", what, f.n, op, w)
			}
		}
		if f.n.Total() != total {
			t.Errorf("%s sent %s; want %d round trips in all", what, f.n, total)
		}
	}
	rec := f.claim("scope#counts")
	step("Acquire new", map[string]int{"WITH": 1}, func() error {
		_, err := f.s.Acquire(f.ctx, rec, f.t0)
		return err
	})
	step("Acquire conflict (in progress)", map[string]int{"WITH": 1}, func() error {
		old, err := f.s.Acquire(f.ctx, f.claim(rec.Key), f.t0)
		if !errors.Is(err, store.ErrConflict) || old == nil || old.Token != rec.Token {
			return fmt.Errorf("got %+v, %v; want a conflict with the holder's record", old, err)
		}
		return nil
	})
	step("Extend", map[string]int{"UPDATE": 1}, func() error {
		return f.s.Extend(f.ctx, rec.Key, rec.Token, f.t0.Add(2*time.Minute), f.t0.Add(time.Hour))
	})
	step("Complete", map[string]int{"UPDATE": 1}, func() error {
		return f.s.Complete(f.ctx, f.completed(rec, []byte(`"ok"`)))
	})
	step("Acquire conflict (completed)", map[string]int{"WITH": 1}, func() error {
		old, err := f.s.Acquire(f.ctx, f.claim(rec.Key), f.t0)
		if !errors.Is(err, store.ErrConflict) || old == nil || string(old.Result) != `"ok"` {
			return fmt.Errorf("got %+v, %v; want a conflict with the completed record", old, err)
		}
		return nil
	})
	step("Get", map[string]int{"SELECT": 1}, func() error {
		_, err := f.s.Get(f.ctx, rec.Key)
		return err
	})
	step("GetMany", map[string]int{"SELECT": 1}, func() error {
		_, err := f.s.GetMany(f.ctx, []string{rec.Key, "scope#absent"})
		return err
	})
	step("List", map[string]int{"SELECT": 1}, func() error {
		_, err := f.s.List(f.ctx, store.Query{})
		return err
	})
	held := f.claim("scope#counts-release") // Release deletes a claim in progress only
	f.mustAcquire(t, held)
	step("Release", map[string]int{"DELETE": 1}, func() error {
		return f.s.Release(f.ctx, held.Key, held.Token)
	})
	tx := f.claim("scope#counts-tx")
	f.mustAcquire(t, tx)
	step("Begin, Tx.Complete, Commit", map[string]int{"BEGIN": 1, "UPDATE": 1, "COMMIT": 1}, func() error {
		x, err := f.s.Begin(f.ctx)
		if err != nil {
			return err
		}
		defer x.Rollback(f.ctx)
		if err := x.Complete(f.ctx, f.completed(tx, []byte(`1`))); err != nil {
			return err
		}
		return x.Commit(f.ctx)
	})
	step("Purge (nothing expired)", map[string]int{"DELETE": 1}, func() error {
		_, err := f.s.Purge(f.ctx, f.t0)
		return err
	})
}

// TestAcquireOneNetworkRoundTrip counts the exchanges on the wire, below
// pgx: Acquire's statement and a write's are one exchange each.
// The first time a connection sees the store's statements, pgx's statement
// cache prepares them in an exchange of its own; after that, each call is
// one.
func TestAcquireOneNetworkRoundTrip(t *testing.T) {
	var w *wire
	f := newFixtureWith(t, func(c *pgxpool.Config) {
		c.MaxConns = 1
		w = countWire(c)
	})
	w.reset()
	f.mustAcquire(t, f.claim("scope#wire-warm-up"))
	if got := w.count(); got != 2 {
		t.Errorf("the first Acquire on a connection took %d exchanges; want 2 (prepare, then the statement)", got)
	}
	for _, c := range []struct {
		what string
		call func() error
	}{
		{"Acquire new", func() error { _, err := f.s.Acquire(f.ctx, f.claim("scope#wire"), f.t0); return err }},
		{"Acquire conflict", func() error {
			if _, err := f.s.Acquire(f.ctx, f.claim("scope#wire"), f.t0); !errors.Is(err, store.ErrConflict) {
				return fmt.Errorf("got %v, want ErrConflict", err)
			}
			return nil
		}},
		{"Acquire over an expired record", func() error {
			_, err := f.s.Acquire(f.ctx, f.claim("scope#wire"), f.t0.Add(2*time.Hour))
			return err
		}},
		{"Complete", func() error {
			// The first Complete on the connection prepares the UPDATE.
			for i := range 2 {
				rec := f.claim(fmt.Sprintf("scope#wire-complete-%d", i))
				if _, err := f.s.Acquire(f.ctx, rec, f.t0); err != nil {
					return err
				}
				w.reset()
				if err := f.s.Complete(f.ctx, f.completed(rec, []byte(`"ok"`))); err != nil {
					return err
				}
			}
			return nil
		}},
	} {
		w.reset()
		if err := c.call(); err != nil {
			t.Fatalf("%s: %v", c.what, err)
		}
		if got := w.count(); got != 1 {
			t.Errorf("%s took %d network round trips, want 1", c.what, got)
		}
	}
}

// TestRequestFloor holds the guard to its round-trip floor
// (docs/postgres.md), counting round trips with a tracer on the pool, and
// to what it sends: the claim's WITH and the completion's UPDATE, a
// batch's lookup one SELECT.
func TestRequestFloor(t *testing.T) {
	var n *postgrestest.Counter
	pool := postgrestest.NewPool(t, func(c *pgxpool.Config) { n = postgrestest.CountStatements(c) })
	guardtest.RunRequestFloor(t, func(t *testing.T) store.Store { return postgrestest.NewStore(t, pool) }, n, guardtest.Sent{
		FirstCall:     "2 round trips: UPDATE=1 WITH=1",
		Replay:        "1 round trip: WITH=1",
		BatchFirstRun: "201 round trips: SELECT=1 UPDATE=100 WITH=100",
		BatchReplay:   "1 round trip: SELECT=1",
	})
}
