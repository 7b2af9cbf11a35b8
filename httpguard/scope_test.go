package httpguard_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/httpguard"
	"github.com/idemguard/idemguard/store/memory"
)

// limitedStore is a memory store that holds keys of up to 2,048 bytes,
// as DynamoDB does.
type limitedStore struct{ *memory.Store }

func (limitedStore) MaxKeyBytes() int { return 2048 }

// A scope whose keys the store cannot hold is refused when the middleware
// is built, not on every request.
func TestScopeTooLongForTheStore(t *testing.T) {
	g, err := guard.New(limitedStore{memory.New()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := httpguard.Middleware(g, httpguard.WithScope(strings.Repeat("s", 2100))); !errors.Is(err, guard.ErrInvalidOption) {
		t.Errorf("Middleware with a 2,100-byte scope = %v, want ErrInvalidOption", err)
	}
	if _, err := httpguard.Middleware(g, httpguard.WithScope(strings.Repeat("s", 1983))); err != nil {
		t.Errorf("Middleware with the longest scope that fits = %v", err)
	}
}
