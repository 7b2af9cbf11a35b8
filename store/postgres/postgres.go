package postgres

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
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
	pool   *pgxpool.Pool
	cfg    *config
	sql    statements
	listen listener // Watch's LISTEN connection
}

var (
	_ store.Store              = (*Store)(nil)
	_ store.BatchGetter        = (*Store)(nil)
	_ store.Admin              = (*Store)(nil)
	_ store.Purger             = (*Store)(nil)
	_ store.Transactor[pgx.Tx] = (*Store)(nil)
	_ store.KeyLimiter         = (*Store)(nil)
)

// New returns a store that keeps its records in the table [WithTable]
// names ("idempotency" by default), reached through pool. The table must
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
	return &Store{pool: pool, cfg: cfg, sql: notifying(newStatements(id), id)}, nil
}

// rollbackTimeout bounds the ROLLBACK that ends a failed write's
// transaction, which runs even when the caller's context is done.
const rollbackTimeout = 5 * time.Second

// Name returns "postgres", the store's name in telemetry.
func (s *Store) Name() string { return "postgres" }

// maxKeyBytes is the longest idempotency key, in bytes of UTF-8, that the
// store holds: 2,600. The key column is indexed twice (the primary key,
// and the (expires_at, key) index of [DDL]), and PostgreSQL refuses an
// index row over 2,704 bytes on its default 8 kB pages: measured on
// PostgreSQL 15, the longest key that does not compress (random
// printable characters) that the (expires_at, key) index takes is 2,684
// bytes. A key that compresses well may be longer, but the store does not
// count on it.
const maxKeyBytes = 2600

// MaxKeyBytes implements [store.KeyLimiter]: it returns 2,600 (see
// maxKeyBytes). The guard refuses a longer key before it sends a statement; a key is the
// call's scope, "#" and 64 hex digits, so a scope may be at most 2,535
// bytes.
func (s *Store) MaxKeyBytes() int { return maxKeyBytes }

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

// Acquire implements [store.Store] in one round trip: one statement,
// sent on its own (autocommit),
//
//	WITH live AS (SELECT <the row>, false … WHERE key = $1 AND <the row is live>),
//	claim AS (INSERT … SELECT … WHERE NOT EXISTS (SELECT FROM live)
//	          ON CONFLICT (key) DO UPDATE … WHERE <the row is not live>
//	          RETURNING <it replaced a row>)
//	SELECT * FROM live UNION ALL
//	SELECT <the row replaced, if a claim whose lease lapsed>, true FROM claim
//
// When it wins over a claim whose lease lapsed, the same statement returns
// that claim, read from its snapshot (as the table was before the upsert),
// for the caller to count as a takeover; a fresh key or an expired record
// returns empty columns, and costs no more than before.
//
// A row the statement's snapshot has and that is live is what an Acquire
// at the moment of the snapshot would have met: it is returned as it is,
// without the upsert, which would lock it (a replay then writes nothing,
// as a read does). Otherwise the upsert decides: it waits for a concurrent
// inserter of the key to finish, then checks liveness against the newest
// row version and replaces it only if it is not live, as at READ
// COMMITTED. When the upsert does not write, it met a row the snapshot has
// not, or has in an older version that was not live (the claim race on a
// fresh or an expired key, lost to a rival that committed after the
// snapshot), and the statement returns no row; Acquire then sends the
// pipeline below, a second round trip that only the losers of such races
// pay.
//
// A server whose sessions default to REPEATABLE READ or SERIALIZABLE runs
// the statement at that level, where the upsert fails with a serialization
// error (40001) rather than wait and re-check a row changed since the
// snapshot; Acquire then sends the pipeline too. The pipeline pins READ
// COMMITTED and reads the row the upsert met in a snapshot of its own,
// taken after the upsert, under the lock the upsert took, which holds the
// row as it was until COMMIT:
//
//	BEGIN ISOLATION LEVEL READ COMMITTED
//	WITH claim AS (INSERT … ON CONFLICT (key) DO UPDATE … WHERE <the row is not live> RETURNING …)
//	SELECT <the row replaced, if a claim whose lease lapsed>, true FROM claim
//	SELECT … WHERE key = $1
//	COMMIT
func (s *Store) Acquire(ctx context.Context, rec *store.Record, now time.Time) (*store.Record, error) {
	if rec.Status != store.StatusInProgress {
		return nil, s.wrap("Acquire", rec.Key, fmt.Errorf("record status %v, want INPROGRESS", rec.Status))
	}
	c, err := s.conn(ctx, "Acquire", rec.Key)
	if err != nil {
		return nil, err
	}
	defer c.Release()
	exp, lease := ceilMicro(rec.ExpiresAt), leaseParam(rec.LeaseExpiresAt)
	var (
		r        row
		won, got bool
	)
	rows, err := c.Query(ctx, s.sql.claim, rec.Key, rec.Token, rec.PayloadHash, exp, lease, now)
	if err == nil {
		if got = rows.Next(); got {
			won, err = scanClaim(rows, &r)
		}
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
	}
	switch {
	case err == nil && won:
		return s.takenOver(rec.Key, &r), nil
	case err == nil && got:
		r.key = rec.Key
		old, err := r.record()
		if err != nil {
			return nil, s.wrap("Acquire", rec.Key, err)
		}
		return old, store.ErrConflict
	case err == nil, isSerialization(err):
		endFailed(ctx, c)
	default:
		endFailed(ctx, c)
		return nil, s.wrap("Acquire", rec.Key, err)
	}
	var b pgx.Batch
	b.Queue(beginRC)
	b.Queue(s.sql.claimRC, rec.Key, rec.Token, rec.PayloadHash, exp, lease, now)
	b.Queue(s.sql.get, rec.Key)
	b.Queue("COMMIT")
	won, replaced, old, err := s.acquireBatch(ctx, c, &b, rec.Key)
	if err != nil {
		endFailed(ctx, c)
		return nil, s.wrap("Acquire", rec.Key, err)
	}
	if won {
		return s.takenOver(rec.Key, &replaced), nil
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

// takenOver returns the claim a winning Acquire of key took over, as the
// claim statement returned it in r: nil when it took none over (empty
// columns), or when the row does not read as a record (the claim is the
// caller's either way).
func (s *Store) takenOver(key string, r *row) *store.Record {
	if r.status == "" {
		return nil
	}
	r.key = key
	old, err := r.record()
	if err != nil {
		return nil
	}
	return old
}

// scanClaim reads the claim statement's row into r and returns its won
// column: r holds the live row it lost to, or the claim it took over
// (empty columns when none). It reads the columns' bytes itself when they are in the formats
// pgx asks for by default (binary for all but text), which is most of what
// a scan through pgx's type map costs on a replay; otherwise, as with a
// pool whose connections use the simple protocol, it scans through pgx.
func scanClaim(rows pgx.Rows, r *row) (won bool, err error) {
	fds, vals := rows.FieldDescriptions(), rows.RawValues()
	if len(fds) != len(claimOIDs) || len(vals) != len(claimOIDs) {
		return false, fmt.Errorf("the claim returned %d columns, want %d", len(vals), len(claimOIDs))
	}
	for i, fd := range fds {
		if fd.DataTypeOID != claimOIDs[i] || (fd.DataTypeOID != pgtype.TextOID && fd.Format != pgtype.BinaryFormatCode) {
			err := rows.Scan(append(r.dest(), &won)...)
			return won, err
		}
	}
	if len(vals[9]) != 1 {
		return false, errors.New("the claim's won column is not a boolean")
	}
	if won = vals[9][0] == 1; won && len(vals[1]) == 0 {
		return true, nil // nothing taken over: the usual first call
	}
	switch st := vals[1]; string(st) {
	case "INPROGRESS":
		r.status = "INPROGRESS"
	case "COMPLETED":
		r.status = "COMPLETED"
	default:
		r.status = string(st)
	}
	r.token = string(vals[2])
	if len(vals[3]) > 0 {
		r.payloadHash = string(vals[3])
	}
	if len(vals[4]) != 2 {
		return false, corrupt("result_kind", "is not a smallint")
	}
	r.kind = int16(binary.BigEndian.Uint16(vals[4]))
	if vals[5] != nil {
		r.result = bytes.Clone(vals[5])
	}
	if r.expiresAt, err = timestamptz("expires_at", vals[6]); err != nil {
		return false, err
	}
	if r.leaseAt, err = timestamptz("lease_expires_at", vals[7]); err != nil {
		return false, err
	}
	if len(vals[8]) != 2 {
		return false, corrupt("format", "is not a smallint")
	}
	r.format = int16(binary.BigEndian.Uint16(vals[8]))
	return won, nil
}

// claimOIDs are the types of the claim statement's columns.
var claimOIDs = [...]uint32{pgtype.TextOID, pgtype.TextOID, pgtype.TextOID, pgtype.TextOID, pgtype.Int2OID,
	pgtype.ByteaOID, pgtype.TimestamptzOID, pgtype.TimestamptzOID, pgtype.Int2OID, pgtype.BoolOID}

// timestamptz reads a timestamptz in PostgreSQL's binary format:
// microseconds since 2000-01-01 UTC, the largest and smallest int64 for
// infinity and -infinity; nil is NULL. The time is in the local location,
// as pgx's scan gives it by default.
func timestamptz(col string, b []byte) (pgtype.Timestamptz, error) {
	if b == nil {
		return pgtype.Timestamptz{}, nil
	}
	if len(b) != 8 {
		return pgtype.Timestamptz{}, corrupt(col, "is not a timestamptz")
	}
	const y2k = 946_684_800 * 1_000_000 // 2000-01-01 in Unix microseconds
	switch us := int64(binary.BigEndian.Uint64(b)); us {
	case math.MaxInt64:
		return pgtype.Timestamptz{Valid: true, InfinityModifier: pgtype.Infinity}, nil
	case math.MinInt64:
		return pgtype.Timestamptz{Valid: true, InfinityModifier: pgtype.NegativeInfinity}, nil
	default:
		return pgtype.Timestamptz{Time: time.Unix(y2k/1_000_000+us/1_000_000, (us%1_000_000)*1_000), Valid: true}, nil
	}
}

// isSerialization reports whether err is a serialization failure or a
// deadlock: the statement was rolled back and wrote nothing, and may be
// sent again at READ COMMITTED.
func isSerialization(err error) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && (pg.Code == "40001" || pg.Code == "40P01")
}

// acquireBatch sends Acquire's pipeline, b, and returns whether its upsert
// won, with the claim it took over (empty columns when none), or else the
// row it met.
func (s *Store) acquireBatch(ctx context.Context, c *pgxpool.Conn, b *pgx.Batch, key string) (won bool, replaced row, old *row, err error) {
	br := c.SendBatch(ctx, b)
	defer func() {
		if cerr := br.Close(); err == nil {
			err = cerr
		}
	}()
	if _, err := br.Exec(); err != nil {
		return false, replaced, nil, err
	}
	if err := br.QueryRow().Scan(append(replaced.dest(), &won)...); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return false, replaced, nil, err
	}
	var r row
	switch err := br.QueryRow().Scan(r.dest()...); {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return false, replaced, nil, err
	default:
		old = &r
	}
	if _, err := br.Exec(); err != nil {
		return false, replaced, nil, err
	}
	return won, replaced, old, nil
}

// Complete implements [store.Store]: one UPDATE conditional on the token
// (see execRC).
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
	var (
		n   int64
		err error
	)
	if rec.PayloadHash == "" && rec.ResultKind == store.ResultValue && rec.LeaseExpiresAt.IsZero() {
		n, err = exec(ctx, s.sql.completeValue, rec.Key, rec.Token, rec.Result, ceilMicro(rec.ExpiresAt))
	} else {
		n, err = exec(ctx, s.sql.complete, rec.Key, rec.Token, rec.PayloadHash, int16(rec.ResultKind), rec.Result,
			ceilMicro(rec.ExpiresAt), leaseParam(rec.LeaseExpiresAt))
	}
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

// beginRC begins the transaction of Acquire's pipeline and of a write
// sent again after a serialization failure.
const beginRC = "BEGIN ISOLATION LEVEL READ COMMITTED"

// execRC runs one write, which changes one row fenced by its WHERE clause,
// and returns the rows it affected. It sends the statement on its own
// (autocommit), at the session's default isolation level: at READ
// COMMITTED, the usual default, that is the statement's one round trip.
// At REPEATABLE READ or SERIALIZABLE the statement fails with a
// serialization error when the row changed since its snapshot (a lease
// keeper's Extend on another connection), and writes to different keys of
// a small table can fail so too, errors that mean nothing here; execRC
// then sends it again between BEGIN ISOLATION LEVEL READ COMMITTED and
// COMMIT, in one pipeline, where it waits for the row and re-checks its
// WHERE against the newest version.
func (s *Store) execRC(ctx context.Context, op, key, sql string, args ...any) (n int64, err error) {
	c, err := s.conn(ctx, op, key)
	if err != nil {
		return 0, err
	}
	defer c.Release()
	tag, err := c.Exec(ctx, sql, args...)
	if err == nil {
		return tag.RowsAffected(), nil
	}
	endFailed(ctx, c)
	if !isSerialization(err) {
		return 0, s.wrap(op, key, err)
	}
	var b pgx.Batch
	b.Queue(beginRC)
	b.Queue(sql, args...)
	b.Queue("COMMIT")
	br := c.SendBatch(ctx, &b)
	_, err = br.Exec()
	if err == nil {
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

// Get implements [store.Store]: one SELECT, sent on its own. At
// SERIALIZABLE (a server whose sessions default to it), a read can fail
// with a serialization error when it meets concurrent writes of the
// table (predicate locks are taken by page); Get then sends it again
// between BEGIN ISOLATION LEVEL READ COMMITTED and COMMIT, in one
// pipeline, where it cannot.
func (s *Store) Get(ctx context.Context, key string) (*store.Record, error) {
	c, err := s.conn(ctx, "Get", key)
	if err != nil {
		return nil, err
	}
	defer c.Release()
	var r row
	err = c.QueryRow(ctx, s.sql.get, key).Scan(r.dest()...)
	if isSerialization(err) {
		endFailed(ctx, c)
		var b pgx.Batch
		b.Queue(beginRC)
		b.Queue(s.sql.get, key)
		b.Queue("COMMIT")
		br := c.SendBatch(ctx, &b)
		if _, err = br.Exec(); err == nil {
			err = br.QueryRow().Scan(r.dest()...)
			if _, cerr := br.Exec(); err == nil || errors.Is(err, pgx.ErrNoRows) {
				if cerr != nil {
					err = cerr
				}
			}
		}
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			endFailed(ctx, c)
		}
	}
	if err != nil {
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
	format      int16
}

// dest returns the scan targets, in the order of columns.
func (r *row) dest() []any {
	return []any{&r.key, &r.status, &r.token, &r.payloadHash, &r.kind, &r.result, &r.expiresAt, &r.leaseAt, &r.format}
}

// record checks the row and returns it as a record, or an error matching
// [store.ErrCorrupt], or [store.ErrNewerFormat] for a row in a newer
// format than the store reads, of which nothing else is read.
func (r *row) record() (*store.Record, error) {
	if err := store.CheckFormat("format", int64(r.format)); err != nil {
		return nil, err
	}
	var st store.Status
	if st.UnmarshalText([]byte(r.status)) != nil {
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
