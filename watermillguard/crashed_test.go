package watermillguard_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
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
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	goredis "github.com/redis/go-redis/v9"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/testing/redistest"
	idemredis "github.com/idemguard/idemguard/store/redis"
	"github.com/idemguard/idemguard/watermillguard"
)

// The crashed-consumer run: two consumer processes on Redis Streams, set
// up as a new user sets them up from the docs, one SIGKILLed in the handler
// after its side effect. The consumers are this test binary run again
// with crashedEnv set (TestCrashedConsumerChild), or another build of it
// (runCrashedConsumers' binary: a build of an earlier version of the
// middleware, to measure it in the same run). This file uses only what
// every version of the middleware has.
const (
	crashedEnv       = "WATERMILLGUARD_CRASHED"        // the consumer's name
	crashedStreamEnv = "WATERMILLGUARD_CRASHED_STREAM" // the stream it consumes
	crashedPrefixEnv = "WATERMILLGUARD_CRASHED_PREFIX" // the Redis key prefix of the run
	crashedTargetEnv = "WATERMILLGUARD_CRASHED_TARGET" // the UUID of the message to die on
	crashedBrokerEnv = "WATERMILLGUARD_CRASHED_BROKER" // the subscriber's settings: "docs" or "defaults"
	crashedGroup     = "payments"
)

// Broker settings of a crashed-consumer run.
const (
	// brokerDocs: what docs/consumers.md tells a new user to set on the
	// Redis Streams subscriber.
	brokerDocs = "docs"
	// brokerDefaults: the subscriber's defaults (what the docs said before
	// they named the settings).
	brokerDefaults = "defaults"
)

// TestCrashedConsumerChild is a consumer process of runCrashedConsumers.
// Run alone, without its environment, it does nothing.
func TestCrashedConsumerChild(t *testing.T) {
	name := os.Getenv(crashedEnv)
	if name == "" {
		return
	}
	if err := runCrashedConsumer(name); err != nil {
		t.Fatal(err)
	}
}

// runCrashedConsumer consumes until it is killed: a router with the
// middleware order the docs recommend and the loggers a new user has, a
// guard on the Redis store with its defaults, and a handler whose side
// effect is a guard.Step (an INCR). The first run of the handler for the
// target message, in either process, prints KILLME after the step and
// blocks until the parent kills it. Deliveries are counted by how the
// router ends them, in a Redis hash per consumer.
func runCrashedConsumer(name string) error {
	ctx := context.Background()
	stream, prefix, target := os.Getenv(crashedStreamEnv), os.Getenv(crashedPrefixEnv), os.Getenv(crashedTargetEnv)
	addr := os.Getenv(redistest.AddrEnv)
	newClient := func() *goredis.Client { return goredis.NewClient(&goredis.Options{Addr: addr}) }
	state := newClient()

	s, err := idemredis.New(newClient(), idemredis.WithPrefix(prefix+"store:"))
	if err != nil {
		return err
	}
	g, err := guard.New(s)
	if err != nil {
		return err
	}
	logger := watermill.NewStdLogger(false, false)
	cfg := redisstream.SubscriberConfig{Client: newClient(), ConsumerGroup: crashedGroup, Consumer: name}
	if os.Getenv(crashedBrokerEnv) == brokerDocs {
		// docs/consumers.md, "Broker settings", Redis Streams.
		cfg.MaxIdleTime = 15 * time.Second // the middleware's lease
		cfg.ClaimInterval = time.Second
		cfg.NackResendSleep = time.Second
	}
	sub, err := redisstream.NewSubscriber(cfg, logger)
	if err != nil {
		return err
	}
	pub, err := redisstream.NewPublisher(redisstream.PublisherConfig{Client: newClient()}, logger)
	if err != nil {
		return err
	}
	r, err := message.NewRouter(message.RouterConfig{}, logger)
	if err != nil {
		return err
	}
	poison, err := middleware.PoisonQueueWithFilter(pub, stream+".poison", watermillguard.IsPermanent)
	if err != nil {
		return err
	}

	var acked, inProgress, nacked atomic.Int64
	flush := func() {
		state.HSet(ctx, prefix+"stats:"+name, "acked", acked.Load(), "nacked in progress", inProgress.Load(), "nacked", nacked.Load())
	}
	go func() {
		for range time.Tick(50 * time.Millisecond) {
			flush()
		}
	}()
	r.AddMiddleware(
		func(h message.HandlerFunc) message.HandlerFunc { // what the router acts on
			return func(msg *message.Message) ([]*message.Message, error) {
				produced, err := h(msg)
				switch {
				case err == nil:
					acked.Add(1)
					state.HSetNX(ctx, prefix+"done", msg.UUID, time.Now().UnixNano())
				case errors.Is(err, guard.ErrInProgress):
					inProgress.Add(1)
				default:
					nacked.Add(1)
				}
				return produced, err
			}
		},
		poison,
		watermillguard.MustMiddleware(g),
		middleware.Retry{
			MaxRetries: 3, InitialInterval: 100 * time.Millisecond, Multiplier: 2,
			ShouldRetry:         func(p middleware.RetryParams) bool { return !guard.IsDefinite(p.Err) },
			ResetContextOnRetry: true,
		}.Middleware,
		middleware.Timeout(time.Minute),
	)
	r.AddNoPublisherHandler("charge", stream, sub, func(msg *message.Message) error {
		if _, err := guard.Step(msg.Context(), "charge", func(ctx context.Context) (int64, error) {
			return state.Incr(ctx, prefix+"effects:"+msg.UUID).Result()
		}); err != nil {
			return err
		}
		if msg.UUID == target && state.SetNX(ctx, prefix+"killed", name, 0).Val() {
			fmt.Println("KILLME")
			select {} // until SIGKILL
		}
		return nil
	})
	go func() {
		<-r.Running()
		fmt.Println("READY")
	}()
	return r.Run(ctx)
}

// crashFigures are what a crashed-consumer run measured.
type crashFigures struct {
	Rejected   int64         // deliveries the router nacked with guard.ErrInProgress
	Nacked     int64         // deliveries it nacked for another error
	LogBytes   int64         // what both consumer processes wrote (stdout and stderr)
	ErrorLines int64         // lines of it logged at error level
	Completed  time.Duration // from the kill to the message's first acknowledgement
	Others     time.Duration // from the kill to the last of the other messages' first acknowledgement
	AllAcked   time.Duration // from the kill to nothing pending (the dead consumer's delivery too)
	Effects    int64         // the message's side effects
}

func (f crashFigures) String() string {
	return fmt.Sprintf("rejected redeliveries %d, other nacks %d, log %s (%d error lines), message completed %v after the kill, "+
		"the other messages %v, everything acknowledged %v, side effects %d",
		f.Rejected, f.Nacked, byteSize(f.LogBytes), f.ErrorLines, f.Completed.Round(100*time.Millisecond),
		f.Others.Round(100*time.Millisecond), f.AllAcked.Round(100*time.Millisecond), f.Effects)
}

func byteSize(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// crashedProc is a consumer process of a crashed-consumer run.
type crashedProc struct {
	name   string
	cmd    *exec.Cmd
	lines  chan string  // its protocol lines: READY, KILLME
	bytes  atomic.Int64 // what it wrote, less its protocol lines
	errors atomic.Int64 // lines at error level
	wg     sync.WaitGroup
}

// read counts what r carries and passes protocol lines on.
func (p *crashedProc) read(r io.Reader) {
	defer p.wg.Done()
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := br.ReadString('\n')
		switch t := strings.TrimSpace(line); {
		case t == "READY" || t == "KILLME":
			p.lines <- t
		case t == "PASS" || t == "":
		default:
			p.bytes.Add(int64(len(line)))
			if strings.Contains(line, "level=ERROR") {
				p.errors.Add(1)
			}
		}
		if err != nil {
			return
		}
	}
}

// runCrashedConsumers runs two consumer processes (binary, run as
// TestCrashedConsumerChild) with the broker settings given, publishes a
// message, SIGKILLs the consumer that ran its handler once the handler's
// side effect is done, then publishes the message again (a publisher's
// retry, which reaches the other consumer at once) and 20 other messages,
// and measures until the group has nothing pending.
func runCrashedConsumers(t *testing.T, binary, broker string) crashFigures {
	t.Helper()
	ctx := t.Context()
	admin := redisClient(t)
	prefix := redistest.Prefix(t)
	t.Cleanup(func() { redistest.DeletePrefix(t, admin, prefix) })
	stream := prefix + "orders"
	if err := admin.XGroupCreateMkStream(ctx, stream, crashedGroup, "0").Err(); err != nil {
		t.Fatal(err)
	}
	target := watermill.NewUUID()

	procs := map[string]*crashedProc{}
	for _, name := range []string{"east", "west"} {
		p := &crashedProc{name: name, lines: make(chan string, 4)}
		p.cmd = exec.Command(binary, "-test.run=^TestCrashedConsumerChild$", "-test.count=1")
		p.cmd.Env = append(os.Environ(), crashedEnv+"="+name, crashedStreamEnv+"="+stream, crashedPrefixEnv+"="+prefix,
			crashedTargetEnv+"="+target, crashedBrokerEnv+"="+broker)
		stdout, stderr := must(p.cmd.StdoutPipe()), must(p.cmd.StderrPipe())
		if err := p.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		p.wg.Add(2)
		go p.read(stdout)
		go p.read(stderr)
		t.Cleanup(func() {
			p.cmd.Process.Kill()
			p.cmd.Wait()
		})
		procs[name] = p
	}
	expect := func(p *crashedProc, want string) {
		t.Helper()
		select {
		case got := <-p.lines:
			if got != want {
				t.Fatalf("%s said %s, want %s", p.name, got, want)
			}
		case <-time.After(time.Minute):
			t.Fatalf("%s did not say %s within a minute", p.name, want)
		}
	}
	for _, p := range procs {
		expect(p, "READY")
	}

	pub, err := redisstream.NewPublisher(redisstream.PublisherConfig{Client: redisClient(t)}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	payload := []byte(`{"order":"o-1","amount":42}`)
	if err := pub.Publish(stream, message.NewMessage(target, payload)); err != nil {
		t.Fatal(err)
	}
	var dead, survivor *crashedProc
	select {
	case <-procs["east"].lines:
		dead, survivor = procs["east"], procs["west"]
	case <-procs["west"].lines:
		dead, survivor = procs["west"], procs["east"]
	case <-time.After(time.Minute):
		t.Fatal("no consumer ran the handler within a minute")
	}
	dead.cmd.Process.Signal(syscall.SIGKILL)
	dead.cmd.Wait()
	killed := time.Now()

	others := make([]*message.Message, 20)
	for i := range others {
		others[i] = message.NewMessage(watermill.NewUUID(), []byte(fmt.Sprintf(`{"order":"o-%d"}`, i+2)))
	}
	if err := pub.Publish(stream, append([]*message.Message{message.NewMessage(target, payload)}, others...)...); err != nil {
		t.Fatal(err)
	}

	var f crashFigures
	at := func(uuid string) (time.Time, bool) {
		v, err := admin.HGet(ctx, prefix+"done", uuid).Result()
		if err != nil {
			return time.Time{}, false
		}
		return time.Unix(0, must(strconv.ParseInt(v, 10, 64))), true
	}
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the group still has deliveries pending 3 minutes after the kill")
		}
		groups, err := admin.XInfoGroups(ctx, stream).Result()
		if err != nil || len(groups) != 1 {
			t.Fatalf("XINFO GROUPS %s: %v, %v", stream, groups, err)
		}
		if groups[0].Pending == 0 && groups[0].Lag == 0 {
			f.AllAcked = time.Since(killed)
			break
		}
	}
	done, ok := at(target)
	if !ok {
		t.Fatal("the message was acknowledged, but its acknowledgement was not recorded")
	}
	f.Completed = done.Sub(killed)
	for _, m := range others {
		if d, ok := at(m.UUID); ok && d.Sub(killed) > f.Others {
			f.Others = d.Sub(killed)
		}
	}
	time.Sleep(200 * time.Millisecond) // the survivor's last counts
	f.Effects = must(admin.Get(ctx, prefix+"effects:"+target).Int64())
	for _, m := range others {
		if n, _ := admin.Get(ctx, prefix+"effects:"+m.UUID).Int64(); n != 1 {
			t.Errorf("another message, %s, had %d side effects, want 1", m.UUID, n)
		}
	}
	for _, p := range procs {
		st, err := admin.HGetAll(ctx, prefix+"stats:"+p.name).Result()
		if err != nil {
			t.Fatal(err)
		}
		n := func(field string) int64 { v, _ := strconv.ParseInt(st[field], 10, 64); return v }
		f.Rejected += n("nacked in progress")
		f.Nacked += n("nacked")
	}
	survivor.cmd.Process.Signal(syscall.SIGKILL)
	survivor.cmd.Wait()
	for _, p := range procs {
		p.wg.Wait()
		f.LogBytes += p.bytes.Load()
		f.ErrorLines += p.errors.Load()
	}
	return f
}
