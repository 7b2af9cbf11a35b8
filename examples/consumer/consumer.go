package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	goredis "github.com/redis/go-redis/v9"

	"github.com/idemguard/idemguard/guard"
	idemredis "github.com/idemguard/idemguard/store/redis"
	"github.com/idemguard/idemguard/watermillguard"
)

// consumerEnv holds a consumer process's configuration; its presence makes
// the process a consumer.
const consumerEnv = "CONSUMER_WORKER"

// Where a consumer stops, announces "KILLME <point> <order>" on stdout and
// waits for the driver's SIGKILL.
const (
	// killMidHandler: in the handler, after the "reserve" step reserved
	// the order's stock and before the "charge" step charges its card.
	killMidHandler = "mid-handler"
	// killBeforeAck: the order's outcome is recorded and its confirmation
	// published; the order is not acknowledged.
	killBeforeAck = "before-ack"
)

// consumerConfig is what the driver hands a consumer process.
type consumerConfig struct {
	Addr   string        `json:"addr"`
	Names  names         `json:"names"`
	Name   string        `json:"name"`
	Kill   string        `json:"kill,omitempty"` // a kill point, or none
	KillAt int           `json:"kill_at"`        // in the handler's n-th run
	Lease  time.Duration `json:"lease"`          // the guard's lease
	Skew   time.Duration `json:"skew"`           // the guard's clock-skew tolerance
	Idle   time.Duration `json:"idle"`           // after this, another consumer claims a pending order
}

// names are the run's Redis keys, all under one prefix.
type names struct {
	Prefix        string `json:"prefix"`        // "idemguard-consumer-<hex>:"
	Orders        string `json:"orders"`        // stream of order.placed
	Confirmations string `json:"confirmations"` // stream of order.confirmed
	Stock         string `json:"stock"`         // hash: order -> stock reservations
	Charges       string `json:"charges"`       // hash: order -> card charges
	Emails        string `json:"emails"`        // hash: order -> e-mails sent
}

func newNames(prefix string) names {
	return names{Prefix: prefix, Orders: prefix + "orders", Confirmations: prefix + "confirmations",
		Stock: prefix + "stock", Charges: prefix + "charges", Emails: prefix + "emails"}
}

// Order is an order.placed event's payload.
type Order struct {
	ID    string `json:"id"`
	SKU   string `json:"sku"`
	Cents int    `json:"cents"`
}

// consumerMain is a consumer process: it fulfils orders until its stdin
// closes.
func consumerMain(raw string) int {
	var cfg consumerConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "consumer: bad configuration:", err)
		return 2
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { // the driver closes stdin to stop it
		io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	if err := consume(ctx, cfg); err != nil {
		fmt.Fprintf(os.Stderr, "consumer %s: %v\n", cfg.Name, err)
		return 1
	}
	return 0
}

// consume runs the fulfilment handler: for each order, reserve its stock
// and charge its card, each a guarded step, then publish order.confirmed.
func consume(ctx context.Context, cfg consumerConfig) error {
	client := func() *goredis.Client { return goredis.NewClient(&goredis.Options{Addr: cfg.Addr}) }
	effects := client() // the stock and payment systems, standing in
	defer effects.Close()
	s, err := idemredis.New(client(), idemredis.WithPrefix(cfg.Names.Prefix+"idem:"))
	if err != nil {
		return err
	}
	g, err := guard.New(s, guard.WithClockSkew(cfg.Skew))
	if err != nil {
		return err
	}
	// The broker settings of docs/consumers.md, scaled to this run's short
	// lease: a pending order goes to another consumer once it has been
	// idle for a lease (MaxIdleTime), looked for four times a lease. A
	// consumer that gets an order another one holds waits for it in the
	// handler (the middleware's default), until the holder's lease can
	// have lapsed.
	sub, err := redisstream.NewSubscriber(redisstream.SubscriberConfig{
		Client: client(), ConsumerGroup: "fulfilment", Consumer: cfg.Name,
		NackResendSleep: 50 * time.Millisecond, BlockTime: 50 * time.Millisecond, DisableIndefiniteInitialBlock: true,
		ClaimInterval: cfg.Idle / 4, MaxIdleTime: cfg.Idle,
	}, watermill.NopLogger{})
	if err != nil {
		return err
	}
	pub, err := redisstream.NewPublisher(redisstream.PublisherConfig{Client: client()}, watermill.NopLogger{})
	if err != nil {
		return err
	}
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, watermill.NopLogger{})
	if err != nil {
		return err
	}
	poison, err := middleware.PoisonQueueWithFilter(pub, cfg.Names.Prefix+"orders.poison", watermillguard.IsPermanent)
	if err != nil {
		return err
	}
	router.AddMiddleware(
		stopBeforeAck,
		poison,
		watermillguard.MustMiddleware(g, watermillguard.WithGuardOptions(guard.WithLease(cfg.Lease))),
		middleware.Timeout(30*time.Second),
	)

	var runs atomic.Int64
	stop := func(point, order string) {
		fmt.Printf("KILLME %s %s\n", point, order)
		select {} // until SIGKILL
	}
	// The router publishes a handler's messages, then acknowledges the
	// message: the confirmation of the run that stops before its ack is
	// published, then the consumer stops.
	confirmations := publisher(func(topic string, msgs ...*message.Message) error {
		var stopping *message.Message
		for _, m := range msgs {
			if m.Metadata.Get(stopMark) != "" {
				delete(m.Metadata, stopMark)
				stopping = m
			}
		}
		if err := pub.Publish(topic, msgs...); err != nil {
			return err
		}
		if stopping != nil {
			stop(killBeforeAck, stopping.Metadata.Get("order"))
		}
		return nil
	})
	router.AddHandler("fulfil", cfg.Names.Orders, sub, cfg.Names.Confirmations, confirmations, func(msg *message.Message) ([]*message.Message, error) {
		var o Order
		if err := json.Unmarshal(msg.Payload, &o); err != nil {
			return nil, guard.Definite(fmt.Errorf("order.placed %s: %w", msg.UUID, err))
		}
		run := int(runs.Add(1))
		ctx := msg.Context()
		if _, err := guard.Step(ctx, "reserve", func(ctx context.Context) (int64, error) {
			return effects.HIncrBy(ctx, cfg.Names.Stock, o.ID, 1).Result()
		}); err != nil {
			return nil, err
		}
		if cfg.Kill == killMidHandler && run == cfg.KillAt {
			stop(killMidHandler, o.ID)
		}
		if _, err := guard.Step(ctx, "charge", func(ctx context.Context) (int64, error) {
			return effects.HIncrBy(ctx, cfg.Names.Charges, o.ID, 1).Result()
		}); err != nil {
			return nil, err
		}
		confirmed := message.NewMessage(watermill.NewUUID(), []byte(fmt.Sprintf(`{"order":%q,"cents":%d}`, o.ID, o.Cents)))
		confirmed.Metadata.Set("order", o.ID)
		if cfg.Kill == killBeforeAck && run == cfg.KillAt {
			msg.Metadata.Set(stopMark, "1") // for stopBeforeAck
		}
		return []*message.Message{confirmed}, nil
	})
	go func() {
		<-router.Running() // subscribed
		fmt.Println("READY")
	}()
	return router.Run(ctx)
}

// stopMark marks the order whose run stops before its ack, and then that
// run's confirmation, on its way to the publisher.
const stopMark = "example-stop-before-ack"

// stopBeforeAck is middleware outside the guard: once the guard has stored
// the confirmations of the run that stops before its ack, it marks them,
// so that replays publish them unmarked.
func stopBeforeAck(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		out, err := h(msg)
		if err == nil && msg.Metadata.Get(stopMark) != "" {
			for _, m := range out {
				m.Metadata.Set(stopMark, "1")
			}
		}
		return out, err
	}
}

// publisher is a message.Publisher made of a function; the router closes
// it when it stops.
type publisher func(topic string, msgs ...*message.Message) error

func (f publisher) Publish(topic string, msgs ...*message.Message) error { return f(topic, msgs...) }
func (publisher) Close() error                                           { return nil }
