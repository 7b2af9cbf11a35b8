package watermillguard_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	goredis "github.com/redis/go-redis/v9"

	"github.com/idemguard/idemguard/internal/testing/redistest"
)

// broker is a Watermill Pub/Sub for the tests: Redis Streams on the
// harness's redis-server (a real broker: consumer groups, acks, claims of
// a dead consumer's pending messages), or the in-process gochannel.
type broker struct {
	name string
	// pub publishes to the broker.
	pub message.Publisher
	// sub returns a new subscriber (a consumer of group, on Redis).
	sub func(t testing.TB, group string) message.Subscriber
	// topic names a topic of this test's own.
	topic func(name string) string
	// published returns what topic holds (on Redis, read from the stream).
	published func(t testing.TB, topic string) []*message.Message
	// pending returns how many deliveries of topic to group are not
	// acknowledged (Redis; -1 on gochannel, which does not say).
	pending func(t testing.TB, topic, group string) int
}

// eachBroker runs test on Redis Streams and on gochannel.
func eachBroker(t *testing.T, test func(t *testing.T, b *broker)) {
	t.Run("redisstream", func(t *testing.T) { test(t, redisBroker(t)) })
	t.Run("gochannel", func(t *testing.T) { test(t, gochannelBroker(t)) })
}

// redisClient returns a client of the harness's redis-server; every
// Watermill subscriber and publisher needs one of its own (Close closes
// it).
func redisClient(t testing.TB) *goredis.Client {
	return redistest.NewClient(t)
}

// redisBroker is Redis Streams under stream names of this test's own,
// deleted when it ends. Its consumers take over a dead consumer's pending
// messages after half a second, and redeliver a nacked one after 10 ms.
func redisBroker(t testing.TB) *broker {
	prefix := strings.TrimSuffix(redistest.Prefix(t), ":")
	admin := redisClient(t)
	pub, err := redisstream.NewPublisher(redisstream.PublisherConfig{Client: redisClient(t)}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		pub.Close()
		redistest.DeletePrefix(t, admin, prefix)
	})
	return &broker{
		name:  "redisstream",
		pub:   pub,
		topic: func(name string) string { return prefix + "." + name },
		sub: func(t testing.TB, group string) message.Subscriber {
			return redisSubscriber(t, redisClient(t), group, watermill.NewShortUUID())
		},
		published: func(t testing.TB, topic string) []*message.Message {
			return readStream(t, admin, topic)
		},
		pending: func(t testing.TB, topic, group string) int {
			p, err := admin.XPending(context.Background(), topic, group).Result()
			if err != nil {
				t.Fatalf("XPENDING %s %s: %v", topic, group, err)
			}
			return int(p.Count)
		},
	}
}

// redisSubscriber is a Redis Streams consumer as the tests configure it.
func redisSubscriber(t testing.TB, client goredis.UniversalClient, group, consumer string) message.Subscriber {
	sub, err := redisstream.NewSubscriber(redisstream.SubscriberConfig{
		Client:                        client,
		ConsumerGroup:                 group,
		Consumer:                      consumer,
		NackResendSleep:               10 * time.Millisecond,
		BlockTime:                     50 * time.Millisecond,
		ClaimInterval:                 200 * time.Millisecond,
		MaxIdleTime:                   500 * time.Millisecond,
		DisableIndefiniteInitialBlock: true,
	}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Close() })
	return sub
}

// readStream returns the messages in a Redis stream, oldest first.
func readStream(t testing.TB, client goredis.UniversalClient, stream string) []*message.Message {
	t.Helper()
	entries, err := client.XRange(context.Background(), stream, "-", "+").Result()
	if err != nil {
		t.Fatalf("XRANGE %s: %v", stream, err)
	}
	out := make([]*message.Message, len(entries))
	for i, e := range entries {
		if out[i], err = (redisstream.DefaultMarshallerUnmarshaller{}).Unmarshal(e.Values); err != nil {
			t.Fatalf("entry %s of %s: %v", e.ID, stream, err)
		}
	}
	return out
}

// gochannelBroker is a persistent gochannel, whose publisher is tapped to
// know what each topic holds.
func gochannelBroker(t *testing.T) *broker {
	ch := gochannel.NewGoChannel(gochannel.Config{Persistent: true, OutputChannelBuffer: 1024}, watermill.NopLogger{})
	t.Cleanup(func() { ch.Close() })
	tap := &tapPublisher{Publisher: ch, topics: map[string][]*message.Message{}}
	return &broker{
		name:  "gochannel",
		pub:   tap,
		topic: func(name string) string { return name },
		sub:   func(testing.TB, string) message.Subscriber { return ch },
		published: func(_ testing.TB, topic string) []*message.Message {
			tap.mu.Lock()
			defer tap.mu.Unlock()
			return append([]*message.Message(nil), tap.topics[topic]...)
		},
		pending: func(testing.TB, string, string) int { return -1 },
	}
}

// tapPublisher records copies of what it publishes.
type tapPublisher struct {
	message.Publisher
	mu     sync.Mutex
	topics map[string][]*message.Message // protected by mu
}

func (p *tapPublisher) Publish(topic string, msgs ...*message.Message) error {
	p.mu.Lock()
	for _, m := range msgs {
		p.topics[topic] = append(p.topics[topic], m.Copy())
	}
	p.mu.Unlock()
	return p.Publisher.Publish(topic, msgs...)
}

// runRouter runs r until the test ends.
func runRouter(t *testing.T, r *message.Router) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("router: %v", err)
		}
	})
	select {
	case <-r.Running():
	case <-time.After(10 * time.Second):
		t.Fatal("the router did not start within 10 s")
	}
}

// eventually polls cond every 10 ms for up to 60 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 60 s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// counts is a concurrency-safe count per message UUID.
type counts struct {
	mu sync.Mutex
	n  map[string]int // protected by mu
}

func (c *counts) add(uuid string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[uuid]++
}

func (c *counts) get(uuid string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[uuid]
}

// counting is middleware that counts the deliveries of each message.
func (c *counts) counting(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		c.add(msg.UUID)
		return h(msg)
	}
}

// returned is middleware that counts the deliveries of each message whose
// handling by the middleware and handler inside it has returned.
func (c *counts) returned(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		defer c.add(msg.UUID)
		return h(msg)
	}
}

// keepOpen is pub for a router, which closes its handlers' publisher when
// it stops, while middleware (a poison queue) may still publish with it:
// the broker's publisher stays open until the test ends.
func keepOpen(pub message.Publisher) message.Publisher { return publisherFunc(pub.Publish) }
