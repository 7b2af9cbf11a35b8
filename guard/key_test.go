package guard_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/internal/keyformat"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/memory"
)

// Key derivation through the public API only: every key is learnt with
// KeyFromContext inside the guarded function and compared with a key
// computed here, independently, from a canonical text written by hand.

// keyPattern is the key format: "<scope>#<64 lowercase hex digits>".
var keyPattern = regexp.MustCompile(`^(.*)#([0-9a-f]{64})$`)

// keyFor is the key the guard must derive for a selection whose RFC 8785
// canonical form is canonical.
func keyFor(scope, canonical string) string {
	sum := sha256.Sum256([]byte(canonical))
	return scope + "#" + hex.EncodeToString(sum[:])
}

// keyOf runs one call with input on a fresh guard over a fresh memory store
// (guard options first, then call options) and returns the key the function
// saw. It fails the test unless the call executed, stored one record and
// the key has the right format for scope.
func keyOf(t *testing.T, scope string, input any, newOpts []guard.Option, callOpts ...guard.CallOption) string {
	t.Helper()
	mem := memory.New()
	g, err := guard.New(mem, newOpts...)
	if err != nil {
		t.Fatalf("guard.New: %v", err)
	}
	var key string
	var ok bool
	runs := 0
	_, out, err := adapt.Execute(context.Background(), g, scope, input, func(ctx context.Context) (int, error) {
		runs++
		key, ok = guard.KeyFromContext(ctx)
		return 0, nil
	}, callOpts...)
	if err != nil {
		t.Fatalf("Execute(%#v): %v", input, err)
	}
	if out != guard.OutcomeExecuted || runs != 1 || !ok {
		t.Fatalf("Execute(%#v): outcome %v, %d runs, key in context %v; want executed once with a key", input, out, runs, ok)
	}
	m := keyPattern.FindStringSubmatch(key)
	if m == nil || m[1] != scope {
		t.Fatalf("key %q does not match %q with scope %q", key, keyPattern, scope)
	}
	if n := mem.Len(); n != 1 {
		t.Fatalf("store holds %d records after one guarded call, want 1", n)
	}
	if _, err := mem.Get(context.Background(), key); err != nil {
		t.Fatalf("no record under the key the function saw, %q: %v", key, err)
	}
	return key
}

// keyTestStore counts the calls that reach the store.
type keyTestStore struct {
	store.Store
	calls atomic.Int64
}

func (s *keyTestStore) Acquire(ctx context.Context, rec *store.Record, now time.Time) (*store.Record, error) {
	s.calls.Add(1)
	return s.Store.Acquire(ctx, rec, now)
}

func (s *keyTestStore) Get(ctx context.Context, key string) (*store.Record, error) {
	s.calls.Add(1)
	return s.Store.Get(ctx, key)
}

func keyB64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func keyB64Gzip(t *testing.T, s string) string {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(buf.Bytes())
}

func TestKeyIsScopeAndSHA256OfCanonicalJSON(t *testing.T) {
	got := keyOf(t, "orders", map[string]any{"b": 2, "a": 1}, nil)
	if want := keyFor("orders", `{"a":1,"b":2}`); got != want {
		t.Errorf("key = %q, want %q", got, want)
	}
	// The same, spelled out, so that keyFor itself is checked once.
	if want := "orders#43258cff783fe7036d8a43033f830adfc60ec037382473548ac742b888292777"; got != want {
		t.Errorf("key = %q, want %q", got, want)
	}
}

type keyTestPair struct {
	B int `json:"b"`
	A int `json:"a"`
}

func TestKeyIgnoresFieldOrderAndWhitespace(t *testing.T) {
	want := keyFor("s", `{"a":1,"b":2}`)
	for name, input := range map[string]any{
		"struct b,a":      keyTestPair{B: 2, A: 1},
		"pointer":         &keyTestPair{B: 2, A: 1},
		"map":             map[string]int{"a": 1, "b": 2},
		"map any":         map[string]any{"b": 2, "a": 1},
		"raw b,a":         json.RawMessage(`{"b":2,"a":1}`),
		"raw a,b spaced":  json.RawMessage(" {\n\t\"a\" : 1 ,\r\n \"b\" : 2 } "),
		"raw float forms": json.RawMessage(`{"a":1.0,"b":2e0}`),
	} {
		t.Run(name, func(t *testing.T) {
			if got := keyOf(t, "s", input, nil); got != want {
				t.Errorf("key = %q, want %q", got, want)
			}
		})
	}
}

func TestKeyIgnoresNumberSpelling(t *testing.T) {
	for _, tc := range []struct {
		canonical string
		inputs    []any
	}{
		{`{"n":1}`, []any{
			json.RawMessage(`{"n":1}`), json.RawMessage(`{"n":1.0}`), json.RawMessage(`{"n":1.000}`),
			json.RawMessage(`{"n":10e-1}`), map[string]any{"n": 1}, map[string]any{"n": 1.0},
			map[string]uint8{"n": 1}, struct {
				N float32 `json:"n"`
			}{1},
		}},
		{`{"n":100}`, []any{
			json.RawMessage(`{"n":1e2}`), json.RawMessage(`{"n":1E2}`), json.RawMessage(`{"n":1e+2}`),
			json.RawMessage(`{"n":100}`), json.RawMessage(`{"n":100.0}`), map[string]float64{"n": 100},
		}},
		{`{"n":0}`, []any{json.RawMessage(`{"n":-0}`), json.RawMessage(`{"n":0.0}`), map[string]float64{"n": math.Copysign(0, -1)}}},
		{`{"n":1e+21}`, []any{json.RawMessage(`{"n":1e21}`), json.RawMessage(`{"n":1000000000000000000000}`), map[string]float64{"n": 1e21}}},
		{`{"n":0.000001}`, []any{json.RawMessage(`{"n":1e-6}`), map[string]float64{"n": 0.000001}}},
		{`{"n":1e-7}`, []any{json.RawMessage(`{"n":0.0000001}`), map[string]float64{"n": 1e-7}}},
		{`{"n":4.5}`, []any{json.RawMessage(`{"n":4.50}`), map[string]float64{"n": 4.5}}},
	} {
		want := keyFor("s", tc.canonical)
		for _, input := range tc.inputs {
			if got := keyOf(t, "s", input, nil); got != want {
				t.Errorf("key(%s) = %q, want key of %s, %q", input, got, tc.canonical, want)
			}
		}
	}
	// Through a key path too: the selection is canonicalised, not the text.
	for _, raw := range []string{`{"n":1e2}`, `{"n":100.00}`} {
		if got, want := keyOf(t, "s", json.RawMessage(raw), nil, guard.WithKeyPath("n")), keyFor("s", `100`); got != want {
			t.Errorf("key(%s, path n) = %q, want %q", raw, got, want)
		}
	}
	// Different numbers stay different.
	if keyOf(t, "s", json.RawMessage(`{"n":1}`), nil) == keyOf(t, "s", json.RawMessage(`{"n":1.5}`), nil) {
		t.Error("1 and 1.5 give the same key")
	}
}

func TestKeyDependsOnScope(t *testing.T) {
	input := map[string]string{"id": "o-1"}
	a := keyOf(t, "charge", input, nil)
	b := keyOf(t, "refund", input, nil)
	if a == b {
		t.Fatalf("scopes charge and refund share key %q", a)
	}
	if a != keyFor("charge", `{"id":"o-1"}`) || b != keyFor("refund", `{"id":"o-1"}`) {
		t.Errorf("keys %q, %q; want %q, %q", a, b, keyFor("charge", `{"id":"o-1"}`), keyFor("refund", `{"id":"o-1"}`))
	}

	// On one guard: each scope runs its function once, and keeps its own record.
	mem := memory.New()
	g, err := guard.New(mem)
	if err != nil {
		t.Fatal(err)
	}
	runs := 0
	fn := func(context.Context) (int, error) { runs++; return runs, nil }
	for _, scope := range []string{"charge", "refund", "charge", "refund", "activity:Charge"} {
		if _, err := guard.Do(context.Background(), g, scope, input, fn); err != nil {
			t.Fatalf("Do(%s): %v", scope, err)
		}
	}
	if runs != 3 || mem.Len() != 3 {
		t.Errorf("%d runs and %d records over three scopes, want 3 and 3", runs, mem.Len())
	}

	if _, err := guard.Do(context.Background(), g, "", input, fn); !errors.Is(err, guard.ErrInvalidOption) {
		t.Errorf("empty scope: err = %v, want ErrInvalidOption", err)
	}
	if runs != 3 {
		t.Error("function ran with an empty scope")
	}
}

type keyTestOrder struct {
	ID       string `json:"id"`
	Amount   int    `json:"amount"`
	Customer struct {
		ID   string `json:"id"`
		Tier string `json:"tier,omitempty"`
	} `json:"customer"`
	Internal string `json:"-"`
}

func TestKeyPath(t *testing.T) {
	order := map[string]any{
		"order":    map[string]any{"id": "o-1", "amount": 5, "lines": []any{map[string]any{"sku": "x", "qty": 2}}},
		"customer": map[string]any{"id": "c-9"},
		"meta":     map[string]any{"received": "2026-11-21T12:00:00Z"},
	}
	var typed keyTestOrder
	typed.ID, typed.Amount, typed.Customer.ID, typed.Internal = "o-1", 5, "c-9", "not in JSON"

	for _, tc := range []struct {
		name, path string
		input      any
		canonical  string
	}{
		{"field", "order.id", order, `"o-1"`},
		{"nested object", "order", order, `{"amount":5,"id":"o-1","lines":[{"qty":2,"sku":"x"}]}`},
		{"deep", "order.lines[0].sku", order, `"x"`},
		{"multi-select list", "[order.id, customer.id]", order, `["o-1","c-9"]`},
		{"multi-select hash", "{o: order.id, c: customer.id}", order, `{"c":"c-9","o":"o-1"}`},
		{"quoted name", `headers."Idempotency-Key"`, map[string]any{"headers": map[string]string{"Idempotency-Key": "k-1"}}, `"k-1"`},
		{"current node", "@", map[string]int{"b": 1, "a": 2}, `{"a":2,"b":1}`},
		{"struct uses JSON names", "customer.id", typed, `"c-9"`},
		{"struct whole", "@", typed, `{"amount":5,"customer":{"id":"c-9"},"id":"o-1"}`},
		{"raw input", "order.id", json.RawMessage(`{"order":{"id":"o-2"}}`), `"o-2"`},
		{"zero", "n", map[string]int{"n": 0}, `0`},
		{"false", "b", map[string]bool{"b": false}, `false`},
		{
			"powertools_json", "powertools_json(body).order_id",
			map[string]string{"body": `{"order_id": 42, "note": "ignored"}`}, `42`,
		},
		{
			"powertools_json object", "powertools_json(body)",
			map[string]string{"body": `{"b": [1.0, 2], "a": "\u00e9"}`}, `{"a":"é","b":[1,2]}`,
		},
		{
			"powertools_base64", "powertools_base64(data)",
			map[string]string{"data": keyB64("order-77")}, `"order-77"`,
		},
		{
			"powertools_base64 then json", "powertools_json(powertools_base64(data)).id",
			map[string]string{"data": keyB64(`{"id": "abc", "x": 1}`)}, `"abc"`,
		},
		{
			"powertools_base64_gzip", "powertools_base64_gzip(data)",
			map[string]string{"data": keyB64Gzip(t, "hello gzip")}, `"hello gzip"`,
		},
		{
			"powertools_base64_gzip then json", "powertools_json(powertools_base64_gzip(data)).order",
			map[string]string{"data": keyB64Gzip(t, `{"order": {"tags": ["b", "a"], "id": 7}}`)}, `{"id":7,"tags":["b","a"]}`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := keyFor("s", tc.canonical)
			if got := keyOf(t, "s", tc.input, nil, guard.WithKeyPath(tc.path)); got != want {
				t.Errorf("per call: key = %q, want key of %s, %q", got, tc.canonical, want)
			}
			if got := keyOf(t, "s", tc.input, []guard.Option{guard.WithKeyPath(tc.path)}); got != want {
				t.Errorf("on the guard: key = %q, want key of %s, %q", got, tc.canonical, want)
			}
		})
	}
}

func TestKeyPathIgnoresTheRest(t *testing.T) {
	mem := memory.New()
	g, err := guard.New(mem, guard.WithKeyPath("order.id"))
	if err != nil {
		t.Fatal(err)
	}
	runs := 0
	fn := func(context.Context) (int, error) { runs++; return runs, nil }
	for i, input := range []any{
		map[string]any{"order": map[string]any{"id": "o-1", "amount": 5}, "attempt": 1},
		map[string]any{"order": map[string]any{"id": "o-1", "amount": 6}, "attempt": 2},
		json.RawMessage(`{"attempt":3,"order":{"amount":7,"id":"o-1"}}`),
	} {
		v, out, err := adapt.Execute(context.Background(), g, "s", input, fn)
		wantOut := guard.OutcomeReplayed
		if i == 0 {
			wantOut = guard.OutcomeExecuted
		}
		if err != nil || v != 1 || out != wantOut {
			t.Errorf("call %d = %d, %v, %v; want 1, %v", i, v, out, err, wantOut)
		}
	}
	if runs != 1 || mem.Len() != 1 {
		t.Errorf("%d runs, %d records; want 1, 1", runs, mem.Len())
	}
	// A per-call key path overrides the guard's.
	if got, want := keyOf(t, "s", map[string]any{"a": 1, "b": 2}, []guard.Option{guard.WithKeyPath("a")}, guard.WithKeyPath("b")), keyFor("s", "2"); got != want {
		t.Errorf("per-call path over guard path: key = %q, want %q", got, want)
	}
}

func TestExplicitKey(t *testing.T) {
	input := map[string]any{"id": "from-input"}
	for _, tc := range []struct {
		name      string
		selection any
		canonical string
	}{
		{"string", "abc", `"abc"`},
		{"number", 12.50, `12.5`},
		{"zero", 0, `0`},
		{"false", false, `false`},
		{"map", map[string]any{"b": 1, "a": 2}, `{"a":2,"b":1}`},
		{"struct", keyTestPair{B: 2, A: 1}, `{"a":1,"b":2}`},
		{"raw", json.RawMessage(` {"b":1.0, "a":"x"} `), `{"a":"x","b":1}`},
		{"array with a null", []any{nil, "x"}, `[null,"x"]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := keyFor("s", tc.canonical)
			if got := keyOf(t, "s", input, nil, guard.WithKey(tc.selection)); got != want {
				t.Errorf("key = %q, want key of %s, %q", got, tc.canonical, want)
			}
			// The key path is not applied to the explicit key.
			if got := keyOf(t, "s", input, []guard.Option{guard.WithKeyPath("id")}, guard.WithKey(tc.selection)); got != want {
				t.Errorf("with a key path: key = %q, want %q", got, want)
			}
			// The input does not matter, even when it would be missing.
			if got := keyOf(t, "s", nil, nil, guard.WithKey(tc.selection)); got != want {
				t.Errorf("nil input: key = %q, want %q", got, want)
			}
		})
	}

	// Different inputs, same explicit key: one execution.
	mem := memory.New()
	g, err := guard.New(mem)
	if err != nil {
		t.Fatal(err)
	}
	runs := 0
	for i := range 3 {
		v, err := guard.Do(context.Background(), g, "s", map[string]int{"i": i}, func(context.Context) (int, error) {
			runs++
			return 7, nil
		}, guard.WithKey("same"))
		if err != nil || v != 7 {
			t.Fatalf("call %d = %d, %v", i, v, err)
		}
	}
	if runs != 1 || mem.Len() != 1 {
		t.Errorf("%d runs, %d records; want 1, 1", runs, mem.Len())
	}
}

// keyMissingCases are selections that identify nothing.
func keyMissingCases() []struct {
	name  string
	input any
	opts  []guard.CallOption
} {
	type nullable struct {
		A *int           `json:"a"`
		B map[string]int `json:"b"`
	}
	return []struct {
		name  string
		input any
		opts  []guard.CallOption
	}{
		{"nil", nil, nil},
		{"nil pointer", (*keyTestPair)(nil), nil},
		{"nil slice", []int(nil), nil},
		{"empty string", "", nil},
		{"empty map", map[string]any{}, nil},
		{"empty slice", []int{}, nil},
		{"all-null map", map[string]any{"a": nil, "b": nil}, nil},
		{"all-null slice", []any{nil, nil}, nil},
		{"all-null struct", nullable{}, nil},
		{"raw null", json.RawMessage(` null `), nil},
		{"raw empty object", json.RawMessage(" {\n} "), nil},
		{"raw empty array", json.RawMessage(`[ ]`), nil},
		{"raw empty string", json.RawMessage(`""`), nil},
		{"raw all-null", json.RawMessage(`{"a":null,"b":null}`), nil},
		{"path absent", map[string]any{"order": map[string]any{}}, []guard.CallOption{guard.WithKeyPath("order.id")}},
		{"path null", map[string]any{"id": nil}, []guard.CallOption{guard.WithKeyPath("id")}},
		{"path empty string", map[string]any{"id": ""}, []guard.CallOption{guard.WithKeyPath("id")}},
		{"path empty object", map[string]any{"id": map[string]any{}}, []guard.CallOption{guard.WithKeyPath("id")}},
		{"path empty array", map[string]any{"id": []any{}}, []guard.CallOption{guard.WithKeyPath("id")}},
		{"path all-null object", map[string]any{"id": map[string]any{"x": nil}}, []guard.CallOption{guard.WithKeyPath("id")}},
		{"path all-null multi-select", map[string]any{"z": 1}, []guard.CallOption{guard.WithKeyPath("[a, b]")}},
		{"path into a string", map[string]any{"id": "x"}, []guard.CallOption{guard.WithKeyPath("id.sub")}},
		{"powertools_json of null", map[string]any{"body": "null"}, []guard.CallOption{guard.WithKeyPath("powertools_json(body)")}},
		{"powertools_json of \"\"", map[string]any{"body": `""`}, []guard.CallOption{guard.WithKeyPath("powertools_json(body)")}},
		{"powertools_json of {}", map[string]any{"body": "{}"}, []guard.CallOption{guard.WithKeyPath("powertools_json(body)")}},
		{"powertools_json of []", map[string]any{"body": "[]"}, []guard.CallOption{guard.WithKeyPath("powertools_json(body)")}},
		{"powertools_json of an all-null object", map[string]any{"body": `{"a": null}`}, []guard.CallOption{guard.WithKeyPath("powertools_json(body)")}},
		{"expression to an empty string", map[string]any{"id": ""}, []guard.CallOption{guard.WithKeyPath("[id][0]")}},
		{"explicit nil", map[string]int{"id": 1}, []guard.CallOption{guard.WithKey(nil)}},
		{"explicit empty string", map[string]int{"id": 1}, []guard.CallOption{guard.WithKey("")}},
		{"explicit empty map", map[string]int{"id": 1}, []guard.CallOption{guard.WithKey(map[string]string{})}},
		{"explicit all-null", map[string]int{"id": 1}, []guard.CallOption{guard.WithKey([]any{nil})}},
	}
}

func TestKeyMissingRunsUnguarded(t *testing.T) {
	for _, tc := range keyMissingCases() {
		t.Run(tc.name, func(t *testing.T) {
			mem := memory.New()
			s := &keyTestStore{Store: mem}
			g, err := guard.New(s)
			if err != nil {
				t.Fatal(err)
			}
			runs := 0
			for i := range 3 {
				v, out, err := adapt.Execute(context.Background(), g, "s", tc.input, func(ctx context.Context) (int, error) {
					runs++
					if k, ok := guard.KeyFromContext(ctx); ok {
						t.Errorf("unguarded call has key %q in its context", k)
					}
					return i, nil
				}, tc.opts...)
				if err != nil || v != i || out != guard.OutcomeUnguarded {
					t.Fatalf("call %d = %d, %v, %v; want %d, unguarded, nil", i, v, out, err, i)
				}
			}
			if runs != 3 {
				t.Errorf("function ran %d times in 3 unguarded calls", runs)
			}
			if mem.Len() != 0 || s.calls.Load() != 0 {
				t.Errorf("unguarded calls left %d records and made %d store calls", mem.Len(), s.calls.Load())
			}
		})
	}
}

func TestKeyMissingRequired(t *testing.T) {
	for _, tc := range keyMissingCases() {
		t.Run(tc.name, func(t *testing.T) {
			mem := memory.New()
			s := &keyTestStore{Store: mem}
			fn := func(context.Context) (int, error) {
				t.Error("function ran without a key")
				return 0, nil
			}
			// Required per call.
			g, err := guard.New(s)
			if err != nil {
				t.Fatal(err)
			}
			_, out, err := adapt.Execute(context.Background(), g, "s", tc.input, fn, append(tc.opts, guard.WithRequireKey(true))...)
			if !errors.Is(err, guard.ErrKeyMissing) || out == guard.OutcomeUnguarded {
				t.Errorf("per call: outcome %v, err %v; want ErrKeyMissing", out, err)
			}
			// Required by the guard.
			g, err = guard.New(s, guard.WithRequireKey(true))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := guard.Do(context.Background(), g, "s", tc.input, fn, tc.opts...); !errors.Is(err, guard.ErrKeyMissing) {
				t.Errorf("on the guard: err %v; want ErrKeyMissing", err)
			}
			if mem.Len() != 0 || s.calls.Load() != 0 {
				t.Errorf("left %d records and made %d store calls", mem.Len(), s.calls.Load())
			}
			// A call can lift the guard's requirement.
			_, out, err = adapt.Execute(context.Background(), g, "s", tc.input, func(context.Context) (int, error) { return 1, nil }, append(tc.opts, guard.WithRequireKey(false))...)
			if err != nil || out != guard.OutcomeUnguarded {
				t.Errorf("WithRequireKey(false) over the guard's: outcome %v, err %v; want unguarded", out, err)
			}
		})
	}
}

// Zero values are data: 0 and false identify a call.
func TestKeyZeroValuesAreNotMissing(t *testing.T) {
	for _, tc := range []struct {
		name      string
		input     any
		opts      []guard.CallOption
		canonical string
	}{
		{"0", 0, nil, `0`},
		{"0.0", 0.0, nil, `0`},
		{"false", false, nil, `false`},
		{"raw 0", json.RawMessage(`0`), nil, `0`},
		{"raw false", json.RawMessage(`false`), nil, `false`},
		{"space", " ", nil, `" "`},
		{"string null", "null", nil, `"null"`},
		{"map with 0", map[string]any{"a": 0}, nil, `{"a":0}`},
		{"map with false", map[string]any{"a": false}, nil, `{"a":false}`},
		{"map with empty string", map[string]any{"a": ""}, nil, `{"a":""}`},
		{"map with a null and a 0", map[string]any{"a": nil, "b": 0}, nil, `{"a":null,"b":0}`},
		{"map with a string null", map[string]any{"a": "null"}, nil, `{"a":"null"}`},
		{"map with an empty map", map[string]any{"a": map[string]any{}}, nil, `{"a":{}}`},
		{"slice with 0", []int{0}, nil, `[0]`},
		{"slice with false", []bool{false}, nil, `[false]`},
		{"slice with an empty slice", [][]int{{}}, nil, `[[]]`},
		{"slice with a null and a 1", []any{nil, 1}, nil, `[null,1]`},
		{"struct of zeros", keyTestPair{}, nil, `{"a":0,"b":0}`},
		{"path to 0", map[string]any{"id": 0}, []guard.CallOption{guard.WithKeyPath("id")}, `0`},
		{"path to false", map[string]any{"id": false}, []guard.CallOption{guard.WithKeyPath("id")}, `false`},
		{"path to [null, 0]", map[string]any{"a": 0}, []guard.CallOption{guard.WithKeyPath("[z, a]")}, `[null,0]`},
		// Through JMESPath rather than a plain field chain.
		{"expression to 0", map[string]any{"id": 0}, []guard.CallOption{guard.WithKeyPath("[id][0]")}, `0`},
		{"powertools_json to 0", map[string]any{"body": "0"}, []guard.CallOption{guard.WithKeyPath("powertools_json(body)")}, `0`},
		{"powertools_json to false", map[string]any{"body": "false"}, []guard.CallOption{guard.WithKeyPath("powertools_json(body)")}, `false`},
		{"powertools_json to [null, 0]", map[string]any{"body": "[null, 0.0]"}, []guard.CallOption{guard.WithKeyPath("powertools_json(body)")}, `[null,0]`},
		{"explicit 0", nil, []guard.CallOption{guard.WithKey(0)}, `0`},
		{"explicit false", nil, []guard.CallOption{guard.WithKey(false)}, `false`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := keyFor("s", tc.canonical)
			if got := keyOf(t, "s", tc.input, nil, append(tc.opts, guard.WithRequireKey(true))...); got != want {
				t.Errorf("key = %q, want key of %s, %q", got, tc.canonical, want)
			}
		})
	}
}

// keyInputErrorCases are inputs that cannot be keyed, with the options
// under which they fail.
func keyInputErrorCases(t *testing.T) []struct {
	name  string
	input any
	opts  []guard.CallOption
} {
	type withChan struct {
		C chan int `json:"c"`
	}
	notJSON := map[string]string{"body": "{not json"}
	type tc = struct {
		name  string
		input any
		opts  []guard.CallOption
	}
	cases := []tc{
		// JMESPath functions that fail at run time.
		{"powertools_json on invalid JSON", notJSON, []guard.CallOption{guard.WithKeyPath("powertools_json(body).id")}},
		{"powertools_json on a number", map[string]int{"body": 1}, []guard.CallOption{guard.WithKeyPath("powertools_json(body)")}},
		{"powertools_base64 on invalid base64", map[string]string{"data": "!!not base64!!"}, []guard.CallOption{guard.WithKeyPath("powertools_base64(data)")}},
		{"powertools_base64_gzip on non-gzip", map[string]string{"data": keyB64("plain text")}, []guard.CallOption{guard.WithKeyPath("powertools_base64_gzip(data)")}},
		{"powertools_base64_gzip on truncated gzip", map[string]string{"data": keyB64(string(mustDecodeB64(t, keyB64Gzip(t, "hello gzip, a longer payload"))[:20]))}, []guard.CallOption{guard.WithKeyPath("powertools_base64_gzip(data)")}},
		{"builtin on the wrong type", map[string]int{"a": 1}, []guard.CallOption{guard.WithKeyPath("length(a)")}},
		{"validation path fails", notJSON, []guard.CallOption{guard.WithKey("k"), guard.WithPayloadValidation("powertools_json(body)")}},
		// Raw JSON the guard cannot parse or canonicalise.
		{"raw syntax error", json.RawMessage(`{"a":`), nil},
		{"raw number out of range", json.RawMessage(`{"a":1e400}`), nil},
		{"raw number out of range, path", json.RawMessage(`{"a":1e400}`), []guard.CallOption{guard.WithKeyPath("a")}},
	}
	// Values that are not JSON-serialisable, on every route to a key.
	for _, v := range []struct {
		name  string
		input any
	}{
		{"chan", make(chan int)},
		{"func", func() {}},
		{"NaN", math.NaN()},
		{"+Inf", math.Inf(1)},
		{"NaN in a map", map[string]any{"x": math.NaN()}},
		{"chan in a struct", withChan{C: make(chan int)}},
		{"func in a slice", []any{1, func() {}}},
		{"complex", complex(1, 2)},
		{"map with bool keys", map[bool]int{true: 1}},
	} {
		cases = append(cases,
			tc{v.name + ", whole input", v.input, nil},
			tc{v.name + ", key path", v.input, []guard.CallOption{guard.WithKeyPath("@")}},
			tc{v.name + ", explicit key", "input", []guard.CallOption{guard.WithKey(v.input)}},
			tc{v.name + ", validation", v.input, []guard.CallOption{guard.WithKey("k"), guard.WithPayloadValidation("@")}},
		)
	}
	return cases
}

func mustDecodeB64(t *testing.T, s string) []byte {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestKeyInvalidInputNeverRuns(t *testing.T) {
	for _, tc := range keyInputErrorCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			mem := memory.New()
			s := &keyTestStore{Store: mem}
			g, err := guard.New(s)
			if err != nil {
				t.Fatal(err)
			}
			fn := func(context.Context) (int, error) {
				t.Error("function ran on input that cannot be keyed")
				return 0, nil
			}
			for _, require := range []bool{false, true} {
				_, out, err := adapt.Execute(context.Background(), g, "s", tc.input, fn, append(tc.opts, guard.WithRequireKey(require))...)
				if !errors.Is(err, guard.ErrInvalidInput) {
					t.Errorf("require %v: outcome %v, err %v; want ErrInvalidInput", require, out, err)
				}
				if errors.Is(err, guard.ErrKeyMissing) || errors.Is(err, guard.ErrInvalidOption) {
					t.Errorf("require %v: err %v also matches ErrKeyMissing or ErrInvalidOption", require, err)
				}
			}
			if mem.Len() != 0 || s.calls.Load() != 0 {
				t.Errorf("left %d records and made %d store calls", mem.Len(), s.calls.Load())
			}
		})
	}
}

func TestKeyInvalidExpression(t *testing.T) {
	for _, expr := range []string{"a[", "order..id", "", "powertools_json(", "[?a==]", "a.`unterminated", "{a: }"} {
		for _, opt := range []struct {
			name string
			of   func(string) guard.SharedOption
		}{
			{"WithKeyPath", guard.WithKeyPath},
			{"WithPayloadValidation", guard.WithPayloadValidation},
		} {
			t.Run(opt.name+"("+expr+")", func(t *testing.T) {
				check := func(where string, err error) {
					t.Helper()
					if !errors.Is(err, guard.ErrInvalidOption) {
						t.Errorf("%s: err = %v, want ErrInvalidOption", where, err)
					}
					var ee *keyformat.ExpressionError
					if !errors.As(err, &ee) {
						t.Errorf("%s: err = %v (%T), want an *ExpressionError", where, err, err)
					} else if ee.Expr != expr || ee.Err == nil {
						t.Errorf("%s: ExpressionError{Expr: %q, Err: %v}, want Expr %q and the parser's error", where, ee.Expr, ee.Err, expr)
					}
					if errors.Is(err, guard.ErrInvalidInput) {
						t.Errorf("%s: err %v also matches ErrInvalidInput", where, err)
					}
				}
				mem := memory.New()
				s := &keyTestStore{Store: mem}
				runs := 0
				fn := func(context.Context) (int, error) { runs++; return 0, nil }

				g, err := guard.New(s, opt.of(expr))
				check("New", err)
				if g != nil {
					t.Error("New returned a guard with its error")
				}

				g, err = guard.New(s)
				if err != nil {
					t.Fatal(err)
				}
				wrapped, err := guard.Wrap(g, "s", func(ctx context.Context, in map[string]int) (int, error) { return fn(ctx) }, opt.of(expr))
				check("Wrap", err)
				if wrapped != nil {
					t.Error("Wrap returned a function with its error")
				}

				_, err = guard.Do(context.Background(), g, "s", map[string]int{"a": 1}, fn, opt.of(expr))
				check("Do", err)
				_, _, err = adapt.Execute(context.Background(), g, "s", map[string]int{"a": 1}, fn, opt.of(expr))
				check("Execute", err)

				if runs != 0 || mem.Len() != 0 || s.calls.Load() != 0 {
					t.Errorf("%d runs, %d records, %d store calls; want none", runs, mem.Len(), s.calls.Load())
				}
			})
		}
	}
}

func TestKeyPayloadValidation(t *testing.T) {
	for _, cache := range []int{0, 8} {
		mem := memory.New()
		g, err := guard.New(mem, guard.WithKeyPath("id"), guard.WithPayloadValidation("amount"), guard.WithCache(cache, 0))
		if err != nil {
			t.Fatal(err)
		}
		runs := 0
		fn := func(context.Context) (int, error) { runs++; return 100 + runs, nil }
		call := func(input any) (int, guard.Outcome, error) {
			return adapt.Execute(context.Background(), g, "pay", input, fn)
		}

		if v, out, err := call(map[string]any{"id": "o-1", "amount": 5}); err != nil || v != 101 || out != guard.OutcomeExecuted {
			t.Fatalf("cache %d: first call = %d, %v, %v", cache, v, out, err)
		}
		// Same key, same validated field (spelled differently), other fields changed: replay.
		if v, out, err := call(json.RawMessage(`{"note":"retry","amount":5.0,"id":"o-1"}`)); err != nil || v != 101 || out != guard.OutcomeReplayed {
			t.Errorf("cache %d: same payload = %d, %v, %v; want 101, replayed", cache, v, out, err)
		}
		// Same key, different validated field: mismatch.
		_, _, err = call(map[string]any{"id": "o-1", "amount": 6})
		if !errors.Is(err, guard.ErrPayloadMismatch) {
			t.Fatalf("cache %d: different payload: err = %v, want ErrPayloadMismatch", cache, err)
		}
		var me *adapt.MismatchError
		if !errors.As(err, &me) {
			t.Fatalf("cache %d: err %T, want *MismatchError", cache, err)
		}
		h5, h6 := sha256.Sum256([]byte("5")), sha256.Sum256([]byte("6"))
		if me.Key != keyFor("pay", `"o-1"`) || me.PayloadHash != hex.EncodeToString(h6[:]) || me.Existing == nil || me.Existing.PayloadHash != hex.EncodeToString(h5[:]) {
			t.Errorf("cache %d: MismatchError{Key %q, PayloadHash %q, Existing %+v}; want key of \"o-1\", sha256(6), a record with sha256(5)", cache, me.Key, me.PayloadHash, me.Existing)
		}
		// Validated field missing from a later call: a different payload too.
		if _, _, err := call(map[string]any{"id": "o-1"}); !errors.Is(err, guard.ErrPayloadMismatch) {
			t.Errorf("cache %d: validated field absent: err = %v, want ErrPayloadMismatch", cache, err)
		}
		if runs != 1 || mem.Len() != 1 {
			t.Errorf("cache %d: %d runs, %d records; want 1, 1", cache, runs, mem.Len())
		}
	}

	// "@" validates the whole input, canonically.
	mem := memory.New()
	g, err := guard.New(mem, guard.WithKeyPath("id"), guard.WithPayloadValidation("@"))
	if err != nil {
		t.Fatal(err)
	}
	fn := func(context.Context) (int, error) { return 1, nil }
	if _, err := guard.Do(context.Background(), g, "s", json.RawMessage(`{"id":1,"a":[1,2],"b":"x"}`), fn); err != nil {
		t.Fatal(err)
	}
	if _, out, err := adapt.Execute(context.Background(), g, "s", json.RawMessage(`{"b":"x","a":[1.0,2e0],"id":1}`), fn); err != nil || out != guard.OutcomeReplayed {
		t.Errorf("reordered whole input: %v, %v; want replayed", out, err)
	}
	if _, err := guard.Do(context.Background(), g, "s", json.RawMessage(`{"id":1,"a":[2,1],"b":"x"}`), fn); !errors.Is(err, guard.ErrPayloadMismatch) {
		t.Errorf("array order changed: err = %v, want ErrPayloadMismatch", err)
	}
}

// The key is bound before the function runs: a function that changes its
// input completes the key the call started with.
func TestKeyBoundBeforeRun(t *testing.T) {
	mem := memory.New()
	g, err := guard.New(mem, guard.WithKeyPath("id"))
	if err != nil {
		t.Fatal(err)
	}
	input := map[string]any{"id": "o-1"}
	var seen string
	if _, err := guard.Do(context.Background(), g, "s", input, func(ctx context.Context) (int, error) {
		input["id"] = "changed"
		seen, _ = guard.KeyFromContext(ctx)
		return 1, nil
	}); err != nil {
		t.Fatal(err)
	}
	want := keyFor("s", `"o-1"`)
	if seen != want {
		t.Errorf("key in context %q, want %q", seen, want)
	}
	if rec, err := mem.Get(context.Background(), want); err != nil || rec.Status != store.StatusCompleted {
		t.Errorf("record under the original key: %+v, %v; want completed", rec, err)
	}
	if _, out, err := adapt.Execute(context.Background(), g, "s", map[string]any{"id": "o-1"}, func(context.Context) (int, error) { return 2, nil }); err != nil || out != guard.OutcomeReplayed {
		t.Errorf("second call with the original input: %v, %v; want replayed", out, err)
	}
}

// TestKeyVectors checks testdata/keys.json: keys generated by
// testdata/keys_gen.py, an implementation independent of this package (the
// canonical text of each entry is in the file for review).
func TestKeyVectors(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "keys.json"))
	if err != nil {
		t.Fatal(err)
	}
	var vectors []struct {
		Scope       string          `json:"scope"`
		Input       json.RawMessage `json:"input"`
		KeyPath     *string         `json:"keyPath"`
		Canonical   *string         `json:"canonical"`
		ExpectedKey string          `json:"expectedKey"`
	}
	if err := json.Unmarshal(data, &vectors); err != nil {
		t.Fatal(err)
	}
	if len(vectors) < 20 {
		t.Fatalf("only %d key vectors", len(vectors))
	}
	for i, v := range vectors {
		var opts []guard.Option
		name := v.Scope + " " + string(v.Input)
		if v.KeyPath != nil {
			opts = append(opts, guard.WithKeyPath(*v.KeyPath))
			name += " " + *v.KeyPath
		}
		// The file is self-consistent: the key is the hash of the canonical text.
		if v.Canonical != nil && v.ExpectedKey != keyFor(v.Scope, *v.Canonical) {
			t.Errorf("vector %d (%s): expectedKey %q is not the key of its canonical text %s", i, name, v.ExpectedKey, *v.Canonical)
		}
		mem := memory.New()
		g, err := guard.New(mem, opts...)
		if err != nil {
			t.Fatalf("vector %d (%s): %v", i, name, err)
		}
		var key string
		var keyed bool
		_, out, err := adapt.Execute(context.Background(), g, v.Scope, v.Input, func(ctx context.Context) (int, error) {
			key, keyed = guard.KeyFromContext(ctx)
			return 0, nil
		})
		switch {
		case err != nil:
			t.Errorf("vector %d (%s): %v", i, name, err)
		case v.ExpectedKey == "":
			if out != guard.OutcomeUnguarded || keyed || mem.Len() != 0 {
				t.Errorf("vector %d (%s): outcome %v, key %q; want unguarded", i, name, out, key)
			}
		case out != guard.OutcomeExecuted || key != v.ExpectedKey:
			t.Errorf("vector %d (%s): outcome %v, key %q; want executed, %q", i, name, out, key, v.ExpectedKey)
		}
	}
}

func TestExpressionsRejectedWhenBuilt(t *testing.T) {
	m := memory.New()
	for _, expr := range []string{
		"a\u0080",              // go-jmespath's lexer panics on it
		"powertools_jsn(body)", // a misspelt function
		"order.*",              // values in map order
		"keys(@)",
		"values(order)",
		"items(@)",
	} {
		var ee *keyformat.ExpressionError
		if _, err := guard.New(m, guard.WithKeyPath(expr)); !errors.As(err, &ee) || !errors.Is(err, guard.ErrInvalidOption) {
			t.Errorf("WithKeyPath(%q): %v, want an ExpressionError", expr, err)
		}
	}
	for _, expr := range []string{"sort(keys(@))", "length(order.*)", "sort(values(order))", "powertools_json(body).id", "[a, b]"} {
		if _, err := guard.New(m, guard.WithKeyPath(expr)); err != nil {
			t.Errorf("WithKeyPath(%q): %v, want it accepted", expr, err)
		}
	}
}

// powertools_base64_gzip inflates at most 16 MiB: a small input that
// inflates to more (a decompression bomb) is refused, not allocated.
func TestKeyPowertoolsGzipBounded(t *testing.T) {
	g, err := guard.New(memory.New(), guard.WithKeyPath("powertools_base64_gzip(data)"))
	if err != nil {
		t.Fatal(err)
	}
	bomb := keyB64Gzip(t, strings.Repeat("0", 17<<20))
	if len(bomb) > 100<<10 {
		t.Fatalf("the bomb is %d bytes of base64; want a small input", len(bomb))
	}
	if _, _, err := g.Key("s", map[string]string{"data": bomb}); !errors.Is(err, guard.ErrInvalidInput) {
		t.Errorf("Key of a 17 MiB gzip bomb = %v, want ErrInvalidInput", err)
	}
	if k, _, err := g.Key("s", map[string]string{"data": keyB64Gzip(t, strings.Repeat("0", 1<<20))}); err != nil || k == "" {
		t.Errorf("Key of 1 MiB inflated = %q, %v; want a key", k, err)
	}
}
