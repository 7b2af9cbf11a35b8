package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemguard/idemguard/store"
)

// Store is a [store.Store] that keeps each record as one row of a
// PostgreSQL table. It is safe for concurrent use; create it with [New].
type Store struct {
	pool *pgxpool.Pool
	cfg  *config
	sql  statements
}

var (
	_ store.Store              = (*Store)(nil)
	_ store.BatchGetter        = (*Store)(nil)
	_ store.Admin              = (*Store)(nil)
	_ store.Purger             = (*Store)(nil)
	_ store.Transactor[pgx.Tx] = (*Store)(nil)
)

// New returns a store that keeps its records in the table [WithTable]
// names ([DefaultTable] by default), reached through pool. The table must
// exist: [CreateTable] makes it. New checks the options, not the table; it
// returns an error if pool is nil or an option is invalid.
func New(pool *pgxpool.Pool, opts ...Option) (*Store, error) {
	if pool == nil {
		return nil, errors.New("postgres: New: nil pool")
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	id, _ := parseTable(cfg.table) // checked by newConfig
	return &Store{pool: pool, cfg: cfg, sql: newStatements(id)}, nil
}

// rollbackTimeout bounds the ROLLBACK that ends a failed write's
// transaction, which runs even when the caller's context is done.
const rollbackTimeout = 5 * time.Second

// Name returns "postgres", the store's name in telemetry.
func (s *Store) Name() string { return "postgres" }

// conn takes a connection from the pool. A context that runs out while it
// waits means the pool is exhausted: the error then matches
// [store.ErrThrottled] as well as the context's error.
func (s *Store) conn(ctx context.Context, op, key string) (*pgxpool.Conn, error) {
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		// A context that ran out while waiting means the pool is exhausted.
		return nil, s.opErr(op, key, err, errors.Is(err, context.DeadlineExceeded))
	}
	return c, nil
}

// Acquire implements [store.Store] in one round trip: a pipeline of four
// statements sent together and answered together,
//
//	BEGIN ISOLATION LEVEL READ COMMITTED
//	INSERT … ON CONFLICT (key) DO UPDATE … WHERE <the row is not live> RETURNING true
//	SELECT … WHERE key = $1
//	COMMIT
//
// The upsert decides: at READ COMMITTED it waits for a concurrent
// inserter of the key to finish, then checks liveness against the newest
// row version and locks that row whether it replaces it or not. The SELECT
// runs with a snapshot of its own, taken after the upsert, so it sees the
// row the upsert met — even one another transaction committed after the
// upsert began, which a read inside the upsert's statement (a CTE) would
// miss — and the lock keeps that row as it was until COMMIT.
func (s *Store) Acquire(ctx context.Context, rec *store.Record, now time.Time) (*store.Record, error) {
	if rec.Status != store.StatusInProgress {
		return nil, s.wrap("Acquire", rec.Key, fmt.Errorf("record status %v, want INPROGRESS", rec.Status))
	}
	c, err := s.conn(ctx, "Acquire", rec.Key)
	if err != nil {
		return nil, err
	}
	defer c.Release()
	var b pgx.Batch
	b.Queue(beginRC)
	b.Queue(s.sql.acquire, rec.Key, rec.Token, rec.PayloadHash, ceilMicro(rec.ExpiresAt), leaseParam(rec.LeaseExpiresAt), now)
	b.Queue(s.sql.get, rec.Key)
	b.Queue("COMMIT")
	won, old, err := s.acquireBatch(ctx, c, &b, rec.Key)
	if err != nil {
		endFailed(ctx, c)
		return nil, s.wrap("Acquire", rec.Key, err)
	}
	if won {
		return nil, nil
	}
	if old == nil {
		// The row met by the upsert is locked until COMMIT, so the SELECT
		// always finds it; a missing row means the table is not what the
		// store expects.
		return nil, s.wrap("Acquire", rec.Key, errors.New("no row written and none read"))
	}
	rec2, err := old.record()
	if err != nil {
		return nil, s.wrap("Acquire", rec.Key, err)
	}
	return rec2, store.ErrConflict
}

func (s *Store) acquireBatch(ctx context.Context, c *pgxpool.Conn, b *pgx.Batch, key string) (won bool, old *row, err error) {
	br := c.SendBatch(ctx, b)
	defer func() {
		if cerr := br.Close(); err == nil {
			err = cerr
		}
	}()
	if _, err := br.Exec(); err != nil {
		return false, nil, err
	}
	if err := br.QueryRow().Scan(&won); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return false, nil, err
	}
	var r row
	switch err := br.QueryRow().Scan(r.dest()...); {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return false, nil, err
	default:
		old = &r
	}
	if _, err := br.Exec(); err != nil {
		return false, nil, err
	}
	return won, old, nil
}

// Complete implements [store.Store]: one UPDATE conditional on the token,
// at READ COMMITTED (see execRC).
func (s *Store) Complete(ctx context.Context, rec *store.Record) error {
	return s.complete(ctx, "Complete", rec, func(c context.Context, sql string, args ...any) (int64, error) {
		return s.execRC(c, "Complete", rec.Key, sql, args...)
	})
}

// complete checks rec's size, then runs the fenced UPDATE through exec.
func (s *Store) complete(ctx context.Context, op string, rec *store.Record, exec func(context.Context, string, ...any) (int64, error)) error {
	if len(rec.Result) > s.cfg.maxResult {
		return s.wrap(op, rec.Key, fmt.Errorf("%w: result of %d bytes, the limit is %d (WithMaxResultSize)", store.ErrTooLarge, len(rec.Result), s.cfg.maxResult))
	}
	if rec.ResultKind > store.ResultUnavailable {
		return s.wrap(op, rec.Key, fmt.Errorf("unknown result kind %v", rec.ResultKind))
	}
	n, err := exec(ctx, s.sql.complete, rec.Key, rec.Token, rec.PayloadHash, int16(rec.ResultKind), rec.Result,
		ceilMicro(rec.ExpiresAt), leaseParam(rec.LeaseExpiresAt))
	if err != nil {
		return s.wrap(op, rec.Key, err)
	}
	if n == 0 {
		return store.ErrTokenMismatch
	}
	return nil
}

// Extend implements [store.Store]: one UPDATE conditional on the token and
// the in-progress status.
func (s *Store) Extend(ctx context.Context, key, token string, leaseExpiresAt, expiresAt time.Time) error {
	return s.execFenced(ctx, "Extend", key, s.sql.extend, key, token, leaseParam(leaseExpiresAt), ceilMicro(expiresAt))
}

// Release implements [store.Store]: one DELETE conditional on the token
// and the in-progress status. A completed record is never released, even
// under its own token: the transactional guard releases a claim when a
// commit's answer is lost and the record still shows the claim, and if
// that commit was only late, the DELETE waits for it and must then leave
// the completion alone (ErrTokenMismatch), or a retry would run the
// function again after its writes committed.
func (s *Store) Release(ctx context.Context, key, token string) error {
	return s.execFenced(ctx, "Release", key, s.sql.release, key, token)
}

// execFenced runs a statement that changes a row only under its token.
func (s *Store) execFenced(ctx context.Context, op, key, sql string, args ...any) error {
	n, err := s.execRC(ctx, op, key, sql, args...)
	if err != nil {
		return s.wrap(op, key, err)
	}
	if n == 0 {
		return store.ErrTokenMismatch
	}
	return nil
}

// beginRC begins the transaction of each of the store's writes.
const beginRC = "BEGIN ISOLATION LEVEL READ COMMITTED"

// execRC runs one write at READ COMMITTED, whatever the session's
// default_transaction_isolation, and returns the rows it affected. The
// statement travels between BEGIN and COMMIT in one pipeline, so it costs
// the one round trip it would cost alone. At SERIALIZABLE, writes to
// different keys of a small table fail with serialization errors that
// mean nothing here: each write is one row, fenced by its WHERE clause.
func (s *Store) execRC(ctx context.Context, op, key, sql string, args ...any) (n int64, err error) {
	c, err := s.conn(ctx, op, key)
	if err != nil {
		return 0, err
	}
	defer c.Release()
	var b pgx.Batch
	b.Queue(beginRC)
	b.Queue(sql, args...)
	b.Queue("COMMIT")
	br := c.SendBatch(ctx, &b)
	_, err = br.Exec()
	if err == nil {
		var tag pgconn.CommandTag
		tag, err = br.Exec()
		n = tag.RowsAffected()
	}
	if err == nil {
		_, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		endFailed(ctx, c)
		return 0, s.wrap(op, key, err)
	}
	return n, nil
}

// endFailed rolls back the transaction a failed pipeline left open on c,
// or the pool would drop the connection. It runs even when ctx is done.
func endFailed(ctx context.Context, c *pgxpool.Conn) {
	if c.Conn().IsClosed() || c.Conn().PgConn().TxStatus() == 'I' {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	_, _ = c.Exec(rctx, "ROLLBACK")
}

// Get implements [store.Store].
func (s *Store) Get(ctx context.Context, key string) (*store.Record, error) {
	c, err := s.conn(ctx, "Get", key)
	if err != nil {
		return nil, err
	}
	defer c.Release()
	var r row
	if err := c.QueryRow(ctx, s.sql.get, key).Scan(r.dest()...); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, store.ErrNotFound
		}
		return nil, s.wrap("Get", key, err)
	}
	rec, err := r.record()
	if err != nil {
		return nil, s.wrap("Get", key, err)
	}
	return rec, nil
}

// row is a record's columns as scanned, before they are checked.
type row struct {
	key         string
	status      string
	token       string
	payloadHash string
	kind        int16
	result      []byte
	expiresAt   pgtype.Timestamptz
	leaseAt     pgtype.Timestamptz
}

// dest returns the scan targets, in the order of columns.
func (r *row) dest() []any {
	return []any{&r.key, &r.status, &r.token, &r.payloadHash, &r.kind, &r.result, &r.expiresAt, &r.leaseAt}
}

// record checks the row and returns it as a record, or an error matching
// [store.ErrCorrupt].
func (r *row) record() (*store.Record, error) {
	st, ok := store.ParseStatus(r.status)
	if !ok {
		return nil, corrupt("status", "is %q, not INPROGRESS or COMPLETED", r.status)
	}
	if r.kind < 0 || r.kind > int16(store.ResultUnavailable) {
		return nil, corrupt("result_kind", "is %d, not a result kind", r.kind)
	}
	if !r.expiresAt.Valid || r.expiresAt.InfinityModifier != pgtype.Finite {
		return nil, corrupt("expires_at", "is not a finite time")
	}
	rec := &store.Record{
		Key:         r.key,
		Status:      st,
		Token:       r.token,
		PayloadHash: r.payloadHash,
		ResultKind:  store.ResultKind(r.kind),
		Result:      r.result,
		ExpiresAt:   r.expiresAt.Time,
	}
	if r.leaseAt.Valid {
		if r.leaseAt.InfinityModifier != pgtype.Finite {
			return nil, corrupt("lease_expires_at", "is not a finite time")
		}
		rec.LeaseExpiresAt = r.leaseAt.Time
	}
	return rec, nil
}

// ceilMicro rounds t up to PostgreSQL's precision, a microsecond, so that
// a stored expiry is never earlier than the one given.
func ceilMicro(t time.Time) time.Time {
	u := t.Truncate(time.Microsecond)
	if u.Before(t) {
		u = u.Add(time.Microsecond)
	}
	return u
}

// leaseParam is a lease end as a parameter: NULL for the zero time (a
// lease that holds until the record expires), else rounded up like
// [ceilMicro], so that a lease is never taken over early.
func leaseParam(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return ceilMicro(t)
}
