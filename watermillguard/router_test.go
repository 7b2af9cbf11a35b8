package watermillguard_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/store/memory"
	"github.com/idemguard/idemguard/watermillguard"
)

// orderHandler is a handler whose behaviour each message's "kind"
// metadata picks: "ok" succeeds, "flaky" fails its first attempt, and
// "declined" fails with a definite error. Each success or definite
// failure is an effect, counted by message UUID.
type orderHandler struct {
	effects  counts
	attempts counts
}

func (h *orderHandler) handle(msg *message.Message) ([]*message.Message, error) {
	h.attempts.add(msg.UUID)
	switch msg.Metadata.Get("kind") {
	case "flaky":
		if h.attempts.get(msg.UUID) == 1 {
			return nil, errors.New("inventory service unavailable")
		}
	case "declined":
		h.effects.add(msg.UUID)
		return nil, guard.Definite(errors.New("card declined"))
	}
	if _, ok := msg.Context().Deadline(); !ok {
		return nil, errors.New("the handler's context has no deadline: Timeout is not outside the handler")
	}
	h.effects.add(msg.UUID)
	out := message.NewMessage(watermill.NewUUID(), []byte(`{"shipped":true}`))
	out.Metadata.Set("order", msg.UUID)
	return []*message.Message{out}, nil
}

func orderMessage(kind, payload string) *message.Message {
	m := message.NewMessage(watermill.NewUUID(), []byte(payload))
	m.Metadata.Set("kind", kind)
	return m
}

func uuids(msgs []*message.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.UUID
	}
	return out
}

// The recommended order — the poison queue, the guard, then retry and
// timeout — on a real broker: a publisher's duplicate is processed once and its
// produced message published again with the same UUID; a transient
// failure is retried; a definite failure and a payload that cannot be
// validated go to the poison topic; every delivery is acknowledged.
func TestRecommendedOrder(t *testing.T) {
	eachBroker(t, func(t *testing.T, b *broker) {
		in, out, poison := b.topic("orders"), b.topic("shipments"), b.topic("orders.poison")
		const group = "shipping"
		g := newGuard(t, memory.New())
		pq, err := middleware.PoisonQueueWithFilter(b.pub, poison, watermillguard.IsPermanent)
		if err != nil {
			t.Fatal(err)
		}
		r, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, watermill.NopLogger{})
		if err != nil {
			t.Fatal(err)
		}
		var deliveries counts
		r.AddMiddleware(
			deliveries.counting,
			pq,
			watermillguard.MustMiddleware(g, watermillguard.WithGuardOptions(guard.WithPayloadValidation("order_id"))),
			middleware.Retry{
				MaxRetries: 3, InitialInterval: 5 * time.Millisecond, MaxInterval: 20 * time.Millisecond, Multiplier: 2,
				ShouldRetry:         func(p middleware.RetryParams) bool { return !guard.IsDefinite(p.Err) },
				ResetContextOnRetry: true,
			}.Middleware,
			middleware.Timeout(10*time.Second),
		)
		h := &orderHandler{}
		r.AddHandler("ship", in, b.sub(t, group), out, keepOpen(b.pub), h.handle)
		runRouter(t, r)

		ok, flaky := orderMessage("ok", `{"order_id":"o-1"}`), orderMessage("flaky", `{"order_id":"o-2"}`)
		declined, bad := orderMessage("declined", `{"order_id":"o-3"}`), orderMessage("ok", `order_id=o-4`)
		// The duplicate comes once the first delivery is handled: a
		// duplicate delivered while it runs waits for it and shares its run
		// (TestConcurrentDeliveriesShareOneRun), so this test would not see
		// the replay.
		if err := b.pub.Publish(in, ok); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the first delivery handled", func() bool { return len(b.published(t, out)) == 1 })
		for _, m := range []*message.Message{ok.Copy(), flaky, declined, bad} {
			if err := b.pub.Publish(in, m); err != nil {
				t.Fatal(err)
			}
		}
		eventually(t, "every delivery handled", func() bool {
			return deliveries.get(ok.UUID) == 2 && len(b.published(t, poison)) == 2 && len(b.published(t, out)) == 3
		})
		time.Sleep(100 * time.Millisecond) // would a nacked delivery come back?

		for _, m := range []*message.Message{ok, flaky, declined} {
			if n := h.effects.get(m.UUID); n != 1 {
				t.Errorf("%s: %d effects, want 1", m.Metadata.Get("kind"), n)
			}
		}
		if n := h.attempts.get(flaky.UUID); n != 2 {
			t.Errorf("the flaky message was attempted %d times, want 2 (one retry)", n)
		}
		if n := h.effects.get(bad.UUID) + h.attempts.get(bad.UUID); n != 0 {
			t.Errorf("the message whose payload is not JSON reached the handler %d times", n)
		}
		for _, m := range []*message.Message{ok, flaky, declined, bad} {
			want := 1
			if m == ok {
				want = 2
			}
			if n := deliveries.get(m.UUID); n != want {
				t.Errorf("%s (%s): delivered %d times, want %d", m.Metadata.Get("kind"), m.Payload, n, want)
			}
		}
		byOrder := map[string][]string{}
		for _, m := range b.published(t, out) {
			byOrder[m.Metadata.Get("order")] = append(byOrder[m.Metadata.Get("order")], m.UUID)
		}
		if s := byOrder[ok.UUID]; len(s) != 2 || s[0] != s[1] {
			t.Errorf("shipments of the duplicated order: %v; want one published twice under the same UUID", s)
		}
		if s := byOrder[flaky.UUID]; len(s) != 1 {
			t.Errorf("shipments of the flaky order: %v; want one", s)
		}
		poisoned := b.published(t, poison)
		if got := uuids(poisoned); !slices.Contains(got, declined.UUID) || !slices.Contains(got, bad.UUID) {
			t.Errorf("poison topic holds %v, want %s (declined) and %s (not JSON)", got, declined.UUID, bad.UUID)
		}
		for _, p := range poisoned {
			if p.Metadata.Get(middleware.ReasonForPoisonedKey) == "" {
				t.Errorf("poisoned %s has no reason", p.UUID)
			}
		}
		if p := b.pending(t, in, group); p > 0 {
			t.Errorf("%d deliveries not acknowledged", p)
		}
	})
}

// A bad order: the poison queue inside the guard. The handler's transient
// failure never reaches the guard, which records the message as handled
// (it is lost to the poison topic although a retry would have succeeded),
// and the guard's own permanent error never reaches the poison queue, so
// the broker redelivers the message again and again.
func TestPoisonQueueInsideTheGuard(t *testing.T) {
	eachBroker(t, func(t *testing.T, b *broker) {
		in, out, poison := b.topic("orders"), b.topic("shipments"), b.topic("orders.poison")
		const group = "shipping"
		g := newGuard(t, memory.New())
		pq, err := middleware.PoisonQueue(b.pub, poison)
		if err != nil {
			t.Fatal(err)
		}
		r, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, watermill.NopLogger{})
		if err != nil {
			t.Fatal(err)
		}
		var deliveries, handled counts
		r.AddMiddleware(
			deliveries.counting,
			handled.returned,
			middleware.Timeout(10*time.Second),
			watermillguard.MustMiddleware(g, watermillguard.WithGuardOptions(guard.WithPayloadValidation("order_id"))),
			pq,
		)
		h := &orderHandler{}
		r.AddHandler("ship", in, b.sub(t, group), out, keepOpen(b.pub), h.handle)
		runRouter(t, r)

		flaky, bad := orderMessage("flaky", `{"order_id":"o-2"}`), orderMessage("ok", `order_id=o-4`)
		// The duplicate comes once the first delivery is handled, as in
		// TestRecommendedOrder: one delivered while the first runs is nacked
		// as in progress and redelivered any number of times.
		if err := b.pub.Publish(in, flaky); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the flaky message handled", func() bool { return handled.get(flaky.UUID) == 1 })
		for _, m := range []*message.Message{flaky.Copy(), bad} {
			if err := b.pub.Publish(in, m); err != nil {
				t.Fatal(err)
			}
		}
		eventually(t, "the unkeyable message redelivered", func() bool {
			return deliveries.get(bad.UUID) >= 5 && deliveries.get(flaky.UUID) >= 2
		})
		if n := deliveries.get(flaky.UUID); n != 2 {
			t.Errorf("the flaky message was delivered %d times, want 2 (its duplicate replayed and acknowledged)", n)
		}
		if n := h.effects.get(flaky.UUID); n != 0 {
			t.Errorf("the flaky message had %d effects; this order was expected to lose it", n)
		}
		if n := h.attempts.get(flaky.UUID); n != 1 {
			t.Errorf("the flaky message was attempted %d times: the guard did not record the poison queue's swallowed failure as handled", n)
		}
		got := uuids(b.published(t, poison))
		if !slices.Contains(got, flaky.UUID) || slices.Contains(got, bad.UUID) {
			t.Errorf("poison topic holds %v: want the flaky message (%s), not the unkeyable one (%s)", got, flaky.UUID, bad.UUID)
		}
	})
}

// Another bad order, on a broker whose publisher publishes with the
// message's context (Redis Streams, SQL): Watermill's Timeout between the
// poison queue and the guard. Timeout leaves the message holding its
// context, cancelled once the handler returned, so the poison queue's
// publish fails and the router nacks the message, again and again. Inside
// the guard, Timeout's context is the guard's to undo: the guard hands the
// message back with the context it came with.
func TestTimeoutBetweenPoisonQueueAndGuard(t *testing.T) {
	b := redisBroker(t)
	in, out, poison := b.topic("orders"), b.topic("shipments"), b.topic("orders.poison")
	g := newGuard(t, memory.New())
	pq, err := middleware.PoisonQueueWithFilter(b.pub, poison, watermillguard.IsPermanent)
	if err != nil {
		t.Fatal(err)
	}
	r, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	var deliveries counts
	r.AddMiddleware(deliveries.counting, pq, middleware.Timeout(10*time.Second), watermillguard.MustMiddleware(g))
	h := &orderHandler{}
	r.AddHandler("ship", in, b.sub(t, "shipping"), out, keepOpen(b.pub), h.handle)
	runRouter(t, r)

	declined := orderMessage("declined", `{}`)
	if err := b.pub.Publish(in, declined); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the declined order redelivered", func() bool { return deliveries.get(declined.UUID) >= 5 })
	if n := len(b.published(t, poison)); n != 0 {
		t.Errorf("the poison topic holds %d messages; this order was expected to fail to publish there", n)
	}
	if n := h.effects.get(declined.UUID); n != 1 {
		t.Errorf("the declined order had %d effects, want 1 (its redeliveries replay the recorded error)", n)
	}
}
