// Package teststores gives tests the stores they run on: the memory store
// and the servers the harness starts (DynamoDB Local, redis-server,
// PostgreSQL), each on fresh tables or key prefixes.
package teststores

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/dynamodbtest"
	"github.com/idemguard/idemguard/internal/postgrestest"
	"github.com/idemguard/idemguard/internal/redistest"
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

// All returns a maker per store: "memory", "dynamodb", "redis" and
// "postgres", each store on a fresh table or key prefix, for suites that
// hold a feature to every store (guardtest.RunComposition). The real
// stores skip, or fail when CI=true, if the harness did not start their
// server.
func All() map[string]func(t *testing.T) store.Store {
	return map[string]func(t *testing.T) store.Store{
		"memory":   func(*testing.T) store.Store { return memory.New() },
		"dynamodb": func(t *testing.T) store.Store { s, _ := DynamoDB(t); return s },
		"redis":    func(t *testing.T) store.Store { return redistest.NewStore(t, redistest.NewClient(t)) },
		"postgres": func(t *testing.T) store.Store { return postgrestest.NewStore(t, postgrestest.NewPool(t)) },
	}
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
