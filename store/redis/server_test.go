package redis_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idemguard/idemguard/internal/testing/redistest"
	"github.com/idemguard/idemguard/store"
	idemredis "github.com/idemguard/idemguard/store/redis"
	"github.com/idemguard/idemguard/store/storetest"
)

// These tests change the shared server's configuration and put it back;
// none of them runs in parallel with other tests.

// setConfig sets a server parameter for the test and restores it after.
func setConfig(t *testing.T, c *goredis.Client, name, value string) {
	t.Helper()
	ctx := context.Background()
	old, err := c.ConfigGet(ctx, name).Result()
	if err != nil {
		t.Fatalf("CONFIG GET %s: %v", name, err)
	}
	if err := c.ConfigSet(ctx, name, value).Err(); err != nil {
		t.Fatalf("CONFIG SET %s %s: %v", name, value, err)
	}
	t.Cleanup(func() {
		if err := c.ConfigSet(context.Background(), name, old[name]).Err(); err != nil {
			t.Errorf("restoring %s to %s: %v", name, old[name], err)
		}
	})
}

// logTo returns a logger that writes to a buffer, and the buffer.
func logTo() (*slog.Logger, *syncBuffer) {
	var b syncBuffer
	return slog.New(slog.NewTextHandler(&b, &slog.HandlerOptions{Level: slog.LevelWarn})), &b
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func TestMaxmemoryPolicyWarning(t *testing.T) {
	client := redistest.NewClient(t)
	log, buf := logTo()
	if _, err := idemredis.New(client, idemredis.WithLogger(log)); err != nil {
		t.Fatal(err)
	}
	if buf.String() != "" {
		t.Errorf("New under noeviction logged %q; want nothing", buf)
	}

	setConfig(t, client, "maxmemory-policy", "allkeys-lru")
	if _, err := idemredis.New(client, idemredis.WithLogger(log)); err != nil {
		t.Fatal(err)
	}
	if out := buf.String(); !strings.Contains(out, "level=WARN") || !strings.Contains(out, "maxmemory-policy=allkeys-lru") || !strings.Contains(out, "noeviction") {
		t.Errorf("New under allkeys-lru logged %q; want a warning naming the policy and noeviction", out)
	}

	// WithoutServerCheck sends nothing, so it cannot warn.
	*buf = syncBuffer{}
	n := redistest.CountRequests(client)
	if _, err := idemredis.New(client, idemredis.WithLogger(log), idemredis.WithoutServerCheck()); err != nil {
		t.Fatal(err)
	}
	if buf.String() != "" || n.Total() != 0 {
		t.Errorf("New with WithoutServerCheck logged %q and sent %s; want nothing", buf, n)
	}
}

// aclUser creates an ACL user with the rules and returns a client logged
// in as it.
func aclUser(t *testing.T, admin *goredis.Client, name string, rules ...string) *goredis.Client {
	t.Helper()
	ctx := context.Background()
	args := []any{"ACL", "SETUSER", name, "reset", "on", ">secret-" + name}
	for _, r := range rules {
		args = append(args, r)
	}
	if err := admin.Do(ctx, args...).Err(); err != nil {
		t.Fatalf("ACL SETUSER %s: %v", name, err)
	}
	t.Cleanup(func() { admin.Do(context.Background(), "ACL", "DELUSER", name) })
	return redistest.NewClient(t, func(o *goredis.Options) { o.Username, o.Password = name, "secret-"+name })
}

// TestACL runs the conformance suite as a user that may run only the
// commands docs/redis.md lists, on keys under the store's prefix, and
// checks that New warns when CONFIG GET is refused and stays quiet when it
// is allowed.
func TestACL(t *testing.T) {
	admin := redistest.NewClient(t)
	minimal := []string{"~idemguard-test:*",
		"+evalsha", "+eval", "+script|load", "+hgetall", "+del", "+scan", "+wait", // sent by the store
		"+type", "+hmget", "+hget", "+hset", "+hdel", "+pexpireat", // run inside its scripts
		"&idemguard-test:*", "+ssubscribe", "+sunsubscribe", "+ping", "+spublish", // Watch, and the scripts' publish
	}
	for _, c := range []struct {
		name     string
		config   bool
		wantWarn string
	}{
		{"without-config", false, "could not check maxmemory-policy"},
		{"with-config-get", true, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			rules := minimal
			if c.config {
				rules = append(append([]string(nil), minimal...), "+config|get")
			}
			client := aclUser(t, admin, "idemguard-"+c.name, rules...)
			log, buf := logTo()
			if _, err := idemredis.New(client, idemredis.WithLogger(log)); err != nil {
				t.Fatal(err)
			}
			if out := buf.String(); c.wantWarn == "" && out != "" || c.wantWarn != "" && !strings.Contains(out, c.wantWarn) {
				t.Errorf("New logged %q; want %q", out, c.wantWarn)
			}
			storetest.Run(t, func(t *testing.T) store.Store {
				return redistest.NewStore(t, client, idemredis.WithLogger(log))
			})
		})
	}
}

// TestProtoMaxBulkLen: New reads the server's largest value and caps the
// result limit by it; a result over the limit is refused before anything
// is sent.
func TestProtoMaxBulkLen(t *testing.T) {
	f := newFixture(t)
	if got := f.s.MaxResultSize(); got != 512<<20 {
		t.Errorf("MaxResultSize under the default proto-max-bulk-len = %d, want 512 MiB", got)
	}
	setConfig(t, f.client, "proto-max-bulk-len", "1048576")
	for _, opts := range [][]idemredis.Option{nil, {idemredis.WithMaxResultSize(4 << 20)}} {
		s := redistest.NewStore(t, f.client, opts...)
		if got := s.MaxResultSize(); got != 1<<20 {
			t.Errorf("MaxResultSize with options %d under proto-max-bulk-len 1 MiB = %d", len(opts), got)
		}
	}
	small := redistest.NewStore(t, f.client, idemredis.WithMaxResultSize(1000))
	if got := small.MaxResultSize(); got != 1000 {
		t.Errorf("MaxResultSize with WithMaxResultSize(1000) = %d", got)
	}
	s := redistest.NewStore(t, f.client)
	rec := f.claim("scope#too-large")
	if _, err := s.Acquire(f.ctx, rec, f.t0); err != nil {
		t.Fatal(err)
	}
	done := *rec
	done.Status = store.StatusCompleted
	done.Result = make([]byte, 1<<20+1)
	rand.Read(done.Result)
	f.n.Reset()
	if err := s.Complete(f.ctx, &done); !errors.Is(err, store.ErrTooLarge) {
		t.Errorf("Complete over proto-max-bulk-len = %v, want ErrTooLarge", err)
	}
	if f.n.Total() != 0 {
		t.Errorf("a refused Complete sent %s", f.n)
	}
	done.Result = done.Result[:1<<20]
	if err := s.Complete(f.ctx, &done); err != nil {
		t.Errorf("Complete at proto-max-bulk-len = %v", err)
	}
}

// TestScriptCacheFlushed: after SCRIPT FLUSH (a restart, a failover to a
// replica without the scripts) every call still works, through EVAL.
func TestScriptCacheFlushed(t *testing.T) {
	f := newFixture(t)
	rec := f.claim("scope#flushed")
	for _, step := range []struct {
		name string
		call func() error
	}{
		{"Acquire", func() error { _, err := f.s.Acquire(f.ctx, rec, f.t0); return err }},
		{"Extend", func() error { return f.s.Extend(f.ctx, rec.Key, rec.Token, f.t0.Add(time.Minute), f.t0.Add(time.Hour)) }},
		{"Release", func() error { return f.s.Release(f.ctx, rec.Key, rec.Token) }}, // a claim in progress
		{"Acquire again", func() error { _, err := f.s.Acquire(f.ctx, rec, f.t0); return err }},
		{"Complete", func() error {
			done := *rec
			done.Result = []byte(`"ok"`)
			return f.s.Complete(f.ctx, &done)
		}},
	} {
		if err := f.client.ScriptFlush(f.ctx).Err(); err != nil {
			t.Fatal(err)
		}
		f.n.Reset()
		if err := step.call(); err != nil {
			t.Fatalf("%s after SCRIPT FLUSH = %v", step.name, err)
		}
		if f.n.Get("evalsha") != 1 || f.n.Get("eval") != 1 {
			t.Errorf("%s after SCRIPT FLUSH sent %s; want the EVALSHA refused, then EVAL", step.name, f.n)
		}
		f.n.Reset()
		if step.name == "Acquire" {
			if _, err := f.s.Acquire(f.ctx, f.claim(rec.Key), f.t0); !errors.Is(err, store.ErrConflict) {
				t.Fatalf("second Acquire = %v", err)
			}
			if f.n.Get("evalsha") != 1 || f.n.Get("eval") != 0 {
				t.Errorf("Acquire once the script is back sent %s; want EVALSHA alone", f.n)
			}
		}
	}
}
