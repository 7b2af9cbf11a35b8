package watermillguard_test

import (
	"errors"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"

	"github.com/idemguard/idemguard/internal/testing/redistest"
	"github.com/idemguard/idemguard/watermillguard"
)

// dedupMessages is how many messages each scenario sends.
const dedupMessages = 20

// deduplicators are the two middlewares compared: each call makes the one
// a new consumer process would have. Watermill's keeps the keys it has
// seen in that process's memory (keyed here by UUID, as idemguard's);
// idemguard's keeps records in a store the processes share, Redis here.
func deduplicators(t *testing.T) map[string]func() message.HandlerMiddleware {
	s := redistest.NewStore(t, redisClient(t))
	return map[string]func() message.HandlerMiddleware{
		"watermill": func() message.HandlerMiddleware {
			d := &middleware.Deduplicator{KeyFactory: func(m *message.Message) (string, error) { return m.UUID, nil }}
			return d.Middleware
		},
		"idemguard": func() message.HandlerMiddleware { return watermillguard.MustMiddleware(newGuard(t, s)) },
	}
}

// consume runs a consumer of group on topic with mw in front of handler
// until it has had at least want deliveries and every delivery of the
// topic has been acknowledged.
func consume(t *testing.T, b *broker, topic, group string, want int, mw message.HandlerMiddleware, handler message.NoPublishHandlerFunc) {
	t.Helper()
	r, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	var deliveries counts
	r.AddMiddleware(deliveries.counting, mw)
	r.AddConsumerHandler("ship", topic, b.sub(t, group), handler)
	// A subtest, so that the router stops when it ends.
	t.Run("consumer", func(t *testing.T) {
		runRouter(t, r)
		eventually(t, "every message delivered and acknowledged", func() bool {
			deliveries.mu.Lock()
			got := 0
			for _, n := range deliveries.n {
				got += n
			}
			deliveries.mu.Unlock()
			return got >= want && b.pending(t, topic, group) == 0
		})
	})
}

// Acceptance: a handler that fails once, after Watermill's deduplicator
// marked its message, loses the message — the redelivery is dropped as a
// duplicate — while idemguard, which records a message only once its
// handler succeeded, handles the redelivery. And a consumer restarted (or
// another one of the group) handles a publisher's duplicate again under
// Watermill's in-memory deduplicator, once under idemguard's.
func TestDeduplicatorComparison(t *testing.T) {
	b := redisBroker(t)
	results := map[string]map[string]int{}
	for name, newMiddleware := range deduplicators(t) {
		results[name] = map[string]int{}
		t.Run(name, func(t *testing.T) {
			t.Run("fails once", func(t *testing.T) {
				topic := b.topic(name + ".fails-once")
				var attempts, effects counts
				var ids []string
				for range dedupMessages {
					m := message.NewMessage(watermill.NewUUID(), []byte(`{}`))
					ids = append(ids, m.UUID)
					if err := b.pub.Publish(topic, m); err != nil {
						t.Fatal(err)
					}
				}
				consume(t, b, topic, "shipping", 2*dedupMessages, newMiddleware(), func(msg *message.Message) error {
					attempts.add(msg.UUID)
					if attempts.get(msg.UUID) == 1 {
						return errors.New("inventory service unavailable")
					}
					effects.add(msg.UUID)
					return nil
				})
				for _, id := range ids {
					results[name]["fails once: handled"] += effects.get(id)
				}
			})
			t.Run("restarted consumer", func(t *testing.T) {
				topic := b.topic(name + ".restart")
				var effects counts
				handler := func(msg *message.Message) error {
					effects.add(msg.UUID)
					return nil
				}
				var msgs []*message.Message
				for range dedupMessages {
					msgs = append(msgs, message.NewMessage(watermill.NewUUID(), []byte(`{}`)))
				}
				if err := b.pub.Publish(topic, msgs...); err != nil {
					t.Fatal(err)
				}
				consume(t, b, topic, "shipping", dedupMessages, newMiddleware(), handler)
				// The publisher did not see its acknowledgements and sends
				// everything again; a new consumer process handles it.
				for _, m := range msgs {
					if err := b.pub.Publish(topic, m.Copy()); err != nil {
						t.Fatal(err)
					}
				}
				consume(t, b, topic, "shipping", dedupMessages, newMiddleware(), handler)
				for _, m := range msgs {
					results[name]["restart: effects"] += effects.get(m.UUID)
				}
			})
		})
	}
	t.Logf("%d messages each: %v", dedupMessages, results)
	if got := results["watermill"]["fails once: handled"]; got != 0 {
		t.Errorf("Watermill's deduplicator handled %d of %d messages that failed once; this test expects it to lose them all", got, dedupMessages)
	}
	if got := results["idemguard"]["fails once: handled"]; got != dedupMessages {
		t.Errorf("idemguard handled %d of %d messages that failed once, want all", got, dedupMessages)
	}
	if got := results["watermill"]["restart: effects"]; got != 2*dedupMessages {
		t.Errorf("Watermill's deduplicator: %d effects of %d messages sent twice across a restart; this test expects %d", got, dedupMessages, 2*dedupMessages)
	}
	if got := results["idemguard"]["restart: effects"]; got != dedupMessages {
		t.Errorf("idemguard: %d effects of %d messages sent twice across a restart, want %d", got, dedupMessages, dedupMessages)
	}
}
