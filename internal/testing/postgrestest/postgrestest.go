// Package postgrestest connects tests to a PostgreSQL server: a pool from
// the environment, a fresh table per test, and a tracer that counts the
// statements a pool sends.
//
// Tests that need the server call [NewPool], which reads a connection URL
// from the environment variable IDEMGUARD_POSTGRES_URL (for example
// postgres://idemguard@127.0.0.1:5432/idemguard?sslmode=disable). When it
// is unset the test is skipped, or fails if CI=true, so that a CI run
// without the server cannot pass silently. The repository's
// scripts/harness.sh starts a throwaway server and sets the variable:
//
//	IDEMGUARD_SERVICES=postgres scripts/harness.sh run go test ./store/postgres/...
package postgrestest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemguard/idemguard/internal/testing/reqcount"
	"github.com/idemguard/idemguard/internal/testing/testenv"
	"github.com/idemguard/idemguard/store/postgres"
)

// URLEnv is the environment variable that holds the server's URL.
const URLEnv = testenv.PostgresURL

// URL returns the server's URL from [URLEnv]. If it is unset, URL skips
// the test, or fails it when the environment variable CI is "true".
func URL(t testing.TB) string {
	t.Helper()
	return testenv.Require(t, URLEnv, "PostgreSQL server")
}

// NewPool returns a pool on the server (see [URL]) of at most 16
// connections, adjusted by adjust (for example [CountStatements]), and
// closes it when the test ends.
func NewPool(t testing.TB, adjust ...func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(URL(t))
	if err != nil {
		t.Fatalf("parsing %s: %v", URLEnv, err)
	}
	cfg.MaxConns = 16
	for _, a := range adjust {
		a(cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("pgxpool.NewWithConfig: %v", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		t.Fatalf("PostgreSQL at %s does not answer: %v", URLEnv, err)
	}
	t.Cleanup(pool.Close)
	return pool
}

var unsafeChars = regexp.MustCompile(`[^a-z0-9]+`)

// TableName returns a table name unique to this call, derived from the
// test's name, short enough that its index name is not truncated.
func TableName(t testing.TB) string {
	name := strings.Trim(unsafeChars.ReplaceAllString(strings.ToLower(t.Name()), "_"), "_")
	if len(name) > 24 {
		name = name[len(name)-24:]
	}
	var b [6]byte
	rand.Read(b[:])
	return "ig_" + name + "_" + hex.EncodeToString(b[:])
}

// NewTable creates table (a fresh name from [TableName] if table is "")
// with [postgres.CreateTable], drops it when the test ends, and returns
// its name.
func NewTable(t testing.TB, pool *pgxpool.Pool, table string) string {
	t.Helper()
	if table == "" {
		table = TableName(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := postgres.CreateTable(ctx, pool, table); err != nil {
		t.Fatalf("CreateTable: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		id := pgx.Identifier{table}
		if schema, name, ok := strings.Cut(table, "."); ok {
			id = pgx.Identifier{schema, name}
		}
		if _, err := pool.Exec(ctx, "DROP TABLE IF EXISTS "+id.Sanitize()); err != nil {
			t.Errorf("dropping %s: %v", table, err)
		}
	})
	return table
}

// NewStore returns a store on a fresh table (see [NewTable]), with opts
// after the table's own [postgres.WithTable].
func NewStore(t testing.TB, pool *pgxpool.Pool, opts ...postgres.Option) *postgres.Store {
	t.Helper()
	table := NewTable(t, pool, "")
	s, err := postgres.New(pool, append([]postgres.Option{postgres.WithTable(table)}, opts...)...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s
}

// Statement is one round trip a [Counter] saw.
type Statement struct {
	// Op is the first word of the statement, upper case ("SELECT",
	// "UPDATE", "BEGIN", …), or "BATCH" for a pipeline of statements sent
	// together.
	Op string
	// SQL is the statement, or the batch's statements joined by "; ".
	SQL string
	// RowsAffected is what the statement's command tag reports (for a
	// batch, the sum over its statements).
	RowsAffected int64
	// Err is the statement's error.
	Err error
}

// Counter is a pgx tracer that counts the round trips a pool sends in a
// [reqcount.Counter], by the first word of each statement, upper case
// ("SELECT", "UPDATE", "BEGIN", …), or "BATCH" for a pipeline of statements
// sent together: each Exec, Query or QueryRow is one round trip, and so is
// each batch. The statements pgx's statement cache prepares the first time
// a connection sees them are not counted. With [Counter.Log] on it also
// keeps the statements. It is safe for concurrent use.
type Counter struct {
	reqcount.Counter
	// Log keeps each statement for [Counter.Statements]; set it before
	// the pool is used. Without it, counting allocates nothing.
	Log bool

	mu    sync.Mutex
	stmts []Statement // protected by mu
}

var (
	_ pgx.QueryTracer = (*Counter)(nil)
	_ pgx.BatchTracer = (*Counter)(nil)
)

// CountStatements installs a new Counter as the tracer of the pool's
// connections and returns it. Use it with [NewPool]:
//
//	var n *postgrestest.Counter
//	pool := postgrestest.NewPool(t, func(c *pgxpool.Config) { n = postgrestest.CountStatements(c) })
func CountStatements(cfg *pgxpool.Config) *Counter {
	c := &Counter{}
	cfg.ConnConfig.Tracer = c
	return c
}

type traceKey struct{}

// maxLog bounds the statements a Counter keeps.
const maxLog = 100_000

// TraceQueryStart implements [pgx.QueryTracer]. It counts the statement
// as it starts; without [Counter.Log] it keeps nothing and allocates
// nothing, so that counting does not weigh on what is counted (the load
// benchmark counts every statement it sends).
func (c *Counter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	c.Trip(firstWord(data.SQL))
	if !c.Log {
		return ctx
	}
	return context.WithValue(ctx, traceKey{}, data.SQL)
}

// TraceQueryEnd implements [pgx.QueryTracer].
func (c *Counter) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	if sql, ok := ctx.Value(traceKey{}).(string); ok {
		c.log(Statement{Op: firstWord(sql), SQL: sql, RowsAffected: data.CommandTag.RowsAffected(), Err: data.Err})
	}
}

// TraceBatchStart implements [pgx.BatchTracer]. Without [Counter.Log] it
// keeps nothing and allocates nothing.
func (c *Counter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	c.Trip("BATCH")
	if !c.Log {
		return ctx
	}
	sqls := make([]string, len(data.Batch.QueuedQueries))
	for i, q := range data.Batch.QueuedQueries {
		sqls[i] = q.SQL
	}
	return context.WithValue(ctx, traceKey{}, &batchTrace{sql: strings.Join(sqls, "; ")})
}

// batchTrace is what a Counter gathers of a batch while it runs.
type batchTrace struct {
	sql  string
	rows atomic.Int64
}

// TraceBatchQuery implements [pgx.BatchTracer].
func (c *Counter) TraceBatchQuery(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchQueryData) {
	if b, ok := ctx.Value(traceKey{}).(*batchTrace); ok {
		b.rows.Add(data.CommandTag.RowsAffected())
	}
}

// TraceBatchEnd implements [pgx.BatchTracer].
func (c *Counter) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchEndData) {
	if b, ok := ctx.Value(traceKey{}).(*batchTrace); ok {
		c.log(Statement{Op: "BATCH", SQL: b.sql, RowsAffected: b.rows.Load(), Err: data.Err})
	}
}

// log keeps s, up to maxLog statements.
func (c *Counter) log(s Statement) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.stmts) < maxLog {
		c.stmts = append(c.stmts, s)
	}
}

// ops are the statements' first words, spelt as Counter reports them, so
// that a statement in lower case is counted without an upper-case copy.
var ops = []string{"SELECT", "INSERT", "UPDATE", "DELETE", "WITH", "BEGIN", "COMMIT", "ROLLBACK"}

// firstWord returns the first word of sql in upper case, without a
// trailing semicolon; a WITH whose first query writes (the store's
// notifying completion and release, "WITH done AS (UPDATE …) SELECT …")
// counts as that write.
func firstWord(sql string) string {
	sql = strings.TrimLeft(sql, " \t\r\n")
	if w := leadingWord(sql); strings.EqualFold(w, "WITH") {
		if _, body, ok := strings.Cut(sql, "("); ok {
			switch inner := strings.ToUpper(leadingWord(strings.TrimLeft(body, " \t\r\n"))); inner {
			case "UPDATE", "DELETE", "INSERT":
				return inner
			}
		}
		return "WITH"
	}
	if i := strings.IndexAny(sql, " \t\r\n"); i >= 0 {
		sql = sql[:i]
	}
	sql = strings.TrimSuffix(sql, ";")
	for _, op := range ops {
		if strings.EqualFold(sql, op) {
			return op
		}
	}
	return strings.ToUpper(sql)
}

// leadingWord returns the text of sql up to its first space.
func leadingWord(sql string) string {
	if i := strings.IndexAny(sql, " \t\r\n"); i >= 0 {
		return sql[:i]
	}
	return sql
}

// Statements returns the round trips seen since the last [Counter.Reset],
// if [Counter.Log] is on.
func (c *Counter) Statements() []Statement {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Statement(nil), c.stmts...)
}

// Reset forgets every round trip seen.
func (c *Counter) Reset() {
	c.Counter.Reset()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stmts = nil
}
