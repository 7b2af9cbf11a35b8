// Package teststores runs a test on each store a transport integration
// (httpguard, grpcguard) is tested on: the memory store and DynamoDB Local.
package teststores

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/dynamodbtest"
	"github.com/idemguard/idemguard/internal/reqcount"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/memory"
)

// Each runs test once per store, as subtests named "memory" and
// "dynamodb". The DynamoDB store is on a fresh table, with a counter of the
// requests its client sends (zeroed after the table is created); the
// memory store has none (nil). On DynamoDB Local the subtest skips, or
// fails when CI=true, if the harness (scripts/harness.sh) did not start
// the server.
func Each(t *testing.T, test func(t *testing.T, s store.Store, n *reqcount.Counter)) {
	t.Run("memory", func(t *testing.T) { test(t, memory.New(), nil) })
	t.Run("dynamodb", func(t *testing.T) {
		s, n := DynamoDB(t)
		test(t, s, n)
	})
}

// DynamoDB returns a store on a fresh DynamoDB Local table and the counter
// of its client's requests.
func DynamoDB(t testing.TB) (store.Store, *reqcount.Counter) {
	t.Helper()
	var n *reqcount.Counter
	client := dynamodbtest.NewClient(t, func(o *dynamodb.Options) { n = dynamodbtest.CountRequests(o) })
	s := dynamodbtest.NewStore(t, client)
	n.Reset()
	return s, n
}

// NewGuard returns a guard over s, failing the test on an invalid option.
func NewGuard(t testing.TB, s store.Store, opts ...guard.Option) *guard.Guard {
	t.Helper()
	g, err := guard.New(s, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return g
}
