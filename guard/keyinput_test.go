package guard_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
)

type namedKey string

// Results and inputs that are maps keyed by a named string type work as
// encoding/json handles them.
func TestNamedStringKeyMaps(t *testing.T) {
	m, _ := newMemory()
	g := mustGuard(t, m)
	want := map[namedKey]any{"a": 1.0, "b": "two"}
	if _, err := guard.Do(ctx, g, "job", "k", func(context.Context) (map[namedKey]any, error) { return want, nil }); err != nil {
		t.Fatalf("first call: %v", err)
	}
	got, out, err := adapt.Execute(ctx, g, "job", "k", func(context.Context) (map[namedKey]any, error) { return nil, nil })
	if err != nil || out != guard.OutcomeReplayed || !reflect.DeepEqual(got, want) {
		t.Errorf("replay = %v, %v, %v; want %v", got, out, err, want)
	}
	// As an input, it keys exactly like the same map with plain keys.
	if a, b := keyHash(t, map[namedKey]any{"id": "o-1"}), keyHash(t, map[string]any{"id": "o-1"}); a != b {
		t.Errorf("named-key map keys as %s, plain map as %s", a, b)
	}
}

// Inputs that differ only in strings that are not valid UTF-8 must never
// share a key: they are refused, not merged.
func TestInvalidUTF8IsRefusedNotMerged(t *testing.T) {
	type msg struct {
		ID   string `json:"id"`
		Body string `json:"body"`
	}
	inputs := []struct {
		name string
		a, b any
	}{
		{"string field", msg{ID: "\x8a\x01\x02"}, msg{ID: "\x9b\x01\x02"}},
		{"map key", map[string]int{"\xff": 1}, map[string]int{"\xfe": 1}},
		{"lone surrogate", json.RawMessage(`{"id":"\ud800"}`), json.RawMessage(`{"id":"\udbff"}`)},
	}
	for _, tc := range inputs {
		t.Run(tc.name, func(t *testing.T) {
			m, _ := newMemory()
			g := mustGuard(t, m)
			runs := 0
			for _, in := range []any{tc.a, tc.b} {
				_, err := guard.Do(ctx, g, "job", in, func(context.Context) (int, error) { runs++; return runs, nil })
				if !errors.Is(err, guard.ErrInvalidInput) {
					t.Errorf("Do(%q) = %v, want ErrInvalidInput", in, err)
				}
			}
			if runs != 0 || m.Len() != 0 {
				t.Errorf("ran %d times, %d records; want neither", runs, m.Len())
			}
		})
	}
	// Payload validation must not be bypassed the same way.
	m, _ := newMemory()
	g := mustGuard(t, m, guard.WithKeyPath("id"), guard.WithPayloadValidation("body"))
	_, err := guard.Do(ctx, g, "job", msg{ID: "o-1", Body: "\x8a"}, func(context.Context) (int, error) { return 1, nil })
	if !errors.Is(err, guard.ErrInvalidInput) {
		t.Errorf("invalid validated payload: %v, want ErrInvalidInput", err)
	}
	// A selection that leaves the invalid string out keys normally.
	v, err := guard.Do(ctx, g, "job2", msg{ID: "o-2", Body: "fine"}, func(context.Context) (int, error) { return 2, nil })
	if err != nil || v != 2 {
		t.Errorf("valid input: %d, %v", v, err)
	}
	g2 := mustGuard(t, m, guard.WithKeyPath("id"))
	v, err = guard.Do(ctx, g2, "job3", msg{ID: "o-3", Body: "\x8a"}, func(context.Context) (int, error) { return 3, nil })
	if err != nil || v != 3 {
		t.Errorf("invalid UTF-8 outside the selection: %d, %v; want it keyed by id", v, err)
	}
}
