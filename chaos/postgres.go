package chaos

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemguard/idemguard/guard"
)

// The PostgreSQL transactional scenario (-store postgres): the same
// workflows, workers, kills and pauses, with every operation a ChaosTx
// activity whose side effect is a ledger row written through the
// transactional guard (guard.DoTx), in the transaction that also
// completes the operation's idempotency record. The ledger is a table in
// the same database; a row exists only if its transaction committed.

// StorePostgres and StoreDynamoDB are the values of Config.Store.
const (
	StoreDynamoDB = "dynamodb"
	StorePostgres = "postgres"
)

// pgLedger is the ledger as a PostgreSQL table: one row per entry, the
// columns of [Entry].
type pgLedger struct {
	pool  *pgxpool.Pool
	table string
}

func (l *pgLedger) ident() string { return pgx.Identifier{l.table}.Sanitize() }

func createPgLedger(ctx context.Context, pool *pgxpool.Pool, table string) error {
	_, err := pool.Exec(ctx, `CREATE TABLE `+pgx.Identifier{table}.Sanitize()+` (
    id text PRIMARY KEY, kind text NOT NULL, op text NOT NULL, key text NOT NULL DEFAULT '',
    effect text NOT NULL DEFAULT '', pid int NOT NULL, at_ms bigint NOT NULL, attempt int NOT NULL, event text NOT NULL DEFAULT '',
    payload text NOT NULL DEFAULT '', step text NOT NULL DEFAULT '')`)
	if err != nil {
		return fmt.Errorf("chaos: creating the ledger table %s: %w", table, err)
	}
	return nil
}

// execer is a pool or a transaction.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

func (l *pgLedger) put(ctx context.Context, db execer, e *Entry) error {
	_, err := db.Exec(ctx, `INSERT INTO `+l.ident()+` (id, kind, op, key, effect, pid, at_ms, attempt, event, payload, step)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`, e.ID, e.Kind, e.Op, e.Key, e.Effect, e.PID, e.At.UnixMilli(), e.Attempt, e.Event, e.Payload, e.Step)
	return err
}

// Put writes e on its own (an event).
func (l *pgLedger) Put(ctx context.Context, e *Entry) error { return l.put(ctx, l.pool, e) }

// Scan reads every entry.
func (l *pgLedger) Scan(ctx context.Context) ([]Entry, error) {
	rows, err := l.pool.Query(ctx, `SELECT id, kind, op, key, effect, pid, at_ms, attempt, event, payload, step FROM `+l.ident())
	if err != nil {
		return nil, fmt.Errorf("chaos: reading the ledger: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Entry, error) {
		var e Entry
		var at int64
		err := r.Scan(&e.ID, &e.Kind, &e.Op, &e.Key, &e.Effect, &e.PID, &at, &e.Attempt, &e.Event, &e.Payload, &e.Step)
		e.At = time.UnixMilli(at)
		return e, err
	})
}

// checkLoopbackURL refuses a PostgreSQL URL whose host is not a loopback
// address: the suite sends load only to this machine.
func checkLoopbackURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("chaos: PostgreSQL URL: %w", err)
	}
	host := u.Hostname()
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("chaos: PostgreSQL at %q is not a loopback address; the suite runs against local servers only", host)
	}
	return nil
}

// pgTxActivity is the registered transactional activity name of the
// PostgreSQL scenario: its rows are written in the guard's pgx.Tx.
func (wk *chaosWorker) pgTxActivity(name string, opts []guard.CallOption) func(context.Context, Op) (OpResult, error) {
	return txActivity(wk, name, opts, func(ctx context.Context, tx pgx.Tx, e *Entry) error { return wk.pg.put(ctx, tx, e) })
}
