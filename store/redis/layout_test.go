package redis_test

import (
	"bytes"
	"compress/gzip"
	"io"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/idemguard/idemguard/store"
	idemredis "github.com/idemguard/idemguard/store/redis"
)

// TestLayout reads the hashes the store writes straight from the server:
// one hash per key under the prefix, Powertools' field names and units,
// times rounded up, and the key set to expire at the record's expiry plus
// the grace.
func TestLayout(t *testing.T) {
	const grace = 90 * time.Second
	f := newFixture(t, idemredis.WithExpiryGrace(grace))
	exp := f.t0.Add(time.Hour + 1500*time.Millisecond)     // rounds up to t0+1h+2s
	lease := f.t0.Add(time.Minute + 1500*time.Microsecond) // rounds up to t0+1m+2ms
	rec := &store.Record{Key: "charge#1", Status: store.StatusInProgress, Token: "tok-1", PayloadHash: "ph", ExpiresAt: exp, LeaseExpiresAt: lease}
	f.mustAcquire(t, rec)
	expS := f.t0.Unix() + 3602
	want := map[string]string{
		"status":                 "INPROGRESS",
		"expiration":             strconv.FormatInt(expS, 10),
		"in_progress_expiration": strconv.FormatInt(f.t0.Add(time.Minute).UnixMilli()+2, 10),
		"token":                  "tok-1",
		"validation":             "ph",
		"format":                 "1",
	}
	if got := f.raw(t, rec.Key); !reflect.DeepEqual(got, want) {
		t.Errorf("claim hash = %v, want %v", got, want)
	}
	f.checkExpireAt(t, rec.Key, expS*1000+grace.Milliseconds())

	// Extend moves both times and the key's expiry; a zero lease removes
	// the lease field.
	if err := f.s.Extend(f.ctx, rec.Key, rec.Token, time.Time{}, f.t0.Add(3*time.Hour)); err != nil {
		t.Fatal(err)
	}
	delete(want, "in_progress_expiration")
	want["expiration"] = strconv.FormatInt(f.t0.Unix()+3*3600, 10)
	if got := f.raw(t, rec.Key); !reflect.DeepEqual(got, want) {
		t.Errorf("extended hash = %v, want %v", got, want)
	}
	f.checkExpireAt(t, rec.Key, (f.t0.Unix()+3*3600)*1000+grace.Milliseconds())

	// A JSON result is stored as it is, readable by anyone. Complete
	// writes the record it is given, lease included.
	f.complete(t, rec, []byte(`{"charge":"ch_1"}`))
	want = map[string]string{
		"status":                 "COMPLETED",
		"expiration":             strconv.FormatInt(f.t0.Unix()+2*3600, 10),
		"in_progress_expiration": strconv.FormatInt(f.t0.Add(time.Minute).UnixMilli()+2, 10),
		"token":                  "tok-1",
		"validation":             "ph",
		"data":                   `{"charge":"ch_1"}`,
		"format":                 "1",
	}
	if got := f.raw(t, rec.Key); !reflect.DeepEqual(got, want) {
		t.Errorf("completed hash = %v, want %v", got, want)
	}
	f.checkExpireAt(t, rec.Key, (f.t0.Unix()+2*3600)*1000+grace.Milliseconds())

	// Result kinds other than values are marked; results over 16 KiB are
	// gzipped when that makes them smaller.
	big := bytes.Repeat([]byte(`{"line":"the same again"},`), 1000)
	for _, c := range []struct {
		kind     store.ResultKind
		result   []byte
		wantKind string
	}{
		{store.ResultError, []byte(`{"message":"declined"}`), "error"},
		{store.ResultUnavailable, nil, "unavailable"},
		{store.ResultValue, big, ""},
	} {
		r := f.claim("kind#" + c.kind.String())
		f.mustAcquire(t, r)
		done := *r
		done.Status, done.ResultKind, done.Result = store.StatusCompleted, c.kind, c.result
		if err := f.s.Complete(f.ctx, &done); err != nil {
			t.Fatal(err)
		}
		h := f.raw(t, r.Key)
		if h["result_kind"] != c.wantKind {
			t.Errorf("%v: result_kind = %q, want %q", c.kind, h["result_kind"], c.wantKind)
		}
		_, hasData := h["data"]
		if hasData != (c.result != nil) {
			t.Errorf("%v: data present = %v, want %v", c.kind, hasData, c.result != nil)
		}
		if len(c.result) > idemredis.DefaultCompressAbove {
			if h["data_encoding"] != "gzip" || len(h["data"]) >= len(c.result) {
				t.Fatalf("%d-byte result: data_encoding %q, %d bytes stored; want gzip, smaller", len(c.result), h["data_encoding"], len(h["data"]))
			}
			zr, err := gzip.NewReader(bytes.NewReader([]byte(h["data"])))
			if err != nil {
				t.Fatal(err)
			}
			if out, err := io.ReadAll(zr); err != nil || !bytes.Equal(out, c.result) {
				t.Errorf("gunzipped data differs from the result (%v)", err)
			}
		} else if _, ok := h["data_encoding"]; ok {
			t.Errorf("%v: data_encoding set on a small result", c.kind)
		}
	}

	// Nothing but the records' hashes under the prefix.
	keys, err := f.client.Keys(f.ctx, f.s.Prefix()+"*").Result()
	if err != nil || len(keys) != 4 {
		t.Errorf("keys under the prefix: %q, %v; want the 4 records'", keys, err)
	}
}

// checkExpireAt checks the key's expiry time on the server (PEXPIRETIME,
// Redis 7).
func (f *fixture) checkExpireAt(t *testing.T, k string, wantMs int64) {
	t.Helper()
	got, err := f.client.PExpireTime(f.ctx, f.key(k)).Result()
	if err != nil {
		t.Fatalf("PEXPIRETIME: %v", err)
	}
	if got.Milliseconds() != wantMs {
		t.Errorf("the key expires at %d ms, want %d", got.Milliseconds(), wantMs)
	}
}
