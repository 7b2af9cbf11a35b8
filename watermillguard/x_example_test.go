package watermillguard_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/store/memory"
	"github.com/idemguard/idemguard/watermillguard"
)

// A publisher's retry delivers an order twice; the guarded handler charges
// it once. The memory store stands in for a shared one (DynamoDB, Redis,
// PostgreSQL), which the consumer processes of a group share.
func Example() {
	g, err := guard.New(memory.New())
	if err != nil {
		panic(err)
	}
	pubSub := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		panic(err)
	}
	var handled sync.WaitGroup // for this example: stop once both deliveries are acked
	handled.Add(2)
	router.AddMiddleware(func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			out, err := h(msg)
			if err == nil {
				handled.Done()
			}
			return out, err
		}
	})
	router.AddMiddleware(watermillguard.MustMiddleware(g))
	router.AddConsumerHandler("charge", "orders", pubSub, func(msg *message.Message) error {
		fmt.Printf("charging order %s\n", msg.Payload)
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	go router.Run(ctx)
	<-router.Running()

	order := message.NewMessage(watermill.NewUUID(), []byte("o-1001"))
	pubSub.Publish("orders", order)
	pubSub.Publish("orders", order.Copy()) // the publisher's retry: same UUID
	handled.Wait()
	cancel()
	router.Close()
	// Output: charging order o-1001
}

// The middleware in a router with Watermill's poison queue, retry and
// timeout middlewares, in an order that works: the poison queue outside
// the guard takes the messages that redelivery cannot help
// (watermillguard.IsPermanent), and acknowledges them.
func Example_middlewareOrder() {
	g, err := guard.New(memory.New())
	if err != nil {
		panic(err)
	}
	pubSub := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		panic(err)
	}
	poisonQueue, err := middleware.PoisonQueueWithFilter(pubSub, "orders.poison", watermillguard.IsPermanent)
	if err != nil {
		panic(err)
	}
	router.AddMiddleware(
		poisonQueue,
		watermillguard.MustMiddleware(g,
			watermillguard.WithKeyFromMetadata("event_id"),
			watermillguard.WithGuardOptions(guard.WithPayloadValidation("@")),
		),
		middleware.Retry{
			MaxRetries: 3, InitialInterval: 100 * time.Millisecond, Multiplier: 2,
			ShouldRetry:         func(p middleware.RetryParams) bool { return !guard.IsDefinite(p.Err) },
			ResetContextOnRetry: true,
		}.Middleware,
		middleware.Timeout(time.Minute),
	)
	router.AddHandler("ship", "orders", pubSub, "shipments", pubSub, func(msg *message.Message) ([]*message.Message, error) {
		// The handler's context is the guarded call's: guard.Step guards
		// each of its side effects, guard.KeyFromContext is the key to
		// hand to a payment provider.
		if _, err := guard.Step(msg.Context(), "charge", func(ctx context.Context) (string, error) {
			key, _ := guard.KeyFromContext(ctx)
			return "charged under " + key, nil
		}); err != nil {
			return nil, err
		}
		// Published after the outcome is recorded; a redelivery publishes
		// the same message again, with the same UUID.
		return []*message.Message{message.NewMessage(watermill.NewUUID(), msg.Payload)}, nil
	})
	_ = router // router.Run(ctx)
}
