package guard_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"unicode/utf8"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/internal/keyformat"
	"github.com/idemguard/idemguard/store/memory"
)

// Seeds shared by the fuzz targets; more are in testdata/fuzz/<FuzzName>/.
var fuzzJSONSeeds = []string{
	`{"b":2,"a":1}`,
	`{"numbers":[333333333.33333329,1E30,4.50,2e-3,0.000000000000000000000000001],"string":"\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/","literals":[null,true,false]}`,
	`{"\u20ac":1,"\r":2,"\ufb33":3,"1":4,"\ud83d\ude00":5,"\u0080":6,"\u00f6":7}`,
	`[-0, 1e21, 1e-7, 9007199254740993, 5e-324, 1.7976931348623157e308]`,
	` { "a" : [ { } , [ ] , "" , null ] } `,
	`"\u0000\u001f\u007f\u2028"`,
	`0`, `false`, `null`, `""`, `{}`, `[]`,
	`{"order":{"id":"o-1","amount":5},"body":"{\"order_id\":42}","data":"b3JkZXItNzc="}`,
	`{"a":1,"a":2}`, `[1,]`, `{"a":1e400}`, "\"\xff\"",
	"{\"id\":\"\x8a\x01\x02\",\"ok\":1}", `{"id":"\ud800"}`, `{"id":"\udbff\u0041"}`, "{\"\xfe\":1}",
}

type fuzzKey string

// FuzzDeriveKey: arbitrary JSON bytes and an arbitrary key path never make
// the guard panic; a call either fails with the documented error, runs
// unguarded, or runs under a well-formed key that a second call replays.
func FuzzDeriveKey(f *testing.F) {
	paths := []string{"", "@", "order.id", "powertools_json(body).order_id", "powertools_base64(data)",
		"powertools_base64_gzip(data)", "[a, b]", "{x: a}", "a[0]", "a[", "*", "[*].a", "length(@)", "a || b"}
	for i, s := range fuzzJSONSeeds {
		f.Add([]byte(s), paths[i%len(paths)])
	}
	f.Fuzz(func(t *testing.T, in []byte, path string) {
		var opts []guard.Option
		if path != "" {
			opts = append(opts, guard.WithKeyPath(path))
		}
		mem := memory.New()
		g, err := guard.New(mem, opts...)
		if err != nil {
			var ee *keyformat.ExpressionError
			if !errors.Is(err, guard.ErrInvalidOption) || !errors.As(err, &ee) || ee.Expr != path {
				t.Fatalf("New(WithKeyPath(%q)) = %v, want an ExpressionError", path, err)
			}
			return
		}
		var key string
		var keyed bool
		runs := 0
		fn := func(ctx context.Context) (int, error) {
			runs++
			key, keyed = guard.KeyFromContext(ctx)
			return 7, nil
		}
		input := json.RawMessage(in)
		v, out, err := adapt.Execute(context.Background(), g, "fz", input, fn)
		if err != nil {
			if !errors.Is(err, guard.ErrInvalidInput) {
				t.Fatalf("Execute(%q, path %q) = %v, want nil or ErrInvalidInput", in, path, err)
			}
			if runs != 0 || mem.Len() != 0 {
				t.Fatalf("Execute(%q, path %q) failed with %v after %d runs, leaving %d records", in, path, err, runs, mem.Len())
			}
			return
		}
		if v != 7 || runs != 1 {
			t.Fatalf("Execute(%q, path %q) = %d after %d runs", in, path, v, runs)
		}
		switch out {
		case guard.OutcomeUnguarded:
			if keyed || mem.Len() != 0 {
				t.Fatalf("unguarded call had key %q, left %d records", key, mem.Len())
			}
			return
		case guard.OutcomeExecuted:
		default:
			t.Fatalf("first call's outcome %v", out)
		}
		if m := keyPattern.FindStringSubmatch(key); !keyed || m == nil || m[1] != "fz" {
			t.Fatalf("Execute(%q, path %q): key %q, %v; want fz#<64 hex>", in, path, key, keyed)
		}
		// The key is a function of the input: a second call replays.
		if _, out, err := adapt.Execute(context.Background(), g, "fz", input, fn); err != nil || out != guard.OutcomeReplayed || runs != 1 {
			t.Fatalf("second Execute(%q, path %q) = %v, %v after %d runs; want replayed", in, path, out, err, runs)
		}
	})
}

// FuzzDeriveKeyGoValues: Go values built from arbitrary bytes. A string
// field holding the bytes is keyed exactly when they are valid UTF-8 and
// refused with ErrInvalidInput otherwise, so that two inputs differing only
// in invalid bytes never share a key; a map with a named string key type is
// keyed as the same map with plain string keys.
func FuzzDeriveKeyGoValues(f *testing.F) {
	for _, s := range fuzzJSONSeeds {
		f.Add([]byte(s))
	}
	g, err := guard.New(memory.New())
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		type msg struct {
			ID   string `json:"id"`
			Body string `json:"body"`
		}
		key, _, err := g.Key("fz", msg{ID: "m-1", Body: string(in)})
		switch {
		case utf8.Valid(in) && (err != nil || key == ""):
			t.Fatalf("Key(valid %q) = %q, %v", in, key, err)
		case !utf8.Valid(in) && !errors.Is(err, guard.ErrInvalidInput):
			t.Fatalf("Key(invalid %q) = %q, %v; want ErrInvalidInput", in, key, err)
		}
		// Keyed by the ID alone, the body is left out and may be anything.
		if key, _, err := g.Key("fz", msg{ID: "m-1", Body: string(in)}, guard.WithKeyPath("id")); err != nil || key == "" {
			t.Fatalf("Key(id of a message with body %q) = %q, %v", in, key, err)
		}
		var plain map[string]any
		if json.Unmarshal(in, &plain) != nil || plain == nil {
			return
		}
		named := make(map[fuzzKey]any, len(plain))
		for k, v := range plain {
			named[fuzzKey(k)] = v
		}
		k1, _, err1 := g.Key("fz", plain)
		k2, _, err2 := g.Key("fz", named)
		if k1 != k2 || (err1 == nil) != (err2 == nil) {
			t.Fatalf("map %q keys as %q, %v; with a named key type as %q, %v", in, k1, err1, k2, err2)
		}
	})
}
