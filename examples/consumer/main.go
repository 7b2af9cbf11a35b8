// Command consumer fulfils order events from Redis Streams with Watermill
// consumers guarded by watermillguard, while consumer processes are
// SIGKILLed mid-handler and redelivered, and prints what ran once.
//
// The driver publishes order.placed events (every fourth twice, as a
// publisher that retries does) and starts consumer processes (this program
// again) in one consumer group. For each order, the handler reserves stock
// and charges a card, each a guard.Step, and produces an order.confirmed
// event; a downstream consumer in the driver sends one e-mail per
// confirmation, guarded the same way. The driver SIGKILLs one consumer in
// a handler, after the stock was reserved and before the card was charged,
// and another after it published an order's confirmation and before it
// acknowledged the order, and starts replacements; the orders they held
// are claimed by the other consumers and redelivered. At the end it checks
// that every order's stock was reserved, its card charged and its e-mail
// sent exactly once.
//
//	scripts/harness.sh run go run ./examples/consumer     # a throwaway redis-server
//	IDEMGUARD_REDIS_ADDR=127.0.0.1:6379 go run ./examples/consumer
//
// Without IDEMGUARD_REDIS_ADDR it says how to run it and exits with status
// 2, starting nothing. Its streams and records live under a fresh key
// prefix, deleted at the end.
package main

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	goredis "github.com/redis/go-redis/v9"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/store"
	idemredis "github.com/idemguard/idemguard/store/redis"
	"github.com/idemguard/idemguard/watermillguard"
)

// AddrEnv names the Redis server; scripts/harness.sh sets it.
const AddrEnv = "IDEMGUARD_REDIS_ADDR"

// Config is one run.
type Config struct {
	Addr      string
	Orders    int // distinct orders; every fourth is published twice
	Consumers int // consumer processes at a time
	// Lease is the guard's lease, Skew its clock-skew tolerance, and Idle
	// how long an order stays with a consumer that does not acknowledge
	// it before another consumer claims it.
	Lease, Skew, Idle time.Duration
	// Command starts a consumer process: this program, by default.
	Command []string
}

// DefaultConfig is what `go run ./examples/consumer` runs.
func DefaultConfig() Config {
	return Config{
		Addr: os.Getenv(AddrEnv), Orders: 200, Consumers: 2,
		Lease: time.Second, Skew: 200 * time.Millisecond, Idle: time.Second,
	}
}

func main() {
	if raw := os.Getenv(consumerEnv); raw != "" {
		os.Exit(consumerMain(raw))
	}
	cfg := DefaultConfig()
	flag.IntVar(&cfg.Orders, "orders", cfg.Orders, "distinct orders (every fourth is published twice; at least 40)")
	flag.IntVar(&cfg.Consumers, "consumers", cfg.Consumers, "consumer processes (at least 2)")
	flag.Parse()
	if cfg.Orders < 40 || cfg.Consumers < 2 {
		fmt.Fprintln(os.Stderr, "consumer: need at least 40 orders and 2 consumers")
		os.Exit(2)
	}
	if cfg.Addr == "" {
		fmt.Fprintf(os.Stderr, `consumer: no broker: set %s to the host:port of a Redis server (5.0 or later) where this example may create streams, e.g.
	%s=127.0.0.1:6379 go run ./examples/consumer
or let the repository's harness start a throwaway server:
	scripts/harness.sh run go run ./examples/consumer
`, AddrEnv, AddrEnv)
		os.Exit(2)
	}
	ok, err := Run(context.Background(), os.Stdout, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "consumer:", err)
		os.Exit(1)
	}
	if !ok {
		os.Exit(1)
	}
}

// Run runs the example and writes its report to out; ok is false when an
// order's effects did not happen exactly once.
func Run(ctx context.Context, out io.Writer, cfg Config) (ok bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	var b [4]byte
	for i := range b {
		b[i] = byte(rand.Uint32())
	}
	n := newNames("idemguard-consumer-" + hex.EncodeToString(b[:]) + ":")
	admin := goredis.NewClient(&goredis.Options{Addr: cfg.Addr})
	defer admin.Close()
	if err := admin.Ping(ctx).Err(); err != nil {
		return false, fmt.Errorf("Redis at %s: %w", cfg.Addr, err)
	}
	defer deletePrefix(context.WithoutCancel(ctx), admin, n.Prefix)
	fmt.Fprintf(out, "broker and store: Redis at %s (%s), streams and records under %q\n", cfg.Addr, AddrEnv, n.Prefix)

	// The orders: every fourth published twice, the two copies a few
	// places apart, so that one often arrives while another consumer
	// handles the other.
	var placed []*message.Message
	for i := range cfg.Orders {
		o := Order{ID: fmt.Sprintf("o-%04d", i), SKU: fmt.Sprintf("sku-%d", i%7), Cents: 500 + 25*i}
		payload, _ := json.Marshal(o)
		m := message.NewMessage(watermill.NewUUID(), payload)
		placed = append(placed, m)
		if i%4 == 0 {
			placed = slices.Insert(placed, max(0, len(placed)-3), m.Copy())
		}
	}
	pub, err := redisstream.NewPublisher(redisstream.PublisherConfig{Client: goredis.NewClient(&goredis.Options{Addr: cfg.Addr})}, watermill.NopLogger{})
	if err != nil {
		return false, err
	}
	defer pub.Close()
	publish := func() error {
		if err := pub.Publish(n.Orders, placed...); err != nil {
			return err
		}
		fmt.Fprintf(out, "orders: %d order.placed events, %d of them published twice: %d deliveries to %d consumer processes\n",
			cfg.Orders, len(placed)-cfg.Orders, len(placed), cfg.Consumers)
		return nil
	}

	emails, err := downstream(ctx, cfg, n)
	if err != nil {
		return false, err
	}
	d := &driver{cfg: cfg, names: n, out: out, admin: admin}
	if err := d.run(ctx, publish); err != nil {
		return false, err
	}
	emails.stop()
	return report(ctx, out, admin, n, cfg, d, emails)
}

// downstreamConsumer is the e-mail consumer of order.confirmed, guarded
// like the fulfilment consumers, in the driver's process.
type downstreamConsumer struct {
	stop     func()
	mu       sync.Mutex
	replayed int // confirmations dropped as duplicates; protected by mu
}

func downstream(ctx context.Context, cfg Config, n names) (*downstreamConsumer, error) {
	client := func() *goredis.Client { return goredis.NewClient(&goredis.Options{Addr: cfg.Addr}) }
	s, err := idemredis.New(client(), idemredis.WithPrefix(n.Prefix+"idem:"))
	if err != nil {
		return nil, err
	}
	dc := &downstreamConsumer{}
	g, err := guard.New(s, guard.WithOutcomeHook(func(_ context.Context, _ string, _ *store.Record, out guard.Outcome) {
		if out == guard.OutcomeReplayed {
			dc.mu.Lock()
			dc.replayed++
			dc.mu.Unlock()
		}
	}))
	if err != nil {
		return nil, err
	}
	sub, err := redisstream.NewSubscriber(redisstream.SubscriberConfig{
		Client: client(), ConsumerGroup: "emails", BlockTime: 50 * time.Millisecond, DisableIndefiniteInitialBlock: true,
	}, watermill.NopLogger{})
	if err != nil {
		return nil, err
	}
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, watermill.NopLogger{})
	if err != nil {
		return nil, err
	}
	router.AddMiddleware(watermillguard.MustMiddleware(g))
	mail := client()
	router.AddConsumerHandler("email", n.Confirmations, sub, func(msg *message.Message) error {
		return mail.HIncrBy(msg.Context(), n.Emails, msg.Metadata.Get("order"), 1).Err()
	})
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = router.Run(rctx)
	}()
	<-router.Running()
	dc.stop = func() { cancel(); <-done; mail.Close() }
	return dc, nil
}

// driver runs the consumer processes and kills two of them.
type driver struct {
	cfg   Config
	names names
	out   io.Writer
	admin *goredis.Client
	kills []kill
}

// kill is a consumer the driver SIGKILLed, and the order it held.
type kill struct {
	consumer, point, order string
}

// proc is a running consumer process.
type proc struct {
	name  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

type stopped struct {
	p            *proc
	point, order string
}

// run starts the consumers, publishes the orders with publish once they
// are all ready, kills two consumers and replaces them, and returns once
// every order and confirmation is handled and the consumers have stopped.
func (d *driver) run(ctx context.Context, publish func() error) error {
	argv := d.cfg.Command
	if len(argv) == 0 {
		self, err := os.Executable()
		if err != nil {
			return err
		}
		argv = []string{self}
	}
	stops := make(chan stopped, 8)
	ready := make(chan struct{}, d.cfg.Consumers+4) // the replacements say READY too
	live := map[*proc]bool{}
	defer func() {
		for p := range live {
			_ = p.cmd.Process.Kill()
			_ = p.cmd.Wait()
		}
	}()
	started := 0
	start := func(kill string, at int) error {
		started++
		cc := consumerConfig{Addr: d.cfg.Addr, Names: d.names, Name: fmt.Sprintf("consumer-%d", started), Kill: kill, KillAt: at,
			Lease: d.cfg.Lease, Skew: d.cfg.Skew, Idle: d.cfg.Idle}
		raw, _ := json.Marshal(cc)
		p := &proc{name: cc.Name, cmd: exec.CommandContext(ctx, argv[0], argv[1:]...)}
		p.cmd.Env = append(os.Environ(), consumerEnv+"="+string(raw))
		p.cmd.Stderr = os.Stderr
		stdout, err := p.cmd.StdoutPipe()
		if err != nil {
			return err
		}
		if p.stdin, err = p.cmd.StdinPipe(); err != nil {
			return err
		}
		if err := p.cmd.Start(); err != nil {
			return err
		}
		live[p] = true
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				switch f := strings.Fields(sc.Text()); {
				case len(f) == 3 && f[0] == "KILLME":
					stops <- stopped{p: p, point: f[1], order: f[2]}
				case len(f) == 1 && f[0] == "READY":
					ready <- struct{}{}
				}
			}
		}()
		return nil
	}
	// The second consumer stops after its 4th run's confirmation went
	// out, the first in its 12th handler run; the others run to the end.
	// The second stops early: the order the first holds when it dies
	// keeps the consumer that takes it over busy until its lease lapses,
	// and that consumer could be the second.
	for i := range d.cfg.Consumers {
		kill, at := "", 0
		switch i {
		case 0:
			kill, at = killMidHandler, 12
		case 1:
			kill, at = killBeforeAck, 4
		}
		if err := start(kill, at); err != nil {
			return err
		}
	}
	// The consumers share the orders from the first one on.
	for range d.cfg.Consumers {
		select {
		case <-ready:
		case <-ctx.Done():
			return fmt.Errorf("the consumers did not start: %w", ctx.Err())
		}
	}
	if err := publish(); err != nil {
		return err
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case s := <-stops:
			_ = s.p.cmd.Process.Signal(syscall.SIGKILL)
			_ = s.p.cmd.Wait()
			delete(live, s.p)
			d.kills = append(d.kills, kill{consumer: s.p.name, point: s.point, order: s.order})
			if err := start("", 0); err != nil {
				return err
			}
		case <-tick.C:
			done, err := d.done(ctx)
			if err != nil {
				return err
			}
			if done {
				for p := range live {
					p.stdin.Close()
					if err := p.cmd.Wait(); err != nil {
						return fmt.Errorf("%s: %w", p.name, err)
					}
					delete(live, p)
				}
				return nil
			}
		case <-ctx.Done():
			return fmt.Errorf("not done: %w", ctx.Err())
		}
	}
}

// done reports whether every order and every confirmation has been
// delivered and acknowledged.
func (d *driver) done(ctx context.Context) (bool, error) {
	for _, stream := range []string{d.names.Orders, d.names.Confirmations} {
		groups, err := d.admin.XInfoGroups(ctx, stream).Result()
		if err != nil {
			if strings.Contains(err.Error(), "no such key") {
				return false, nil
			}
			return false, err
		}
		if len(groups) == 0 {
			return false, nil
		}
		for _, g := range groups {
			if g.Pending != 0 || g.Lag != 0 {
				return false, nil
			}
		}
	}
	charged, err := d.admin.HLen(ctx, d.names.Charges).Result()
	return err == nil && int(charged) == d.cfg.Orders, err
}

// report prints what ran once and returns whether it all did.
func report(ctx context.Context, out io.Writer, admin *goredis.Client, n names, cfg Config, d *driver, emails *downstreamConsumer) (bool, error) {
	for _, k := range d.kills {
		switch k.point {
		case killMidHandler:
			fmt.Fprintf(out, "killed (SIGKILL): %s in the handler of order %s, after reserving its stock and before charging its card\n", k.consumer, k.order)
		case killBeforeAck:
			fmt.Fprintf(out, "killed (SIGKILL): %s after publishing order %s's confirmation and before acknowledging the order\n", k.consumer, k.order)
		}
	}
	ok := true
	if len(d.kills) != 2 {
		fmt.Fprintf(out, "FAILED: %d of the 2 consumers to kill reached their kill point\n", len(d.kills))
		ok = false
	}
	effectsOnce := true
	once := func(what, hash string) error {
		counts, err := admin.HGetAll(ctx, hash).Result()
		if err != nil {
			return err
		}
		good := 0
		for _, v := range counts {
			if v == "1" {
				good++
			}
		}
		fmt.Fprintf(out, "%-15s %d orders, %d once, %d more than once\n", what+":", len(counts), good, len(counts)-good)
		effectsOnce = effectsOnce && good == cfg.Orders && len(counts) == cfg.Orders
		return nil
	}
	for _, e := range []struct{ what, hash string }{{"stock reserved", n.Stock}, {"cards charged", n.Charges}, {"e-mails sent", n.Emails}} {
		if err := once(e.what, e.hash); err != nil {
			return false, err
		}
	}
	entries, err := admin.XRange(ctx, n.Confirmations, "-", "+").Result()
	if err != nil {
		return false, err
	}
	uuids := map[string]map[string]bool{} // order -> confirmation UUIDs
	for _, e := range entries {
		m, err := (redisstream.DefaultMarshallerUnmarshaller{}).Unmarshal(e.Values)
		if err != nil {
			return false, err
		}
		o := m.Metadata.Get("order")
		if uuids[o] == nil {
			uuids[o] = map[string]bool{}
		}
		uuids[o][m.UUID] = true
	}
	oneUUID := 0
	for _, u := range uuids {
		if len(u) == 1 {
			oneUUID++
		}
	}
	effectsOnce = effectsOnce && oneUUID == cfg.Orders && len(uuids) == cfg.Orders
	emails.mu.Lock()
	dropped := emails.replayed
	emails.mu.Unlock()
	fmt.Fprintf(out, "confirmations:  %d published for %d orders, %d under one UUID each: %d re-emitted by replays, dropped downstream as duplicates: %d\n",
		len(entries), len(uuids), oneUUID, len(entries)-len(uuids), dropped)
	if effectsOnce {
		fmt.Fprintln(out, "ran once: every order's stock reserved, card charged and e-mail sent exactly once")
	} else {
		fmt.Fprintln(out, "FAILED: some order's effects did not happen exactly once")
	}
	return ok && effectsOnce, nil
}

// deletePrefix deletes the run's keys.
func deletePrefix(ctx context.Context, c *goredis.Client, prefix string) {
	iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	for len(keys) > 0 {
		k := min(len(keys), 500)
		c.Del(ctx, keys[:k]...)
		keys = keys[k:]
	}
}
