package watermillguard_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/testing/postgrestest"
	"github.com/idemguard/idemguard/internal/testing/redistest"
	"github.com/idemguard/idemguard/store/postgres"
	"github.com/idemguard/idemguard/watermillguard"
)

// The consumers of TestConsumersKilled are this test binary run again
// with childEnv set: TestConsumerChild is then a consumer process. The
// variables below configure it.
const (
	childEnv        = "WATERMILLGUARD_CHILD"         // the consumer's name
	childInEnv      = "WATERMILLGUARD_CHILD_IN"      // the stream it consumes
	childOutEnv     = "WATERMILLGUARD_CHILD_OUT"     // the stream it produces to
	childTableEnv   = "WATERMILLGUARD_CHILD_TABLE"   // the guard's table
	childEffectsEnv = "WATERMILLGUARD_CHILD_EFFECTS" // the side effects' table
	childKillEnv    = "WATERMILLGUARD_CHILD_KILL"    // "<point>:<n>": stop at point in the n-th run of the handler
	childStatsEnv   = "WATERMILLGUARD_CHILD_STATS"   // a Redis hash counting deliveries by how they ended
)

// The points at which a consumer announces "KILLME <point> <uuid>" on
// stdout and blocks until the parent SIGKILLs it.
const (
	// killMid: in the handler, the message claimed, its side effect not
	// made.
	killMid = "mid"
	// killBeforePublish: the handler made its side effect and the guard
	// recorded the message's outcome; the router has neither published
	// the produced messages nor acknowledged the message.
	killBeforePublish = "before-publish"
	// killBeforeAck: the produced messages are published; the message is
	// not acknowledged.
	killBeforeAck = "before-ack"
)

var killPoints = []string{killMid, killBeforePublish, killBeforeAck}

const consumerGroup = "fulfilment"

// TestConsumerChild is a consumer process of TestConsumersKilled. Run
// alone, without the parent's environment, it does nothing.
func TestConsumerChild(t *testing.T) {
	name := os.Getenv(childEnv)
	if name == "" {
		return
	}
	if err := runConsumer(name); err != nil {
		t.Fatal(err)
	}
}

// runConsumer consumes until its stdin closes.
func runConsumer(name string) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { // the parent closes stdin to stop it
		io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	in, out := os.Getenv(childInEnv), os.Getenv(childOutEnv)
	effects := pgx.Identifier{os.Getenv(childEffectsEnv)}.Sanitize()
	killAt, killN := "", 0
	if k := os.Getenv(childKillEnv); k != "" {
		p, n, _ := strings.Cut(k, ":")
		killAt, killN = p, must(strconv.Atoi(n))
	}
	var runs atomic.Int64
	var killing atomic.Bool // this consumer is stopping at its kill point
	die := func(point, uuid string) {
		if killing.CompareAndSwap(false, true) {
			fmt.Printf("KILLME %s %s\n", point, uuid)
		}
		select {} // until SIGKILL
	}

	pool, err := pgxpool.New(ctx, os.Getenv(postgrestest.URLEnv))
	if err != nil {
		return err
	}
	defer pool.Close()
	s, err := postgres.New(pool, postgres.WithTable(os.Getenv(childTableEnv)))
	if err != nil {
		return err
	}
	g, err := guard.New(s, guard.WithClockSkew(100*time.Millisecond))
	if err != nil {
		return err
	}
	addr := os.Getenv(redistest.AddrEnv)
	newClient := func() *goredis.Client { return goredis.NewClient(&goredis.Options{Addr: addr}) }
	sub := redisSubscriberConfig(newClient(), consumerGroup, name)
	pub, err := redisstream.NewPublisher(redisstream.PublisherConfig{Client: newClient()}, watermill.NopLogger{})
	if err != nil {
		return err
	}
	r, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, watermill.NopLogger{})
	if err != nil {
		return err
	}
	stats, statsKey := newClient(), os.Getenv(childStatsEnv)
	count := func(field string) { stats.HIncrBy(context.Background(), statsKey, field, 1) }
	r.AddMiddleware(
		func(h message.HandlerFunc) message.HandlerFunc {
			return func(msg *message.Message) ([]*message.Message, error) {
				produced, err := h(msg)
				switch {
				case err == nil:
					count("acked")
				case errors.Is(err, guard.ErrInProgress):
					count("nacked in progress")
				default:
					count("nacked")
				}
				return produced, err
			}
		},
		func(h message.HandlerFunc) message.HandlerFunc {
			return func(msg *message.Message) ([]*message.Message, error) {
				produced, err := h(msg)
				if err == nil && killAt == killBeforePublish && msg.Metadata.Get("ran-here") != "" {
					die(killBeforePublish, msg.UUID)
				}
				if err == nil && killAt == killBeforeAck && msg.Metadata.Get("ran-here") != "" {
					// The router publishes, then acks: stop after publishing.
					for _, p := range produced {
						p.Metadata.Set("kill-after-publish", "1")
					}
				}
				return produced, err
			}
		},
		watermillguard.MustMiddleware(g, watermillguard.WithGuardOptions(guard.WithLease(time.Second))),
	)
	killingPub := publisherFunc(func(topic string, msgs ...*message.Message) error {
		kill := false
		for _, m := range msgs {
			if m.Metadata.Get("kill-after-publish") != "" {
				kill = true
				delete(m.Metadata, "kill-after-publish")
			}
		}
		if err := pub.Publish(topic, msgs...); err != nil {
			return err
		}
		if kill {
			die(killBeforeAck, msgs[0].Metadata.Get("order"))
		}
		return nil
	})
	r.AddHandler("fulfil", in, sub, out, killingPub, func(msg *message.Message) ([]*message.Message, error) {
		n := int(runs.Add(1))
		count("handler runs")
		if killAt != "" && n == killN {
			if killAt == killMid {
				die(killMid, msg.UUID)
			}
			msg.Metadata.Set("ran-here", "1") // the kill point after the guard is this run's
		}
		time.Sleep(2 * time.Millisecond) // the order's other work
		if _, err := pool.Exec(msg.Context(), `INSERT INTO `+effects+` (message_id, n, consumer) VALUES ($1, 1, $2)
			ON CONFLICT (message_id) DO UPDATE SET n = `+effects+`.n + 1`, msg.UUID, name); err != nil {
			return nil, err
		}
		shipped := message.NewMessage(watermill.NewUUID(), []byte(`{"shipped":true}`))
		shipped.Metadata.Set("order", msg.UUID)
		return []*message.Message{shipped}, nil
	})
	fmt.Println("READY")
	return r.Run(ctx)
}

// publisherFunc is a message.Publisher made of a function.
type publisherFunc func(topic string, msgs ...*message.Message) error

func (f publisherFunc) Publish(topic string, msgs ...*message.Message) error {
	return f(topic, msgs...)
}
func (publisherFunc) Close() error { return nil }

func redisSubscriberConfig(client goredis.UniversalClient, group, consumer string) message.Subscriber {
	sub, err := redisstream.NewSubscriber(redisstream.SubscriberConfig{
		Client:                        client,
		ConsumerGroup:                 group,
		Consumer:                      consumer,
		NackResendSleep:               20 * time.Millisecond,
		BlockTime:                     50 * time.Millisecond,
		ClaimInterval:                 200 * time.Millisecond,
		MaxIdleTime:                   time.Second,
		DisableIndefiniteInitialBlock: true,
	}, watermill.NopLogger{})
	if err != nil {
		panic(err)
	}
	return sub
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// consumerProc is a running consumer process.
type consumerProc struct {
	name  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

// killEvent is a consumer that reached its kill point.
type killEvent struct {
	proc        *consumerProc
	point, uuid string
	slot        int
}

// Acceptance: 1,000 messages, each published twice and so delivered at
// least twice, consumed by 4 consumer processes on Redis Streams, which
// are SIGKILLed 12 times — in the handler before its side effect, after
// the outcome was recorded and before the produced messages were
// published, and after they were published and before the message was
// acknowledged — and replaced. Each message's side effect, counted in
// PostgreSQL, happens once; the message each produced is published under
// one UUID however often it was re-emitted.
func TestConsumersKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("starts consumer processes")
	}
	const (
		messages  = 1000
		consumers = 4
		killsEach = 3 // per consumer slot: one at each point
	)
	admin := redisClient(t)
	pool := postgrestest.NewPool(t)
	table := postgrestest.NewTable(t, pool, "")
	effects := postgrestest.TableName(t)
	ctx := t.Context()
	if _, err := pool.Exec(ctx, `CREATE TABLE `+pgx.Identifier{effects}.Sanitize()+` (message_id text PRIMARY KEY, n int NOT NULL, consumer text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Exec(context.Background(), `DROP TABLE IF EXISTS `+pgx.Identifier{effects}.Sanitize()) })
	prefix := strings.TrimSuffix(redistest.Prefix(t), ":")
	in, out := prefix+".orders", prefix+".shipments"
	t.Cleanup(func() { redistest.DeletePrefix(t, admin, prefix) })

	// Every message twice, the copy a little later in the stream, so that
	// a copy often arrives while another consumer handles the original.
	ids := make([]string, messages)
	order := make([]int, 0, 2*messages)
	for i := range ids {
		ids[i] = watermill.NewUUID()
		order = append(order, i, i)
	}
	rng := rand.New(rand.NewPCG(25, 1))
	for i := range order { // a local shuffle: a copy lands up to 16 places away
		j := min(len(order)-1, i+rng.IntN(16))
		order[i], order[j] = order[j], order[i]
	}
	pub, err := redisstream.NewPublisher(redisstream.PublisherConfig{Client: redisClient(t)}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.XGroupCreateMkStream(ctx, in, consumerGroup, "0").Err(); err != nil {
		t.Fatal(err)
	}
	msgs := make([]*message.Message, len(order))
	for k, i := range order {
		msgs[k] = message.NewMessage(ids[i], []byte(fmt.Sprintf(`{"order":%d}`, i)))
	}
	if err := pub.Publish(in, msgs...); err != nil {
		t.Fatal(err)
	}

	events := make(chan killEvent, 64)
	var procs sync.Map // *consumerProc -> struct{}: the live ones
	start := func(slot, generation int) *consumerProc {
		t.Helper()
		p := &consumerProc{name: fmt.Sprintf("consumer-%d.%d", slot, generation)}
		p.cmd = exec.Command(os.Args[0], "-test.run=^TestConsumerChild$", "-test.count=1")
		env := append(os.Environ(), childEnv+"="+p.name, childInEnv+"="+in, childOutEnv+"="+out,
			childTableEnv+"="+table, childEffectsEnv+"="+effects, childStatsEnv+"="+prefix+".stats")
		if generation < killsEach {
			point := killPoints[(slot+generation)%len(killPoints)]
			env = append(env, fmt.Sprintf("%s=%s:%d", childKillEnv, point, 2+rng.IntN(12)))
		}
		p.cmd.Env = env
		p.cmd.Stderr = os.Stderr
		stdout := must(p.cmd.StdoutPipe())
		p.stdin = must(p.cmd.StdinPipe())
		if err := p.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs.Store(p, struct{}{})
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				f := strings.Fields(sc.Text())
				switch {
				case len(f) == 3 && f[0] == "KILLME":
					events <- killEvent{proc: p, point: f[1], uuid: f[2], slot: slot}
				case len(f) == 1 && (f[0] == "READY" || f[0] == "PASS"):
				default:
					t.Logf("%s: %s", p.name, sc.Text())
				}
			}
		}()
		return p
	}
	t.Cleanup(func() {
		procs.Range(func(k, _ any) bool {
			p := k.(*consumerProc)
			p.cmd.Process.Kill()
			p.cmd.Wait()
			return true
		})
	})
	generation := make([]int, consumers)
	for slot := range consumers {
		start(slot, 0)
	}

	began := time.Now()
	kills := map[string][]string{} // point -> UUIDs of the messages it interrupted
	done := func() bool {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{effects}.Sanitize()).Scan(&n); err != nil {
			t.Fatal(err)
		}
		groups, err := admin.XInfoGroups(ctx, in).Result()
		if err != nil || len(groups) != 1 {
			t.Fatalf("XINFO GROUPS %s: %v, %v", in, groups, err)
		}
		return n == messages && groups[0].Pending == 0 && groups[0].Lag == 0
	}
	deadline := time.After(5 * time.Minute)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
wait:
	for {
		select {
		case e := <-events:
			e.proc.cmd.Process.Signal(syscall.SIGKILL)
			e.proc.cmd.Wait()
			procs.Delete(e.proc)
			kills[e.point] = append(kills[e.point], e.uuid)
			generation[e.slot]++
			start(e.slot, generation[e.slot])
		case <-tick.C:
			if done() {
				break wait
			}
		case <-deadline:
			t.Fatalf("not done within 5 minutes; kills so far %v", kills)
		}
	}
	elapsed := time.Since(began)
	// Stop the consumers; nothing must change after.
	procs.Range(func(k, _ any) bool {
		p := k.(*consumerProc)
		p.stdin.Close()
		if err := p.cmd.Wait(); err != nil {
			t.Errorf("%s: %v", p.name, err)
		}
		procs.Delete(p)
		return true
	})

	// Each side effect once.
	rows, err := pool.Query(ctx, `SELECT message_id, n FROM `+pgx.Identifier{effects}.Sanitize())
	if err != nil {
		t.Fatal(err)
	}
	effectsOf := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			t.Fatal(err)
		}
		effectsOf[id] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	once := 0
	for _, id := range ids {
		if effectsOf[id] == 1 {
			once++
		} else {
			t.Errorf("message %s: %d side effects, want 1", id, effectsOf[id])
		}
	}
	// Every kill point was reached, and the message it interrupted was
	// finished by another consumer.
	total := 0
	for _, p := range killPoints {
		total += len(kills[p])
		if len(kills[p]) == 0 {
			t.Errorf("no consumer was killed %s", p)
		}
	}
	// The produced messages: one UUID per order, re-emitted on replays.
	shipments := readStream(t, admin, out)
	byOrder := map[string]map[string]int{}
	for _, m := range shipments {
		o := m.Metadata.Get("order")
		if byOrder[o] == nil {
			byOrder[o] = map[string]int{}
		}
		byOrder[o][m.UUID]++
	}
	reemitted := 0
	for _, id := range ids {
		switch u := byOrder[id]; {
		case len(u) != 1:
			t.Errorf("order %s was shipped under %d UUIDs, want 1: %v", id, len(u), u)
		default:
			for _, n := range u {
				if n > 1 {
					reemitted++
				}
			}
		}
	}
	if reemitted == 0 {
		t.Error("no produced message was re-emitted: the replays published nothing")
	}
	for _, id := range kills[killBeforeAck] {
		for uuid, n := range byOrder[id] {
			if n < 2 {
				t.Errorf("order %s, killed after its shipment %s was published and before the ack, was shipped %d times; want it re-emitted", id, uuid, n)
			}
		}
	}
	st, err := admin.HGetAll(ctx, prefix+".stats").Result()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d messages, %d deliveries published, %d consumers, %d SIGKILLs (%d mid-handler, %d before publishing, %d before the ack): "+
		"%d messages with their side effect once; %d shipments, %d orders' shipments re-emitted under their UUID; deliveries by outcome %v; %v",
		messages, len(msgs), consumers, total, len(kills[killMid]), len(kills[killBeforePublish]), len(kills[killBeforeAck]),
		once, len(shipments), reemitted, st, elapsed.Round(100*time.Millisecond))
}
