package postgres_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/store/postgres"
)

// The store states the key limit of its table's indexes, and the guard
// refuses a scope whose keys would pass it, before any statement, as
// invalid input: not the server's "index row size exceeds maximum", a
// store error a retry meets again.
func TestScopeOverPostgresKeyLimit(t *testing.T) {
	f := newFixture(t)
	if got := f.s.MaxKeyBytes(); got != postgres.MaxKeyBytes {
		t.Errorf("MaxKeyBytes = %d, want %d", got, postgres.MaxKeyBytes)
	}
	g, err := guard.New(f.s)
	if err != nil {
		t.Fatal(err)
	}
	fn := func(context.Context) (int, error) { return 1, nil }
	scope := strings.Repeat("s", 2700)
	if _, err := guard.Wrap(g, scope, func(ctx context.Context, in string) (int, error) { return 1, nil }); !errors.Is(err, guard.ErrInvalidOption) {
		t.Errorf("Wrap with a 2,700-byte scope = %v, want ErrInvalidOption", err)
	}
	f.n.Reset()
	_, err = guard.Do(f.ctx, g, scope, "order-1", fn)
	if !errors.Is(err, guard.ErrInvalidInput) || errors.Is(err, guard.ErrStore) {
		t.Errorf("Do with a 2,700-byte scope = %v; want ErrInvalidInput, not ErrStore", err)
	}
	if n := f.n.Total(); n != 0 {
		t.Errorf("Do with a 2,700-byte scope sent %d statements, want none", n)
	}
	if v, err := guard.Do(f.ctx, g, scope[:postgres.MaxKeyBytes-65], "order-1", fn); err != nil || v != 1 {
		t.Errorf("Do with the longest scope that fits = %d, %v", v, err)
	}
}
