package postgres

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemguard/idemguard/store"
)

// MarkFormat is the mark of storetest.WithNewerFormat for the store's rows: it sets the
// format column of the record key to format, as a later release would
// write it.
func MarkFormat(t *testing.T, st store.Store, key string, format int) {
	t.Helper()
	s := st.(*Store)
	id, _ := parseTable(s.cfg.table)
	tag, err := s.pool.Exec(context.Background(), "UPDATE "+pgx.Identifier(id).Sanitize()+" SET format = $2 WHERE key = $1", key, format)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("marking %q as format %d: %v (%d rows)", key, format, err, tag.RowsAffected())
	}
}

// NaiveStore is the store with Acquire written as the single statement
// that falls into the statement-snapshot trap: the conditional upsert in a
// CTE, and the read of the row it met in the same statement. Tests use it
// to show that the conformance suite's claim races catch the trap.
type NaiveStore struct{ *Store }

// Acquire is the trap: at READ COMMITTED the outer SELECT reads the table
// as of the statement's snapshot, taken before the upsert waited for a
// concurrent claimant's insert or replacement to commit, so a loser sees
// no row, or the expired row the winner replaced, instead of the winner's.
func (s NaiveStore) Acquire(ctx context.Context, rec *store.Record, now time.Time) (*store.Record, error) {
	upsert := strings.TrimSuffix(s.sql.upsert, "RETURNING true") + "RETURNING true AS won"
	sql := "WITH up AS (" + upsert + ")\nSELECT EXISTS (SELECT FROM up), t.* FROM (SELECT) AS one LEFT JOIN (" +
		strings.Replace(s.sql.get, "$1", "$1::text", 1) + ") AS t ON true"
	var won bool
	var r row
	var key, status, token, payloadHash *string
	var kind, format *int16
	err := s.pool.QueryRow(ctx, sql, rec.Key, rec.Token, rec.PayloadHash, ceilMicro(rec.ExpiresAt), leaseParam(rec.LeaseExpiresAt), now).
		Scan(&won, &key, &status, &token, &payloadHash, &kind, &r.result, &r.expiresAt, &r.leaseAt, &format)
	if err != nil {
		return nil, err
	}
	if won {
		return nil, nil
	}
	if key == nil {
		return nil, store.ErrConflict // "the record vanished": it did not
	}
	r.key, r.status, r.token, r.payloadHash, r.kind, r.format = *key, *status, *token, *payloadHash, *kind, *format
	old, err := r.record()
	if err != nil {
		return nil, errors.Join(err, store.ErrCorrupt)
	}
	return old, store.ErrConflict
}

// The limits and defaults the external tests check against, unexported in
// the package: users meet them as the numbers the documentation gives.
const (
	MaxKeyBytes          = maxKeyBytes
	MaxPurgeBatch        = maxPurgeBatch
	DefaultTable         = defaultTable
	DefaultMaxResultSize = defaultMaxResultSize
)
