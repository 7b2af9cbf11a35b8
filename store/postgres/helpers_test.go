package postgres_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemguard/idemguard/internal/testing/postgrestest"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/postgres"
)

// fixture is a store on a fresh table, its pool, and a statement counter
// on that pool.
type fixture struct {
	pool  *pgxpool.Pool
	n     *postgrestest.Counter
	table string
	s     *postgres.Store
	ctx   context.Context
	t0    time.Time
}

func newFixture(t *testing.T, opts ...postgres.Option) *fixture {
	t.Helper()
	return newFixtureWith(t, nil, opts...)
}

// newFixtureWith is newFixture with the pool's configuration adjusted.
func newFixtureWith(t *testing.T, adjust func(*pgxpool.Config), opts ...postgres.Option) *fixture {
	t.Helper()
	f := &fixture{}
	f.pool = postgrestest.NewPool(t, func(c *pgxpool.Config) {
		f.n = postgrestest.CountStatements(c)
		f.n.Log = true
		if adjust != nil {
			adjust(c)
		}
	})
	f.table = postgrestest.NewTable(t, f.pool, "")
	s, err := postgres.New(f.pool, append([]postgres.Option{postgres.WithTable(f.table)}, opts...)...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	f.s = s
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	f.ctx = ctx
	f.t0 = time.Now().Truncate(time.Second).Add(24 * time.Hour)
	f.n.Reset()
	return f
}

var tokens atomic.Int64

// claim returns an in-progress record for key: a one-minute lease and a
// one-hour life from f.t0.
func (f *fixture) claim(key string) *store.Record {
	return &store.Record{
		Key:            key,
		Status:         store.StatusInProgress,
		Token:          fmt.Sprintf("tok-%d", tokens.Add(1)),
		PayloadHash:    "ph-" + key,
		ExpiresAt:      f.t0.Add(time.Hour),
		LeaseExpiresAt: f.t0.Add(time.Minute),
	}
}

func (f *fixture) mustAcquire(t *testing.T, rec *store.Record) {
	t.Helper()
	if old, err := f.s.Acquire(f.ctx, rec, f.t0); err != nil {
		t.Fatalf("Acquire(%q) = %v, %v", rec.Key, old, err)
	}
}

// completed returns rec completed with result, expiring at f.t0+2h.
func (f *fixture) completed(rec *store.Record, result []byte) *store.Record {
	done := *rec
	done.Status = store.StatusCompleted
	done.Result = result
	done.ExpiresAt = f.t0.Add(2 * time.Hour)
	return &done
}

// complete stores result as rec's outcome.
func (f *fixture) complete(t *testing.T, rec *store.Record, result []byte) *store.Record {
	t.Helper()
	done := f.completed(rec, result)
	if err := f.s.Complete(f.ctx, done); err != nil {
		t.Fatalf("Complete(%q) = %v", rec.Key, err)
	}
	return done
}

// exec runs a statement on the fixture's table; "$T" in sql stands for the
// table's quoted name.
func (f *fixture) exec(t *testing.T, sql string, args ...any) int64 {
	t.Helper()
	tag, err := f.pool.Exec(f.ctx, f.sql(sql), args...)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return tag.RowsAffected()
}

func (f *fixture) sql(s string) string {
	return strings.ReplaceAll(s, "$T", `"`+f.table+`"`)
}

// wire counts the exchanges on the connections of a pool: each time the
// client writes after having read (or first writes) is one round trip, so
// several writes that flush one request, and several reads of one
// response, count once.
type wire struct {
	mu      sync.Mutex
	turns   int
	writing map[*wireConn]bool
}

type wireConn struct {
	net.Conn
	w *wire
}

func (c *wireConn) Write(b []byte) (int, error) {
	c.w.mu.Lock()
	if !c.w.writing[c] {
		c.w.turns++
		c.w.writing[c] = true
	}
	c.w.mu.Unlock()
	return c.Conn.Write(b)
}

func (c *wireConn) Read(b []byte) (int, error) {
	c.w.mu.Lock()
	c.w.writing[c] = false
	c.w.mu.Unlock()
	return c.Conn.Read(b)
}

// countWire wraps the pool's dialer so that w counts round trips, and
// turns off the pool's liveness ping of idle connections, an exchange of
// its own.
func countWire(c *pgxpool.Config) *wire {
	w := &wire{writing: map[*wireConn]bool{}}
	dial := c.ConnConfig.DialFunc
	c.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &wireConn{Conn: conn, w: w}, nil
	}
	c.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	return w
}

func (w *wire) reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.turns = 0
}

func (w *wire) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.turns
}
