package watermillguard_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/testing/postgrestest"
	"github.com/idemguard/idemguard/internal/testing/redistest"
	"github.com/idemguard/idemguard/internal/testing/teststores"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/memory"
	"github.com/idemguard/idemguard/watermillguard"
)

// counter counts a store client's round trips; nil for the memory store.
type counter interface {
	Total() int
	Reset()
	String() string
}

// eachStore runs test once per store the guard supports, as subtests
// named after them: the memory store, and DynamoDB Local, redis-server
// and PostgreSQL from the harness (scripts/harness.sh), each with a
// counter of its client's round trips, zeroed.
func eachStore(t *testing.T, test func(t *testing.T, s store.Store, n counter)) {
	t.Run("memory", func(t *testing.T) { test(t, memory.New(), nil) })
	t.Run("dynamodb", func(t *testing.T) {
		s, n := teststores.DynamoDB(t)
		test(t, s, n)
	})
	t.Run("redis", func(t *testing.T) {
		client := redistest.NewClient(t)
		n := redistest.CountRequests(client)
		s := redistest.NewStore(t, client)
		n.Reset()
		test(t, s, n)
	})
	t.Run("postgres", func(t *testing.T) {
		var n *postgrestest.Counter
		pool := postgrestest.NewPool(t, func(c *pgxpool.Config) { n = postgrestest.CountStatements(c) })
		s := postgrestest.NewStore(t, pool)
		n.Reset()
		test(t, s, n)
	})
}

// through delivers a message whose UUID is key and whose payload is
// payload to body through mw, as a router would deliver it to a handler
// (outside a router, so under watermillguard.DefaultScope): body runs as
// the handler, with the message's context, which is the guarded call's.
// It is the one way these tests run a body through the middleware, so
// that another suite can run its bodies through it too.
func through(ctx context.Context, mw message.HandlerMiddleware, key string, payload []byte, body func(ctx context.Context, msg *message.Message) ([]*message.Message, error)) ([]*message.Message, error) {
	msg := message.NewMessage(key, payload)
	msg.SetContext(ctx)
	return deliver(mw, msg, body)
}

// deliver is through for a message of the caller's making.
func deliver(mw message.HandlerMiddleware, msg *message.Message, body func(ctx context.Context, msg *message.Message) ([]*message.Message, error)) ([]*message.Message, error) {
	return mw(func(msg *message.Message) ([]*message.Message, error) { return body(msg.Context(), msg) })(msg)
}

func newGuard(t testing.TB, s store.Store, opts ...guard.Option) *guard.Guard {
	t.Helper()
	return teststores.NewGuard(t, s, opts...)
}

func newMiddleware(t testing.TB, g *guard.Guard, opts ...watermillguard.Option) message.HandlerMiddleware {
	t.Helper()
	mw, err := watermillguard.Middleware(g, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return mw
}

// produce returns n messages with fresh random UUIDs, each with metadata
// naming source and a payload holding its index: what a handler that
// emits events makes anew on every run.
func produce(source string, n int) []*message.Message {
	out := make([]*message.Message, n)
	for i := range out {
		m := message.NewMessage(watermill.NewUUID(), []byte(fmt.Sprintf(`{"source":%q,"n":%d}`, source, i)))
		m.Metadata.Set("source", source)
		out[i] = m
	}
	return out
}
