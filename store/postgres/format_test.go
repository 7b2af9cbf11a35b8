package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemguard/idemguard/internal/testing/postgrestest"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/postgres"
)

// legacyDDL is the table as releases before the format column made it.
const legacyDDL = `CREATE TABLE %s (
    key              text        PRIMARY KEY,
    status           text        NOT NULL CHECK (status IN ('INPROGRESS', 'COMPLETED')),
    token            text        NOT NULL,
    payload_hash     text        NOT NULL DEFAULT '',
    result_kind      smallint    NOT NULL DEFAULT 0,
    result           bytea,
    expires_at       timestamptz NOT NULL,
    lease_expires_at timestamptz
)`

// A table made before the format column: CreateTable adds the column, the
// rows already there read as format 1, and a build from before the column,
// whose statements name their columns, still inserts and completes rows,
// which read as format 1 too. Under a name that needs quoting, single
// quote included, so that the migration's DO block quotes it right.
func TestCreateTableAddsFormat(t *testing.T) {
	pool := postgrestest.NewPool(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	table := postgrestest.TableName(t) + `'s "old" $idemguard$`
	id := pgx.Identifier{table}.Sanitize()
	if _, err := pool.Exec(ctx, fmt.Sprintf(legacyDDL, id)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+id) })
	t0 := time.Now().Truncate(time.Second).Add(time.Hour)
	legacyInsert := "INSERT INTO " + id + ` (key, status, token, payload_hash, result_kind, result, expires_at, lease_expires_at)
VALUES ($1, 'COMPLETED', 'tok', '', 0, '{"v":1}', $2, NULL)`
	if _, err := pool.Exec(ctx, legacyInsert, "scope#before", t0); err != nil {
		t.Fatal(err)
	}

	for range 2 { // the second run finds the column and changes nothing
		if err := postgres.CreateTable(ctx, pool, table); err != nil {
			t.Fatalf("CreateTable over a table without the format column: %v", err)
		}
	}
	var typ string
	var notNull bool
	var def *string
	err := pool.QueryRow(ctx, `SELECT format_type(atttypid, atttypmod), attnotnull, pg_get_expr(adbin, adrelid)
FROM pg_attribute LEFT JOIN pg_attrdef ON adrelid = attrelid AND adnum = attnum
WHERE attrelid = $1::regclass AND attname = 'format' AND NOT attisdropped`, id).Scan(&typ, &notNull, &def)
	if err != nil || typ != "smallint" || !notNull || def == nil || *def != "1" {
		t.Fatalf("format column: %s, NOT NULL %v, DEFAULT %v (%v); want smallint NOT NULL DEFAULT 1", typ, notNull, def, err)
	}

	s, err := postgres.New(pool, postgres.WithTable(table))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, legacyInsert, "scope#after", t0); err != nil {
		t.Fatalf("an insert of a build from before the column: %v", err)
	}
	for _, key := range []string{"scope#before", "scope#after"} {
		rec, err := s.Get(ctx, key)
		if err != nil || rec.Status != store.StatusCompleted || string(rec.Result) != `{"v":1}` {
			t.Errorf("Get(%q) of a row without a format of its own = %+v, %v; want it read as format 1", key, rec, err)
		}
	}
	// What this build writes carries its format.
	rec := &store.Record{Key: "scope#new", Status: store.StatusInProgress, Token: "t", ExpiresAt: t0, LeaseExpiresAt: t0}
	if _, err := s.Acquire(ctx, rec, t0.Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	var format int
	if err := pool.QueryRow(ctx, "SELECT format FROM "+id+" WHERE key = $1", rec.Key).Scan(&format); err != nil || format != store.FormatVersion {
		t.Errorf("format of a row this build wrote = %d, %v; want %d", format, err, store.FormatVersion)
	}
	if _, err := pool.Exec(ctx, "UPDATE "+id+" SET format = 9 WHERE key = $1", rec.Key); err != nil {
		t.Fatal(err)
	}
	var fe *store.FormatError
	if _, err := s.Get(ctx, rec.Key); !errors.As(err, &fe) || fe.Format != 9 {
		t.Errorf("Get of a row of format 9 = %v; want a *store.FormatError", err)
	}
}
