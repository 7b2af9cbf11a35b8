package guard_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/idemguard/idemguard/guard"
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
}

// FuzzCanonicalize: whatever Canonicalize accepts, it turns into valid JSON
// that is its own canonical form and means the same as the input.
func FuzzCanonicalize(f *testing.F) {
	for _, s := range fuzzJSONSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := guard.Canonicalize(in)
		if err != nil {
			return
		}
		if !json.Valid(out) {
			t.Fatalf("Canonicalize(%q) = %q: not valid JSON", in, out)
		}
		again, err := guard.Canonicalize(out)
		if err != nil || !bytes.Equal(again, out) {
			t.Fatalf("Canonicalize(%q) = %q, but Canonicalize of that = %q, %v", in, out, again, err)
		}
		var vin, vout any
		if err := json.Unmarshal(in, &vin); err != nil {
			t.Fatalf("Canonicalize accepted %q, which encoding/json rejects: %v", in, err)
		}
		if err := json.Unmarshal(out, &vout); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(vin, vout) {
			t.Fatalf("Canonicalize(%q) = %q: decodes to %#v, want %#v", in, out, vout, vin)
		}
	})
}

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
			var ee *guard.ExpressionError
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
		v, out, err := guard.Execute(context.Background(), g, "fz", input, fn)
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
		if _, out, err := guard.Execute(context.Background(), g, "fz", input, fn); err != nil || out != guard.OutcomeReplayed || runs != 1 {
			t.Fatalf("second Execute(%q, path %q) = %v, %v after %d runs; want replayed", in, path, out, err, runs)
		}
	})
}
