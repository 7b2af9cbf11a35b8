package redis_test

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/idemguard/idemguard/store"
)

// TestCorruptRecords writes damaged hashes straight to the server and checks
// that Get and Acquire report them as corrupt, naming the field at fault,
// and that the key stays blocked rather than being overwritten.
func TestCorruptRecords(t *testing.T) {
	f := newFixture(t)
	good := func() map[string]string {
		return map[string]string{
			"status":     "COMPLETED",
			"expiration": strconv.FormatInt(f.t0.Unix()+3600, 10),
			"token":      "tok",
			"data":       `{"ok":true}`,
		}
	}
	for _, c := range []struct {
		name   string
		field  string
		mutate func(map[string]string)
	}{
		{"no status", "status", func(m map[string]string) { delete(m, "status") }},
		{"unknown status", "status", func(m map[string]string) { m["status"] = "EXPIRED" }},
		{"no expiration", "expiration", func(m map[string]string) { delete(m, "expiration") }},
		{"expiration not a number", "expiration", func(m map[string]string) { m["expiration"] = "tomorrow" }},
		{"expiration beyond year 9999", "expiration", func(m map[string]string) { m["expiration"] = "1e40" }},
		{"expiration fractional", "expiration", func(m map[string]string) { m["expiration"] = m["expiration"] + ".5" }},
		{"lease not a number", "in_progress_expiration", func(m map[string]string) {
			m["status"] = "INPROGRESS"
			m["in_progress_expiration"] = "soon"
		}},
		{"unknown result kind", "result_kind", func(m map[string]string) { m["result_kind"] = "bogus" }},
		{"unknown encoding", "data_encoding", func(m map[string]string) { m["data_encoding"] = "zstd" }},
		{"gzip marker on text", "data", func(m map[string]string) { m["data_encoding"] = "gzip" }},
		{"gzip marker without data", "data_encoding", func(m map[string]string) {
			m["data_encoding"] = "gzip"
			delete(m, "data")
		}},
		{"format not a number", "format", func(m map[string]string) { m["format"] = "v2" }},
		{"format zero", "format", func(m map[string]string) { m["format"] = "0" }},
	} {
		t.Run(c.name, func(t *testing.T) {
			key := "scope#corrupt-" + c.name
			h := good()
			c.mutate(h)
			if err := f.client.HSet(f.ctx, f.key(key), h).Err(); err != nil {
				t.Fatal(err)
			}
			check := func(op string, err error) {
				t.Helper()
				if !errors.Is(err, store.ErrCorrupt) {
					t.Fatalf("%s = %v, want ErrCorrupt", op, err)
				}
				var de *store.DecodeError
				if !errors.As(err, &de) || de.Attr != c.field {
					t.Errorf("%s error %v does not blame field %q", op, err, c.field)
				}
				var oe *store.OpError
				if !errors.As(err, &oe) || oe.Op != op || oe.Key != key {
					t.Errorf("%s error %v is not an *OpError for %s %q", op, err, op, key)
				}
				if errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrThrottled) {
					t.Errorf("%s error %v matches another sentinel", op, err)
				}
			}
			_, err := f.s.Get(f.ctx, key)
			check("Get", err)
			_, err = f.s.Acquire(f.ctx, f.claim(key), f.t0)
			check("Acquire", err)
			if got := f.raw(t, key); len(got) != len(h) || got["token"] != h["token"] {
				t.Errorf("Acquire changed the corrupt hash: %v", got)
			}
		})
	}

	// An expired hash is replaced even if the rest of it cannot be read:
	// the claim script reads only status, expiration and lease.
	expired := good()
	expired["expiration"] = strconv.FormatInt(f.t0.Unix()-1, 10)
	expired["data_encoding"] = "zstd"
	if err := f.client.HSet(f.ctx, f.key("scope#expired-corrupt"), expired).Err(); err != nil {
		t.Fatal(err)
	}
	f.mustAcquire(t, f.claim("scope#expired-corrupt"))

	// The intact hash reads fine, so the failures above are the mutations'.
	if err := f.client.HSet(f.ctx, f.key("scope#control"), good()).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := f.s.Get(f.ctx, "scope#control"); err != nil || string(got.Result) != `{"ok":true}` {
		t.Errorf("control hash: %+v, %v", got, err)
	}
}

// TestNotAHash: a key under the prefix that holds another type is corrupt
// for Get, Acquire and GetMany, is never overwritten, and fences out
// Complete, Extend and Release.
func TestNotAHash(t *testing.T) {
	f := newFixture(t)
	key := "scope#a-string"
	if err := f.client.Set(f.ctx, f.key(key), "not a hash", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.Get(f.ctx, key); !errors.Is(err, store.ErrCorrupt) {
		t.Errorf("Get = %v, want ErrCorrupt", err)
	}
	if _, err := f.s.Acquire(f.ctx, f.claim(key), f.t0); !errors.Is(err, store.ErrCorrupt) {
		t.Errorf("Acquire = %v, want ErrCorrupt", err)
	}
	rec := f.claim(key)
	done := *rec
	done.Status = store.StatusCompleted
	for op, err := range map[string]error{
		"Complete": f.s.Complete(f.ctx, &done),
		"Extend":   f.s.Extend(f.ctx, key, rec.Token, f.t0.Add(time.Hour), f.t0.Add(time.Hour)),
		"Release":  f.s.Release(f.ctx, key, rec.Token),
	} {
		if !errors.Is(err, store.ErrTokenMismatch) {
			t.Errorf("%s = %v, want ErrTokenMismatch", op, err)
		}
	}
	if v, err := f.client.Get(f.ctx, f.key(key)).Result(); err != nil || v != "not a hash" {
		t.Errorf("the string became %q, %v", v, err)
	}

	good := f.claim("scope#good")
	f.mustAcquire(t, good)
	got, err := f.s.GetMany(f.ctx, []string{good.Key, key})
	var oe *store.OpError
	if !errors.Is(err, store.ErrCorrupt) || !errors.As(err, &oe) || oe.Key != key {
		t.Errorf("GetMany with a string key: %v; want ErrCorrupt naming %q", err, key)
	}
	if len(got) != 1 || got[good.Key] == nil || got[good.Key].Token != good.Token {
		t.Errorf("GetMany with a string key returned %v; want the good record", got)
	}
}
