package dynamodb_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/idemguard/idemguard/guard"
	idemddb "github.com/idemguard/idemguard/store/dynamodb"
)

// The store states DynamoDB's key limits: 2,048 bytes for the partition
// key the record's key is, 1,024 for the sort key it is in the sort-key
// layout, whose static partition value must itself fit in 2,048.
func TestMaxKeyBytes(t *testing.T) {
	client := dynamodbtestClient("http://127.0.0.1:1") // New sends nothing
	for _, tc := range []struct {
		opts []idemddb.Option
		want int
	}{
		{nil, 2048},
		{[]idemddb.Option{idemddb.WithSortKey("sk", "idempotency#orders")}, 1024},
	} {
		s, err := idemddb.New(client, "t", tc.opts...)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.MaxKeyBytes(); got != tc.want {
			t.Errorf("MaxKeyBytes with %d options = %d, want %d", len(tc.opts), got, tc.want)
		}
	}
	_, err := idemddb.New(client, "t", idemddb.WithSortKey("sk", strings.Repeat("p", 2049)))
	if err == nil || !strings.Contains(err.Error(), "2048") || len(err.Error()) > 300 {
		t.Errorf("New with a static partition value of 2,049 bytes = %v; want a short error giving the limit", err)
	}
}

// Acceptance: a scope of 2,100 bytes is refused where it is fixed (Wrap),
// and guard.Do with it fails with ErrInvalidInput, not a retryable store
// error, without a request to DynamoDB Local.
func TestScopeOverDynamoDBKeyLimit(t *testing.T) {
	f := newFixture(t)
	g, err := guard.New(f.s)
	if err != nil {
		t.Fatal(err)
	}
	scope := strings.Repeat("s", 2100)
	fn := func(context.Context) (int, error) { return 1, nil }
	if _, err := guard.Wrap(g, scope, func(ctx context.Context, in string) (int, error) { return 1, nil }); !errors.Is(err, guard.ErrInvalidOption) {
		t.Errorf("Wrap with a 2,100-byte scope = %v, want ErrInvalidOption", err)
	}
	f.n.Reset()
	_, err = guard.Do(f.ctx, g, scope, "order-1", fn)
	if !errors.Is(err, guard.ErrInvalidInput) || errors.Is(err, guard.ErrStore) {
		t.Errorf("Do with a 2,100-byte scope = %v; want ErrInvalidInput, not ErrStore", err)
	}
	if err != nil && (len(err.Error()) > 400 || !strings.Contains(err.Error(), "2165") || !strings.Contains(err.Error(), "2048")) {
		t.Errorf("error %q; want it short, with the key's length (2165) and the limit (2048)", err)
	}
	if n := f.n.Total(); n != 0 {
		t.Errorf("Do with a 2,100-byte scope sent %d requests (%v), want none", n, f.n)
	}
	// The longest scope that fits works.
	if v, err := guard.Do(f.ctx, g, scope[:2048-65], "order-1", fn); err != nil || v != 1 {
		t.Errorf("Do with the longest scope that fits (1,983 bytes) = %d, %v", v, err)
	}
}
