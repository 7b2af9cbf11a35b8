// Command workerpool guards a plain goroutine worker pool that consumes an
// at-least-once stream: the broker delivers some messages twice, and halfway
// through the first worker process dies with messages in flight; a new
// process takes over and the broker redelivers everything unacknowledged.
// Every message's effect happens once.
//
//	go run ./examples/workerpool
//	IDEMGUARD_REDIS_ADDR=127.0.0.1:6379 go run ./examples/workerpool
//
// The two processes share the memory store by default, standing in for a
// shared one; with IDEMGUARD_REDIS_ADDR set they share a Redis server, the
// records under a key prefix of this run's own (the messages' IDs are the
// same every run), deleted at the end.
package main

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/memory"
	idemredis "github.com/idemguard/idemguard/store/redis"
)

// Message is one delivery from the broker.
type Message struct {
	ID      string `json:"id"`
	Account string `json:"account"`
	Cents   int    `json:"cents"`
}

// ledger is the downstream system the side effect lands in. Like a payment
// provider it deduplicates on the idempotency key it is handed, which closes
// the window between a side effect and its completion record.
type ledger struct {
	mu      sync.Mutex
	applied map[string]int // idempotency key -> times applied
	byMsg   map[string]int // message ID -> times applied
	calls   atomic.Int64   // requests received, duplicates included
}

func (l *ledger) apply(key string, m Message) {
	l.calls.Add(1)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.applied[key] > 0 {
		return
	}
	l.applied[key]++
	l.byMsg[m.ID]++
}

// redisAddrEnv names the Redis server the processes share, if any.
const redisAddrEnv = "IDEMGUARD_REDIS_ADDR"

func main() {
	ctx := context.Background()
	shared, desc, closeStore, err := openStore(ctx, os.Getenv(redisAddrEnv))
	if err == nil {
		defer closeStore()
		err = run(ctx, os.Stdout, shared, desc, 200, 8)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "workerpool:", err)
		os.Exit(1)
	}
}

// openStore returns the store both processes share: Redis at addr under a
// prefix of this run's own, or, with no address, the memory store; close
// deletes the run's records and closes the client.
func openStore(ctx context.Context, addr string) (s store.Store, desc string, close func(), err error) {
	if addr == "" {
		return memory.New(), "memory (in this process), standing in for a shared store", func() {}, nil
	}
	var b [4]byte
	crand.Read(b[:])
	prefix := "idemguard-workerpool:" + hex.EncodeToString(b[:]) + ":"
	client := goredis.NewClient(&goredis.Options{Addr: addr})
	rs, err := idemredis.New(client, idemredis.WithPrefix(prefix))
	if err != nil {
		client.Close()
		return nil, "", nil, err
	}
	close = func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		iter := client.Scan(cctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(cctx) {
			client.Unlink(cctx, iter.Val())
		}
		client.Close()
	}
	return rs, fmt.Sprintf("Redis at %s (%s), keys under %q", addr, redisAddrEnv, prefix), close, nil
}

func run(ctx context.Context, out io.Writer, shared store.Store, desc string, unique, workers int) error {
	fmt.Fprintf(out, "store: %s\n", desc)
	led := &ledger{applied: map[string]int{}, byMsg: map[string]int{}}

	// The broker's stream: every message once, a third of them twice,
	// shuffled. A delivery stays due until a worker acknowledges it.
	var stream []Message
	for i := range unique {
		m := Message{ID: fmt.Sprintf("msg-%03d", i), Account: fmt.Sprintf("acct-%d", i%17), Cents: 100 + i}
		stream = append(stream, m)
		if i%3 == 0 {
			stream = append(stream, m)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	rng.Shuffle(len(stream), func(i, j int) { stream[i], stream[j] = stream[j], stream[i] })
	b := &broker{stream: stream, acked: make([]bool, len(stream))}

	// Process 1 dies after acknowledging half the stream, with messages in
	// flight: its workers freeze inside the handler and its store connection
	// drops, so it can neither record those calls nor extend their leases.
	p1 := &process{store: &killSwitch{Store: shared}, quiet: true}
	p1.consume(ctx, b, led, b.due(), workers, len(stream)/2)
	fmt.Fprintf(out, "process 1: acknowledged %d deliveries, died with %d in flight\n", p1.acked.Load(), p1.frozen.Load())

	// Process 2 gets every unacknowledged delivery: the rest of the stream
	// and the ones process 1 died holding. Those wait out the dead
	// process's lease, then run again under the same key.
	redelivered := b.due()
	p2 := &process{store: shared}
	p2.consume(ctx, b, led, redelivered, workers, -1)
	fmt.Fprintf(out, "process 2: acknowledged %d deliveries\n", p2.acked.Load())

	led.mu.Lock()
	defer led.mu.Unlock()
	dupEffects := 0
	for _, n := range led.byMsg {
		if n > 1 {
			dupEffects++
		}
	}
	fmt.Fprintf(out, "deliveries: %d (%d messages, %d duplicate deliveries in the stream, %d redelivered after the crash)\n",
		p1.delivered.Load()+p2.delivered.Load(), unique, len(stream)-unique, p1.frozen.Load())
	fmt.Fprintf(out, "guard: executed %d, replayed %d\n", p1.executed.Load()+p2.executed.Load(), p1.replayed.Load()+p2.replayed.Load())
	fmt.Fprintf(out, "ledger: %d requests, %d effects, %d duplicate effects (re-runs of crashed calls deduplicated by idempotency key: %d)\n",
		led.calls.Load(), len(led.byMsg), dupEffects, led.calls.Load()-int64(len(led.byMsg)))
	if len(led.byMsg) != unique || dupEffects != 0 {
		return fmt.Errorf("effects %d for %d unique messages, %d duplicated", len(led.byMsg), unique, dupEffects)
	}
	fmt.Fprintf(out, "effects = unique messages = %d\n", unique)
	return nil
}

// broker hands out deliveries and remembers which were acknowledged.
type broker struct {
	mu     sync.Mutex
	stream []Message
	acked  []bool // protected by mu
}

// due returns the indexes of unacknowledged deliveries.
func (b *broker) due() []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	var d []int
	for i, ok := range b.acked {
		if !ok {
			d = append(d, i)
		}
	}
	return d
}

func (b *broker) ack(i int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.acked[i] = true
}

// process is one worker process: a guard and a pool of workers.
type process struct {
	store                                        store.Store
	quiet                                        bool // a process about to die says nothing
	delivered, acked, frozen, executed, replayed atomic.Int64
}

// consume runs workers over the deliveries. With dieAfter ≥ 0 the process
// dies once it has acknowledged that many: workers then freeze after applying
// the message in hand, and consume returns once every worker is frozen or
// idle.
func (p *process) consume(ctx context.Context, b *broker, led *ledger, due []int, workers, dieAfter int) {
	opts := []guard.Option{
		guard.WithKeyPath("id"),
		guard.WithPayloadValidation("[account, cents]"),
		guard.WithLease(time.Second), // a dead process blocks its keys for about this long
		guard.WithWait(10 * time.Second),
	}
	dying := make(chan struct{}) // closed when the first worker freezes
	if p.quiet {
		opts = append(opts, guard.WithLogger(slog.New(slog.DiscardHandler)))
	}
	g, err := guard.New(p.store, opts...)
	if err != nil {
		panic(err)
	}
	apply := func(ctx context.Context, m Message) (string, error) {
		key, _ := guard.KeyFromContext(ctx)
		led.apply(key, m) // the side effect, deduplicated downstream by key
		if dieAfter >= 0 && p.acked.Load() >= int64(dieAfter) {
			if p.frozen.Add(1) == 1 {
				close(dying)
			}
			select {} // the process is gone: this call never returns
		}
		return "applied:" + m.ID, nil
	}
	jobs := make(chan int)
	var idle sync.WaitGroup
	for range workers {
		idle.Add(1)
		go func() {
			defer idle.Done()
			for i := range jobs {
				_, outcome, err := adapt.Execute(ctx, g, "apply-payment", b.stream[i], func(ctx context.Context) (string, error) {
					return apply(ctx, b.stream[i])
				})
				if err != nil {
					panic(err)
				}
				if outcome == guard.OutcomeExecuted {
					p.executed.Add(1)
				} else {
					p.replayed.Add(1)
				}
				b.ack(i)
				p.acked.Add(1)
			}
		}()
	}
feed:
	for _, i := range due {
		select {
		case jobs <- i:
			p.delivered.Add(1)
		case <-dying:
			break feed
		}
	}
	close(jobs)
	if dieAfter < 0 {
		idle.Wait()
		return
	}
	// Dying: give the workers still busy a moment to freeze or finish, then
	// cut the store connection.
	<-dying
	time.Sleep(50 * time.Millisecond)
	p.store.(*killSwitch).kill()
}

// killSwitch is a store connection that drops when the process dies.
type killSwitch struct {
	store.Store
	dead atomic.Bool
}

var errDead = errors.New("process killed")

func (k *killSwitch) kill() { k.dead.Store(true) }

func (k *killSwitch) Acquire(ctx context.Context, r *store.Record, now time.Time) (*store.Record, error) {
	if k.dead.Load() {
		return nil, errDead
	}
	return k.Store.Acquire(ctx, r, now)
}
func (k *killSwitch) Complete(ctx context.Context, r *store.Record) error {
	if k.dead.Load() {
		return errDead
	}
	return k.Store.Complete(ctx, r)
}
func (k *killSwitch) Extend(ctx context.Context, key, token string, lease, exp time.Time) error {
	if k.dead.Load() {
		return errDead
	}
	return k.Store.Extend(ctx, key, token, lease, exp)
}
func (k *killSwitch) Release(ctx context.Context, key, token string) error {
	if k.dead.Load() {
		return errDead
	}
	return k.Store.Release(ctx, key, token)
}
