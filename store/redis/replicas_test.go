package redis_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idemguard/idemguard/internal/testing/redistest"
	"github.com/idemguard/idemguard/internal/testing/testenv"
	"github.com/idemguard/idemguard/store"
	idemredis "github.com/idemguard/idemguard/store/redis"
)

// startServer starts a redis-server of the test's own on a free loopback
// port with persistence off and args, waits until ready reports true for a
// client of it, and returns that client and a function that kills the
// server (also called when the test ends).
func startServer(t *testing.T, ready func(*goredis.Client) bool, args ...string) (*goredis.Client, func()) {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		testenv.Missing(t, "redis-server is not on PATH: cannot start a server of the test's own; run the tests with scripts/harness.sh run (make test)")
	}
start:
	for attempt := 0; ; attempt++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		_, port, _ := net.SplitHostPort(addr)
		cmd := exec.Command(bin, append([]string{"--bind", "127.0.0.1", "--port", port, "--save", "", "--appendonly", "no",
			"--dir", t.TempDir()}, args...)...)
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() { cmd.Wait(); close(exited) }()
		kill := func() {
			cmd.Process.Kill()
			<-exited
		}
		t.Cleanup(kill)
		c := redistest.NewClient(t, func(o *goredis.Options) { o.Addr = addr })
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
			select {
			case <-exited:
				if attempt < 3 && strings.Contains(out.String(), "Address already in use") {
					continue start // the port was taken: try another
				}
				t.Fatalf("redis-server %v exited: %s", args, out.String())
			default:
			}
			if ready(c) {
				return c, kill
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("redis-server %v was not ready within 20 s: %s", args, out.String())
	}
}

// startReplica starts a replica of the server at master and waits until it
// is in sync.
func startReplica(t *testing.T, master string) (*goredis.Client, func()) {
	host, port, _ := net.SplitHostPort(master)
	return startServer(t, func(c *goredis.Client) bool {
		info, err := c.Info(context.Background(), "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:up")
	}, "--replicaof", host, port)
}

// TestReplicas: with WithReplicas, claims, extensions and completions wait
// for the replica in the same round trip and are on the replica when they
// return; once the replica is gone they fail with ErrNotReplicated, and a
// claim that was not replicated is released.
func TestReplicas(t *testing.T) {
	f := newFixture(t, idemredis.WithReplicas(1, 5*time.Second))
	setConfig(t, f.client, "repl-diskless-sync-delay", "0") // sync at once
	replica, kill := startReplica(t, f.client.Options().Addr)
	onReplica := func(k string) map[string]string {
		t.Helper()
		h, err := replica.HGetAll(f.ctx, f.key(k)).Result()
		if err != nil {
			t.Fatalf("HGETALL on the replica: %v", err)
		}
		return h
	}

	rec := f.claim("scope#replicated")
	f.n.Reset()
	f.mustAcquire(t, rec)
	if f.n.Total() != 1 || f.n.Get("wait") != 1 {
		t.Errorf("Acquire with WithReplicas sent %s; want one pipeline with the script and WAIT", f.n)
	}
	if h := onReplica(rec.Key); h["token"] != rec.Token || h["status"] != "INPROGRESS" {
		t.Errorf("after Acquire the replica holds %v; want the claim", h)
	}
	if err := f.s.Extend(f.ctx, rec.Key, rec.Token, f.t0.Add(5*time.Minute), f.t0.Add(3*time.Hour)); err != nil {
		t.Fatalf("Extend = %v", err)
	}
	if h := onReplica(rec.Key); h["expiration"] != fmt.Sprint(f.t0.Add(3*time.Hour).Unix()) {
		t.Errorf("after Extend the replica holds %v", h)
	}
	f.complete(t, rec, []byte(`"done"`))
	if h := onReplica(rec.Key); h["status"] != "COMPLETED" || h["data"] != `"done"` {
		t.Errorf("after Complete the replica holds %v; want the completed record", h)
	}

	// The script cache flushed: the pipeline falls back to EVAL, still one
	// WAIT per attempt.
	if err := f.client.ScriptFlush(f.ctx).Err(); err != nil {
		t.Fatal(err)
	}
	flushed := f.claim("scope#replicated-eval")
	f.mustAcquire(t, flushed)
	if h := onReplica(flushed.Key); h["token"] != flushed.Token {
		t.Errorf("after Acquire through EVAL the replica holds %v", h)
	}

	kill()
	// The primary notices the replica's connection close; wait until it
	// counts no replica, so that WAIT cannot be answered.
	for deadline := time.Now().Add(10 * time.Second); ; {
		info, _ := f.client.Info(f.ctx, "replication").Result()
		if strings.Contains(info, "connected_slaves:0") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the primary still counts the killed replica: %s", info)
		}
		time.Sleep(20 * time.Millisecond)
	}
	short := redistest.NewStore(t, f.client, idemredis.WithPrefix(f.s.Prefix()), idemredis.WithReplicas(1, 100*time.Millisecond))
	lost := f.claim("scope#not-replicated")
	start := time.Now()
	_, err := short.Acquire(f.ctx, lost, f.t0)
	var re *idemredis.ReplicationError
	if !errors.Is(err, idemredis.ErrNotReplicated) || !errors.As(err, &re) || re.Acked != 0 || re.Want != 1 {
		t.Fatalf("Acquire without the replica = %v; want ErrNotReplicated, 0 of 1 acknowledged", err)
	}
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Errorf("Acquire returned after %v, before WAIT's timeout", d)
	}
	t.Logf("Acquire without the replica: %v", err)
	if _, err := f.s.Get(f.ctx, lost.Key); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the claim that was not replicated is still held: Get = %v", err)
	}

	held := f.claim("scope#complete-not-replicated")
	plain := redistest.NewStore(t, f.client, idemredis.WithPrefix(f.s.Prefix()))
	if _, err := plain.Acquire(f.ctx, held, f.t0); err != nil {
		t.Fatal(err)
	}
	done := *held
	done.Status, done.Result = store.StatusCompleted, []byte(`"x"`)
	if err := short.Complete(f.ctx, &done); !errors.Is(err, idemredis.ErrNotReplicated) {
		t.Errorf("Complete without the replica = %v; want ErrNotReplicated", err)
	}
	// The completion is on the primary, and retrying it is harmless.
	if got, err := f.s.Get(f.ctx, held.Key); err != nil || got.Status != store.StatusCompleted {
		t.Errorf("after an unreplicated Complete the primary holds %+v, %v", got, err)
	}
	if err := plain.Complete(f.ctx, &done); err != nil {
		t.Errorf("retried Complete = %v", err)
	}
}

func TestReplicasOption(t *testing.T) {
	client := redistest.NewClient(t)
	for _, opt := range []idemredis.Option{idemredis.WithReplicas(0, time.Second), idemredis.WithReplicas(1, 0)} {
		if _, err := idemredis.New(client, opt); err == nil {
			t.Errorf("New accepted an invalid WithReplicas")
		}
	}
	ring := goredis.NewRing(&goredis.RingOptions{Addrs: map[string]string{"a": client.Options().Addr}})
	defer ring.Close()
	if _, err := idemredis.New(ring, idemredis.WithReplicas(1, time.Second), idemredis.WithoutServerCheck()); err == nil || !strings.Contains(err.Error(), "Ring") {
		t.Errorf("New(Ring, WithReplicas) = %v; want an error naming the client type", err)
	}
}
