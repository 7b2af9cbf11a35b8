// Package teststores gives tests the stores they run on: the memory store
// and the servers the harness starts (DynamoDB Local, redis-server,
// PostgreSQL), each on fresh tables or key prefixes.
package teststores

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/testing/dynamodbtest"
	"github.com/idemguard/idemguard/internal/testing/postgrestest"
	"github.com/idemguard/idemguard/internal/testing/redistest"
	"github.com/idemguard/idemguard/internal/testing/reqcount"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/memory"
)

// Each runs test once per store, as subtests named "memory", "dynamodb",
// "redis" and "postgres". Each server's store is fresh (its own table or
// key prefix), with a counter of the round trips its client sends, zeroed
// once the store is ready; the memory store has none (nil). A server's
// subtest skips, or fails when CI=true, if the harness
// (scripts/harness.sh) did not start the server.
func Each(t *testing.T, test func(t *testing.T, s store.Store, n *reqcount.Counter)) {
	t.Run("memory", func(t *testing.T) { test(t, memory.New(), nil) })
	for _, srv := range []struct {
		name string
		open func(testing.TB) (store.Store, *reqcount.Counter)
	}{{"dynamodb", DynamoDB}, {"redis", Redis}, {"postgres", Postgres}} {
		t.Run(srv.name, func(t *testing.T) {
			s, n := srv.open(t)
			test(t, s, n)
		})
	}
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

// Redis returns a store under a fresh key prefix of the harness's
// redis-server and the counter of its client's round trips.
func Redis(t testing.TB) (store.Store, *reqcount.Counter) {
	t.Helper()
	client := redistest.NewClient(t)
	s := redistest.NewStore(t, client)
	n := redistest.CountRequests(client)
	return s, n
}

// Postgres returns a store on a fresh table of the harness's PostgreSQL
// and the counter of its pool's round trips.
func Postgres(t testing.TB) (store.Store, *reqcount.Counter) {
	t.Helper()
	var n *postgrestest.Counter
	pool := postgrestest.NewPool(t, func(c *pgxpool.Config) { n = postgrestest.CountStatements(c) })
	s := postgrestest.NewStore(t, pool)
	n.Reset()
	return s, &n.Counter
}

// All returns a maker per store: "memory", "dynamodb", "redis" and
// "postgres", each store on a fresh table or key prefix, for suites that
// hold a feature to every store (guardtest.RunComposition). The real
// stores skip, or fail when CI=true, if the harness did not start their
// server.
func All() map[string]func(t *testing.T) store.Store {
	only := func(open func(testing.TB) (store.Store, *reqcount.Counter)) func(t *testing.T) store.Store {
		return func(t *testing.T) store.Store { s, _ := open(t); return s }
	}
	return map[string]func(t *testing.T) store.Store{
		"memory":   func(*testing.T) store.Store { return memory.New() },
		"dynamodb": only(DynamoDB),
		"redis":    only(Redis),
		"postgres": only(Postgres),
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
