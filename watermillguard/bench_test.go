package watermillguard_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemguard/idemguard/internal/testing/postgrestest"
	"github.com/idemguard/idemguard/internal/testing/redistest"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/watermillguard"
)

// benchStore is an idempotency store with a counter of its client's round
// trips.
type benchStore struct {
	name string
	open func(tb testing.TB) (store.Store, counter)
}

var benchStores = []benchStore{
	{"redis", func(tb testing.TB) (store.Store, counter) {
		client := redistest.NewClient(tb)
		n := redistest.CountRequests(client)
		return redistest.NewStore(tb, client), n
	}},
	{"postgres", func(tb testing.TB) (store.Store, counter) {
		var n *postgrestest.Counter
		pool := postgrestest.NewPool(tb, func(c *pgxpool.Config) { n = postgrestest.CountStatements(c) })
		return postgrestest.NewStore(tb, pool), n
	}},
}

// consumeStream runs one router over b's topic in, with mw in front of a
// handler that produces one message per message to out (mw nil: none),
// until it has handled n deliveries, and returns how long that took from
// the router's start.
func consumeStream(tb testing.TB, b *broker, in, out string, n int, mw message.HandlerMiddleware) time.Duration {
	tb.Helper()
	r, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, watermill.NopLogger{})
	if err != nil {
		tb.Fatal(err)
	}
	var handled atomic.Int64
	done := make(chan struct{})
	r.AddMiddleware(func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			produced, err := h(msg)
			if err == nil && handled.Add(1) == int64(n) {
				close(done)
			}
			return produced, err
		}
	})
	if mw != nil {
		r.AddMiddleware(mw)
	}
	// The router closes its publisher when it stops: keep the broker's open.
	r.AddHandler("ship", in, b.sub(tb, "bench"), out, keepOpen(b.pub), func(msg *message.Message) ([]*message.Message, error) {
		shipped := message.NewMessage(watermill.NewUUID(), []byte(`{"shipped":true}`))
		shipped.Metadata.Set("order", msg.UUID)
		return []*message.Message{shipped}, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	start := time.Now()
	go func() { stopped <- r.Run(ctx) }()
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		tb.Fatalf("%d of %d deliveries handled in 5 minutes", handled.Load(), n)
	}
	elapsed := time.Since(start)
	cancel()
	if err := <-stopped; err != nil {
		tb.Fatal(err)
	}
	return elapsed
}

// publishN publishes n messages to topic, with the UUIDs ids if given,
// and returns their UUIDs.
func publishN(tb testing.TB, b *broker, topic string, n int, ids []string) []string {
	tb.Helper()
	msgs := make([]*message.Message, n)
	if ids == nil {
		ids = make([]string, n)
		for i := range ids {
			ids[i] = watermill.NewUUID()
		}
	}
	for i := range msgs {
		msgs[i] = message.NewMessage(ids[i], []byte(fmt.Sprintf(`{"order":%d}`, i)))
	}
	for len(msgs) > 0 { // in pipelines of 500
		k := min(len(msgs), 500)
		if err := b.pub.Publish(topic, msgs[:k]...); err != nil {
			tb.Fatal(err)
		}
		msgs = msgs[k:]
	}
	return ids
}

// Acceptance: messages per second through a router on Redis Streams with
// the middleware against the same router without it, and the middleware's
// round trips to the idempotency store per message: 2 for a first
// delivery, 1 for a redelivery of a handled message.
//
//	scripts/harness.sh run go test -run '^$' -bench Router -benchtime 2000x ./watermillguard/
func BenchmarkRouter(b *testing.B) {
	b.Run("plain", func(b *testing.B) {
		br := redisBroker(b)
		in, out := br.topic("orders"), br.topic("shipments")
		publishN(b, br, in, b.N, nil)
		b.ResetTimer()
		elapsed := consumeStream(b, br, in, out, b.N, nil)
		b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
	})
	for _, bs := range benchStores {
		b.Run("guarded/"+bs.name+"/first", func(b *testing.B) {
			br := redisBroker(b)
			s, n := bs.open(b)
			in, out := br.topic("orders"), br.topic("shipments")
			publishN(b, br, in, b.N, nil)
			mw := watermillguard.MustMiddleware(newGuard(b, s))
			n.Reset()
			b.ResetTimer()
			elapsed := consumeStream(b, br, in, out, b.N, mw)
			b.StopTimer()
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
			b.ReportMetric(float64(n.Total())/float64(b.N), "store-trips/msg")
		})
		b.Run("guarded/"+bs.name+"/redelivery", func(b *testing.B) {
			br := redisBroker(b)
			s, n := bs.open(b)
			mw := watermillguard.MustMiddleware(newGuard(b, s))
			first, again, out := br.topic("orders"), br.topic("orders.again"), br.topic("shipments")
			ids := publishN(b, br, first, b.N, nil)
			consumeStream(b, br, first, out, b.N, mw)
			publishN(b, br, again, b.N, ids)
			n.Reset()
			b.ResetTimer()
			elapsed := consumeStream(b, br, again, out, b.N, mw)
			b.StopTimer()
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
			b.ReportMetric(float64(n.Total())/float64(b.N), "store-trips/msg")
		})
	}
}

// The round trips of BenchmarkRouter, held: through a router on Redis
// Streams, a first delivery costs 2 round trips to the store, and a
// redelivery of a handled message 1.
func TestRouterRoundTrips(t *testing.T) {
	const msgs = 50
	for _, bs := range benchStores {
		t.Run(bs.name, func(t *testing.T) {
			br := redisBroker(t)
			s, n := bs.open(t)
			mw := watermillguard.MustMiddleware(newGuard(t, s))
			first, again, out := br.topic("orders"), br.topic("orders.again"), br.topic("shipments")
			ids := publishN(t, br, first, msgs, nil)
			n.Reset()
			consumeStream(t, br, first, out, msgs, mw)
			if got := n.Total(); got != 2*msgs {
				t.Errorf("first deliveries: %d round trips for %d messages (%s), want 2 each", got, msgs, n)
			}
			publishN(t, br, again, msgs, ids)
			n.Reset()
			consumeStream(t, br, again, out, msgs, mw)
			if got := n.Total(); got != msgs {
				t.Errorf("redeliveries: %d round trips for %d messages (%s), want 1 each", got, msgs, n)
			}
		})
	}
}
