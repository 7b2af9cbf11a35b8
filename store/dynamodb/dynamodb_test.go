package dynamodb_test

import (
	"testing"

	"github.com/idemguard/idemguard/internal/testing/dynamodbtest"
	"github.com/idemguard/idemguard/store"
	idemddb "github.com/idemguard/idemguard/store/dynamodb"
	"github.com/idemguard/idemguard/store/storetest"
)

// tooLarge is a result of incompressible bytes that cannot fit in a 400 KB
// item.
const tooLarge = 450 << 10

func TestConformance(t *testing.T) {
	client := dynamodbtest.NewClient(t)
	for _, mode := range []struct {
		name string
		opts []idemddb.Option
	}{
		{"plain", nil},
		{"sort-key", []idemddb.Option{idemddb.WithAttributes(idemddb.Attributes{Key: "pk"}), idemddb.WithSortKey("sk", "idempotency#conformance")}},
		{"custom-names", []idemddb.Option{
			idemddb.WithAttributes(idemddb.Attributes{Key: "Key"}), idemddb.WithAttributes(idemddb.Attributes{Expiry: "ttl.expires"}), idemddb.WithAttributes(idemddb.Attributes{Lease: "lease"}),
			idemddb.WithAttributes(idemddb.Attributes{Status: "State"}), idemddb.WithAttributes(idemddb.Attributes{Data: "Result"}), idemddb.WithAttributes(idemddb.Attributes{Validation: "hash"}),
			idemddb.WithAttributes(idemddb.Attributes{Token: "fence"}), idemddb.WithAttributes(idemddb.Attributes{ResultKind: "kind"}), idemddb.WithAttributes(idemddb.Attributes{Encoding: "enc"}),
			idemddb.WithAttributes(idemddb.Attributes{Format: "layout"}),
		}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			storetest.Run(t, func(t *testing.T) store.Store {
				return dynamodbtest.NewStore(t, client, mode.opts...)
			}, storetest.WithTooLarge(tooLarge), storetest.WithNewerFormat(idemddb.MarkFormat))
		})
	}
}
