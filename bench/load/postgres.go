package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/internal/testing/postgrestest"
	"github.com/idemguard/idemguard/store/postgres"
)

// The PostgreSQL scenarios: the guard on store/postgres against raw pgx
// sending the same statements, and the transactional guard (guard.DoTx)
// against a plain transaction doing the same business write. They run in
// the same rounds as the DynamoDB scenarios when a PostgreSQL URL is given
// (-postgres, default $IDEMGUARD_POSTGRES_URL), on one pool whose tracer
// counts round trips (a statement or a pipelined batch is one).

// PostgreSQL scenario names.
const (
	PgMissHand            = "pg_miss_hand"
	PgMissRaw             = "pg_miss_raw"
	PgMissStore           = "pg_miss_store"
	PgMissGuarded         = "pg_miss_guarded"
	PgReplayHand          = "pg_replay_hand"
	PgReplayRaw           = "pg_replay_raw"
	PgReplayStore         = "pg_replay_store"
	PgReplayGuarded       = "pg_replay_guarded"
	PgReplayCachedGuarded = "pg_replay_cached_guarded"
	PgTxRaw               = "pg_tx_raw"
	PgTxGuarded           = "pg_tx_guarded"
)

// PgScenarios lists the PostgreSQL scenarios.
var PgScenarios = []string{PgMissHand, PgMissRaw, PgMissStore, PgMissGuarded, PgReplayHand, PgReplayRaw, PgReplayStore, PgReplayGuarded,
	PgReplayCachedGuarded, PgTxRaw, PgTxGuarded}

func isPg(name string) bool { return slices.Contains(PgScenarios, name) }

const scopeTx = "bench-tx"

// pgBench is the PostgreSQL side of the benchmark.
type pgBench struct {
	guardedSet
	pool    *pgxpool.Pool
	counter *postgrestest.Counter
	store   *postgres.Store
	table   string // the idempotency table
	effects string // the business table of the transactional scenarios
	sql     pgStatements
	handT   string // the hand-written baseline's table
	hand    handStatements

	txFn func(context.Context, Order) (Receipt, error) // postgres.WrapTx
}

// pgStatements are the statements store/postgres sends, written out by
// hand for the raw baseline (TestPgRawSendsTheStoresStatements holds them
// to the store's).
type pgStatements struct {
	claim, complete, insertEffect string
}

func newPgStatements(table, effects string) pgStatements {
	t := pgx.Identifier{table}.Sanitize()
	const cols = "key, status, token, payload_hash, result_kind, result, expires_at, lease_expires_at, format"
	channel := `('idemguard_' || '` + strings.ReplaceAll(t, "'", "''") + `'::regclass::oid::text)`
	return pgStatements{
		claim: `WITH live AS (
SELECT ` + cols + `, false FROM ` + t + `
WHERE key = $1 AND expires_at > $6 AND (status <> 'INPROGRESS' OR lease_expires_at IS NULL OR lease_expires_at > $6)
), claim AS (
INSERT INTO ` + t + ` AS t (` + cols + `)
SELECT $1, 'INPROGRESS', $2::text, $3::text, 0, NULL, $4::timestamptz, $5::timestamptz, 1 WHERE NOT EXISTS (SELECT FROM live)
ON CONFLICT (key) DO UPDATE SET status = 'INPROGRESS', token = excluded.token, payload_hash = excluded.payload_hash,
    result_kind = 0, result = NULL, expires_at = excluded.expires_at, lease_expires_at = excluded.lease_expires_at, format = 1
WHERE t.expires_at <= $6 OR (t.status = 'INPROGRESS' AND t.lease_expires_at <= $6)
RETURNING NOT (t.xmax = 0) AS replaced)
SELECT * FROM live
UNION ALL
SELECT COALESCE(o.key, ''), COALESCE(o.status, ''), COALESCE(o.token, ''), COALESCE(o.payload_hash, ''),
    COALESCE(o.result_kind, 0::smallint), o.result, o.expires_at, o.lease_expires_at, COALESCE(o.format, 1::smallint), true
FROM claim LEFT JOIN LATERAL (
    SELECT ` + cols + ` FROM ` + t + ` WHERE claim.replaced AND key = $1 AND status = 'INPROGRESS' AND expires_at > $6 OFFSET 0
) o ON true`,
		// The completion notifies the table's channel of the key in the
		// same statement when a process watches the key (store/postgres's
		// Watch): the key's advisory lock, tried, is held by a watcher.
		complete: `WITH done AS (
UPDATE ` + t + ` SET status = 'COMPLETED', payload_hash = '', result_kind = 0, result = $3,
    expires_at = $4, lease_expires_at = NULL, format = 1
WHERE key = $1 AND token = $2
RETURNING key)
SELECT CASE WHEN pg_try_advisory_xact_lock(hashtext(` + channel + `), hashtext(key)) THEN 0
    ELSE (SELECT 1 FROM pg_notify(` + channel + `, key)) END FROM done`,
		insertEffect: `INSERT INTO ` + pgx.Identifier{effects}.Sanitize() + ` (order_id, amount) VALUES ($1, $2)`,
	}
}

// newPgBench connects, creates the tables and builds the guards.
func newPgBench(ctx context.Context, cfg Config, runID string, body func(context.Context, Order) (Receipt, error)) (*pgBench, error) {
	pc, err := pgxpool.ParseConfig(cfg.PostgresURL)
	if err != nil {
		return nil, err
	}
	p := &pgBench{table: "bench_" + runID + "_idempotency", effects: "bench_" + runID + "_effects", handT: "bench_" + runID + "_hand"}
	p.counter = postgrestest.CountStatements(pc)
	// A connection per caller, and as many for the lease keepers and the
	// transactional scenario's claims while the callers hold transactions.
	pc.MaxConns = int32(2*cfg.Concurrency + 4)
	pc.MinConns = pc.MaxConns
	if p.pool, err = pgxpool.NewWithConfig(ctx, pc); err != nil {
		return nil, err
	}
	if err := postgres.CreateTable(ctx, p.pool, p.table); err != nil {
		p.pool.Close()
		return nil, err
	}
	if _, err := p.pool.Exec(ctx, `CREATE TABLE `+pgx.Identifier{p.effects}.Sanitize()+` (order_id text NOT NULL, amount bigint NOT NULL)`); err != nil {
		p.close()
		return nil, err
	}
	if _, err := p.pool.Exec(ctx, fmt.Sprintf(handTable, pgx.Identifier{p.handT}.Sanitize())); err != nil {
		p.close()
		return nil, err
	}
	if err := replaceStoreIndex(ctx, p.pool, p.table, cfg.StoreIndex); err != nil {
		p.close()
		return nil, err
	}
	if cfg.HandIndex {
		// The index store/postgres keeps for Purge, which the hand-written
		// table then pays for too.
		if _, err := p.pool.Exec(ctx, `CREATE INDEX ON `+pgx.Identifier{p.handT}.Sanitize()+` (expires_at, key)`); err != nil {
			p.close()
			return nil, err
		}
	}
	p.sql = newPgStatements(p.table, p.effects)
	p.hand = newHandStatements(p.handT)
	if p.store, err = postgres.New(p.pool, postgres.WithTable(p.table)); err != nil {
		p.close()
		return nil, err
	}
	var g *guard.Guard
	if p.guardedSet, g, err = newGuardedSet(p.store, cfg.ReplayKeys, body); err != nil {
		return nil, err
	}
	p.txFn, err = guard.WrapTx(g, scopeTx, func(ctx context.Context, tx pgx.Tx, o Order) (Receipt, error) {
		if _, err := tx.Exec(ctx, p.sql.insertEffect, o.OrderID, o.Amount); err != nil {
			return Receipt{}, err
		}
		return body(ctx, o)
	})
	return p, err
}

func (p *pgBench) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	defer p.pool.Close()
	_, err := p.pool.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{p.table}.Sanitize()+", "+pgx.Identifier{p.effects}.Sanitize()+
		", "+pgx.Identifier{p.handT}.Sanitize())
	return err
}

// ceilMicro rounds t up to the microsecond, as the store does.
func ceilMicro(t time.Time) time.Time {
	u := t.Truncate(time.Microsecond)
	if u.Before(t) {
		u = u.Add(time.Microsecond)
	}
	return u
}

// rawClaim sends the claim's statement as the store does, and returns
// whether it won and the completed result it met otherwise. The store's
// second round trip, when its statement returns no row, is for claim races,
// which the scenarios do not run.
func (p *pgBench) rawClaim(ctx context.Context, key, token string, now time.Time) (won bool, result []byte, err error) {
	var (
		k, status, tok, ph string
		kind, format       int16
		exp, lease         pgtype.Timestamptz
	)
	err = p.pool.QueryRow(ctx, p.sql.claim, key, token, "", ceilMicro(now.Add(max(rawTTL, rawLease))), ceilMicro(now.Add(rawLease)),
		now.Add(-adapt.DefaultClockSkew)).Scan(&k, &status, &tok, &ph, &kind, &result, &exp, &lease, &format, &won)
	if err != nil {
		return false, nil, err
	}
	if !won && status != "COMPLETED" {
		return false, nil, fmt.Errorf("claim of %s: held by another caller", key)
	}
	return won, result, nil
}

// rawMiss claims key, runs the function and completes the claim with its
// JSON result in the store's fenced UPDATE.
func (p *pgBench) rawMiss(ctx context.Context, b *bench, key string, in Order) error {
	token := newToken()
	won, _, err := p.rawClaim(ctx, key, token, time.Now())
	if err != nil {
		return err
	}
	if !won {
		return fmt.Errorf("miss of %s: the key was taken", key)
	}
	b.bodyRuns.Add(1)
	data, err := json.Marshal(charge(in))
	if err != nil {
		return err
	}
	tag, err := p.pool.Exec(ctx, p.sql.complete, key, token, data, ceilMicro(time.Now().Add(rawTTL)))
	if err == nil && tag.RowsAffected() != 1 {
		err = fmt.Errorf("completion of %s matched %d rows", key, tag.RowsAffected())
	}
	return err
}

// rawReplay sends the claim for a completed key and decodes the stored
// result from the row it returns.
func (p *pgBench) rawReplay(ctx context.Context, key string) error {
	won, result, err := p.rawClaim(ctx, key, newToken(), time.Now())
	if err != nil {
		return err
	}
	if won {
		return fmt.Errorf("replay of %s: the claim succeeded; the record was missing", key)
	}
	var r Receipt
	return json.Unmarshal(result, &r)
}

// rawTx is the plain transaction of the transactional scenarios: BEGIN at
// READ COMMITTED (as the store's Begin), the business write, COMMIT.
func (p *pgBench) rawTx(ctx context.Context, b *bench, in Order) error {
	tx, err := p.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, p.sql.insertEffect, in.OrderID, in.Amount); err != nil {
		return err
	}
	b.bodyRuns.Add(1)
	if _, err := json.Marshal(charge(in)); err != nil { // the result the guarded call stores
		return err
	}
	return tx.Commit(ctx)
}

// replaceStoreIndex replaces the (expires_at, key) index of the store's
// table by the index kind names (see Config.StoreIndex).
func replaceStoreIndex(ctx context.Context, pool *pgxpool.Pool, table, kind string) error {
	t := pgx.Identifier{table}.Sanitize()
	var create string
	switch kind {
	case "":
		return nil
	case "expires_at":
		create = `CREATE INDEX ON ` + t + ` (expires_at)`
	case "brin":
		create = `CREATE INDEX ON ` + t + ` USING brin (expires_at)`
	case "none":
	default:
		return fmt.Errorf("-store-index %q: want expires_at, brin or none", kind)
	}
	var name string
	if err := pool.QueryRow(ctx, `SELECT indexrelid::regclass::text FROM pg_index WHERE indrelid = $1::regclass AND NOT indisprimary`, t).Scan(&name); err != nil {
		return fmt.Errorf("finding the store's expiry index: %w", err)
	}
	if _, err := pool.Exec(ctx, `DROP INDEX `+name); err != nil {
		return err
	}
	if create != "" {
		_, err := pool.Exec(ctx, create)
		return err
	}
	return nil
}
