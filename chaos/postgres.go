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
	tactivity "go.temporal.io/sdk/activity"

	"github.com/idemguard/idemguard/activity"
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
    effect text NOT NULL DEFAULT '', pid int NOT NULL, at_ms bigint NOT NULL, attempt int NOT NULL, event text NOT NULL DEFAULT '')`)
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
	_, err := db.Exec(ctx, `INSERT INTO `+l.ident()+` (id, kind, op, key, effect, pid, at_ms, attempt, event)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`, e.ID, e.Kind, e.Op, e.Key, e.Effect, e.PID, e.At.UnixMilli(), e.Attempt, e.Event)
	return err
}

// Put writes e on its own (an event).
func (l *pgLedger) Put(ctx context.Context, e *Entry) error { return l.put(ctx, l.pool, e) }

// Scan reads every entry.
func (l *pgLedger) Scan(ctx context.Context) ([]Entry, error) {
	rows, err := l.pool.Query(ctx, `SELECT id, kind, op, key, effect, pid, at_ms, attempt, event FROM `+l.ident())
	if err != nil {
		return nil, fmt.Errorf("chaos: reading the ledger: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Entry, error) {
		var e Entry
		var at int64
		err := r.Scan(&e.ID, &e.Kind, &e.Op, &e.Key, &e.Effect, &e.PID, &at, &e.Attempt, &e.Event)
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

// txActivity is the registered ChaosTx activity: guard.DoTx with the
// activity's lease (its heartbeat timeout) and Temporal's payload codec, so
// that records hold what activity.Wrap would store.
func (wk *chaosWorker) txActivity(ctx context.Context, op Op) (OpResult, error) {
	opts := []guard.CallOption{guard.WithCodec(activity.PayloadCodec{})}
	if hb := tactivity.GetInfo(ctx).HeartbeatTimeout; hb > 0 {
		opts = append(opts, guard.WithLease(hb))
	}
	r, err := guard.DoTx(ctx, wk.g, TxActivity, op, func(ctx context.Context, tx pgx.Tx) (OpResult, error) {
		return wk.txBody(ctx, tx, op)
	}, opts...)
	return r, activity.TemporalError(err)
}

// txBody is the transactional body: its side effect is a ledger row
// written in the guard's transaction. After the row, and before it lingers
// (the window in which a kill or a pause lands between the side effect and
// the commit), it notes the run in its done file, so the checks can count
// the runs that were rolled back.
func (wk *chaosWorker) txBody(ctx context.Context, tx pgx.Tx, op Op) (OpResult, error) {
	key, _ := guard.KeyFromContext(ctx)
	if err := work(ctx, wk.cfg.BodyWork); err != nil {
		return OpResult{}, err
	}
	e := &Entry{Kind: EntryTx, Op: op.ID, Key: key, Effect: randomID(), PID: wk.pid, At: time.Now(), Attempt: int(tactivity.GetInfo(ctx).Attempt)}
	e.ID = "tx#" + e.Effect
	if err := wk.pg.put(ctx, tx, e); err != nil {
		return OpResult{}, fmt.Errorf("ledger: %w", err)
	}
	wk.remember(e.Effect)
	wk.mu.Lock()
	fmt.Fprintf(wk.done, "window %s %s %d\n", op.ID, e.Effect, e.At.UnixMilli())
	wk.mu.Unlock()
	work(context.WithoutCancel(ctx), wk.cfg.BodyAfter) // the crash window: the row written, not committed
	return OpResult{Op: op.ID, Key: key, EffectID: e.Effect, PID: wk.pid}, nil
}
