package postgres

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/idemguard/idemguard/store"
)

// List implements [store.Admin]: records newest first by ExpiresAt (then
// by key, descending), filtered by key prefix and status, one page per
// statement. Pages are keyset-paginated on (expires_at, key), so a page
// costs the same however deep it is, and records written or deleted
// between pages neither repeat nor shift the others. A zero q.Limit means
// 100; larger limits are capped at 1,000. A row
// that cannot be read as a record is left out of the page and reported in
// an error matching [store.ErrCorrupt], returned with the page.
func (s *Store) List(ctx context.Context, q store.Query) (store.Page, error) {
	page := store.Page{NewestFirst: true}
	limit := q.Limit
	switch {
	case limit <= 0:
		limit = defaultListLimit
	case limit > maxListLimit:
		limit = maxListLimit
	}
	var where []string
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	if q.Prefix != "" {
		where = append(where, "starts_with(key, "+arg(q.Prefix)+")")
	}
	if q.Status != 0 {
		if q.Status != store.StatusInProgress && q.Status != store.StatusCompleted {
			return page, s.wrap("List", "", fmt.Errorf("unknown status %v", q.Status))
		}
		where = append(where, "status = "+arg(q.Status.String()))
	}
	if q.Cursor != "" {
		at, key, err := parseCursor(q.Cursor)
		if err != nil {
			return page, s.wrap("List", "", err)
		}
		where = append(where, "(expires_at, key) < ("+arg(at)+", "+arg(key)+")")
	}
	sql := s.sql.list
	if len(where) > 0 {
		sql += " WHERE " + strings.Join(where, " AND ")
	}
	sql += " ORDER BY expires_at DESC, key DESC LIMIT " + arg(limit+1)

	c, err := s.conn(ctx, "List", "")
	if err != nil {
		return page, err
	}
	defer c.Release()
	rows, err := c.Query(ctx, sql, args...)
	if err != nil {
		return page, s.wrap("List", "", err)
	}
	defer rows.Close()
	var errs []error
	var last row
	n := 0
	for rows.Next() {
		if n == limit {
			page.Next = cursor(last.expiresAt, last.key)
			break
		}
		n++
		if err := rows.Scan(last.dest()...); err != nil {
			return page, s.wrap("List", "", err)
		}
		rec, err := last.record()
		if err != nil {
			errs = append(errs, s.wrap("List", last.key, err))
			continue
		}
		page.Records = append(page.Records, rec)
	}
	if err := rows.Err(); err != nil {
		return page, s.wrap("List", "", err)
	}
	return page, errors.Join(errs...)
}

// cursor encodes a position in List's order: the expiry in microseconds
// since the epoch and the key.
func cursor(at pgtype.Timestamptz, key string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(at.Time.UnixMicro(), 10) + ":" + key))
}

func parseCursor(c string) (time.Time, string, error) {
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return time.Time{}, "", fmt.Errorf("invalid cursor %q", c)
	}
	at, key, ok := strings.Cut(string(raw), ":")
	us, err := strconv.ParseInt(at, 10, 64)
	if !ok || err != nil {
		return time.Time{}, "", fmt.Errorf("invalid cursor %q", c)
	}
	return time.UnixMicro(us), key, nil
}

// Delete implements [store.Admin]: it deletes the record key whatever it
// holds, or returns [store.ErrNotFound].
func (s *Store) Delete(ctx context.Context, key string) error {
	n, err := s.execRC(ctx, "Delete", key, s.sql.delete, key)
	if err != nil {
		return err
	}
	if n == 0 {
		return store.ErrNotFound
	}
	return nil
}

// Purge implements [store.Purger]: it deletes the rows that are expired at
// before (expires_at ≤ before), at most [WithPurgeBatchSize] rows (10,000
// by default) per statement, each statement its own short transaction,
// until a statement finds fewer, and returns how many it deleted. It skips
// rows that another transaction holds locked (FOR UPDATE SKIP LOCKED) —
// such as an expired row a claimant is replacing — rather than wait for
// them, and never touches a row that is not expired, so live claims go on
// undisturbed. If ctx ends between statements, Purge returns the count so
// far with the context's error.
func (s *Store) Purge(ctx context.Context, before time.Time) (int64, error) {
	var total int64
	for {
		if err := ctx.Err(); err != nil {
			return total, s.wrap("Purge", "", err)
		}
		n, err := s.purgeBatch(ctx, before)
		total += n
		if err != nil {
			return total, err
		}
		if n < int64(s.cfg.purgeBatch) {
			return total, nil
		}
	}
}

func (s *Store) purgeBatch(ctx context.Context, before time.Time) (int64, error) {
	return s.execRC(ctx, "Purge", "", s.sql.purge, before, s.cfg.purgeBatch)
}
