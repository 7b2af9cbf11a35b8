package postgres_test

import (
	"errors"
	"testing"
	"time"

	"github.com/idemguard/idemguard/store"
)

// Rows written behind the store's back that cannot be read as records:
// every read reports store.ErrCorrupt naming the key, Acquire treats a
// corrupt row as live until its expiry (the key stays blocked, nothing is
// overwritten), and batch reads and listings return the good records with
// the error.
func TestCorruptRows(t *testing.T) {
	f := newFixture(t)
	f.exec(t, `ALTER TABLE $T DROP CONSTRAINT "`+f.table+`_status_check"`)
	cases := []struct{ key, sql string }{
		{"scope#bad-status", `INSERT INTO $T (key, status, token, expires_at) VALUES ($1, 'DONE', 't', $2)`},
		{"scope#bad-kind", `INSERT INTO $T (key, status, token, result_kind, expires_at) VALUES ($1, 'COMPLETED', 't', 7, $2)`},
		{"scope#infinite-expiry", `INSERT INTO $T (key, status, token, expires_at) VALUES ($1, 'COMPLETED', 't', 'infinity')`},
		{"scope#infinite-lease", `INSERT INTO $T (key, status, token, expires_at, lease_expires_at) VALUES ($1, 'INPROGRESS', 't', $2, '-infinity')`},
		{"scope#bad-format", `INSERT INTO $T (key, status, token, expires_at, format) VALUES ($1, 'COMPLETED', 't', $2, 0)`},
	}
	good := f.claim("scope#good")
	f.mustAcquire(t, good)
	keys := []string{good.Key}
	for _, c := range cases {
		if c.key == "scope#infinite-expiry" {
			f.exec(t, c.sql, c.key)
		} else {
			f.exec(t, c.sql, c.key, f.t0.Add(time.Hour))
		}
		keys = append(keys, c.key)
	}
	for _, c := range cases {
		_, err := f.s.Get(f.ctx, c.key)
		var oe *store.OpError
		if !errors.Is(err, store.ErrCorrupt) || !errors.As(err, &oe) || oe.Key != c.key || oe.Op != "Get" {
			t.Errorf("Get(%q) = %v; want an OpError naming the key, matching ErrCorrupt", c.key, err)
		}
		if c.key == "scope#infinite-lease" {
			continue // an in-progress row with a lease in the past: not live
		}
		old, err := f.s.Acquire(f.ctx, f.claim(c.key), f.t0)
		if !errors.Is(err, store.ErrCorrupt) || old != nil {
			t.Errorf("Acquire over %q = %+v, %v; want ErrCorrupt and no record", c.key, old, err)
		}
		var token string
		if err := f.pool.QueryRow(f.ctx, f.sql(`SELECT token FROM $T WHERE key = $1`), c.key).Scan(&token); err != nil || token != "t" {
			t.Errorf("Acquire over %q changed the row: token %q, %v", c.key, token, err)
		}
	}
	// Once the corrupt row's expiry has passed, a claim replaces it.
	if old, err := f.s.Acquire(f.ctx, f.claim("scope#bad-kind"), f.t0.Add(time.Hour)); err != nil {
		t.Errorf("Acquire over an expired corrupt row = %+v, %v; want it replaced", old, err)
	}

	got, err := f.s.GetMany(f.ctx, keys)
	if !errors.Is(err, store.ErrCorrupt) {
		t.Errorf("GetMany with corrupt rows = %v, want ErrCorrupt", err)
	}
	if len(got) != 2 || got[good.Key] == nil || got["scope#bad-kind"] == nil {
		t.Errorf("GetMany returned %d records; want the 2 good ones (scope#good, the replaced scope#bad-kind)", len(got))
	}

	page, err := f.s.List(f.ctx, store.Query{})
	if !errors.Is(err, store.ErrCorrupt) {
		t.Errorf("List with corrupt rows = %v, want ErrCorrupt", err)
	}
	if len(page.Records) != 2 {
		t.Errorf("List returned %d records with the error; want the 2 good ones", len(page.Records))
	}
	// An operator can remove a corrupt row.
	if err := f.s.Delete(f.ctx, "scope#bad-status"); err != nil {
		t.Errorf("Delete of a corrupt row: %v", err)
	}
}
