package dynamodb_test

import (
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemguard/idemguard/store"
)

// TestCorruptItems writes foreign or damaged items straight to the table
// and checks that Get and Acquire report them as corrupt, naming the
// attribute at fault, instead of misreading them.
func TestCorruptItems(t *testing.T) {
	f := newFixture(t)
	good := func(key string) map[string]types.AttributeValue {
		item := id(key)
		item["status"] = s("COMPLETED")
		item["expiration"] = num(f.t0.Unix() + 3600)
		item["token"] = s("tok")
		item["data"] = s(`{"ok":true}`)
		return item
	}
	for _, c := range []struct {
		name   string
		attr   string
		mutate func(map[string]types.AttributeValue)
	}{
		{"no status", "status", func(m map[string]types.AttributeValue) { delete(m, "status") }},
		{"unknown status", "status", func(m map[string]types.AttributeValue) { m["status"] = s("EXPIRED") }},
		{"status not S", "status", func(m map[string]types.AttributeValue) { m["status"] = n("1") }},
		{"no expiration", "expiration", func(m map[string]types.AttributeValue) { delete(m, "expiration") }},
		{"expiration not N", "expiration", func(m map[string]types.AttributeValue) { m["expiration"] = s("tomorrow") }},
		{"expiration beyond year 9999", "expiration", func(m map[string]types.AttributeValue) { m["expiration"] = n("1e40") }},
		{"lease not N", "in_progress_expiration", func(m map[string]types.AttributeValue) { m["in_progress_expiration"] = s("soon") }},
		{"token not S", "token", func(m map[string]types.AttributeValue) { m["token"] = n("7") }},
		{"validation not S", "validation", func(m map[string]types.AttributeValue) { m["validation"] = b([]byte{1}) }},
		{"unknown result kind", "result_kind", func(m map[string]types.AttributeValue) { m["result_kind"] = s("bogus") }},
		{"unknown encoding", "data_encoding", func(m map[string]types.AttributeValue) { m["data_encoding"] = s("zstd") }},
		{"gzip marker on text", "data", func(m map[string]types.AttributeValue) { m["data_encoding"] = s("gzip") }},
		{"gzip marker on garbage", "data", func(m map[string]types.AttributeValue) {
			m["data_encoding"] = s("gzip")
			m["data"] = b([]byte("not gzip at all"))
		}},
		{"gzip marker without data", "data_encoding", func(m map[string]types.AttributeValue) {
			m["data_encoding"] = s("gzip")
			delete(m, "data")
		}},
		{"format not N", "format", func(m map[string]types.AttributeValue) { m["format"] = s("1") }},
		{"format fractional", "format", func(m map[string]types.AttributeValue) { m["format"] = n("1.5") }},
		{"format zero", "format", func(m map[string]types.AttributeValue) { m["format"] = n("0") }},
	} {
		t.Run(c.name, func(t *testing.T) {
			key := "scope#corrupt-" + c.name
			item := good(key)
			c.mutate(item)
			f.put(t, item)
			check := func(op string, err error) {
				t.Helper()
				if !errors.Is(err, store.ErrCorrupt) {
					t.Fatalf("%s = %v, want ErrCorrupt", op, err)
				}
				var de *store.DecodeError
				if !errors.As(err, &de) || de.Attr != c.attr {
					t.Errorf("%s error %v does not blame attribute %q", op, err, c.attr)
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
			// DecodeItem agrees with the store.
			if _, err := f.s.DecodeItem(item); !errors.Is(err, store.ErrCorrupt) {
				t.Errorf("DecodeItem = %v, want ErrCorrupt", err)
			}
		})
	}

	// The intact item reads fine, so the failures above are the mutations'.
	key := "scope#corrupt-control"
	f.put(t, good(key))
	if got, err := f.s.Get(f.ctx, key); err != nil || string(got.Result) != `{"ok":true}` {
		t.Errorf("control item: %+v, %v", got, err)
	}
}
