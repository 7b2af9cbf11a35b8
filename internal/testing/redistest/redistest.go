// Package redistest connects tests to the redis-server the harness starts:
// a client from the environment, a store under a fresh key prefix per test,
// and a hook that counts the round trips a client makes.
//
// Tests that need the server call [NewClient], which reads the address from
// the environment variable IDEMGUARD_REDIS_ADDR (for example
// 127.0.0.1:6379). When it is unset the test is skipped, or fails if
// CI=true, so that a CI run without the server cannot pass silently. The
// repository's scripts/harness.sh starts redis-server and sets the
// variable:
//
//	IDEMGUARD_SERVICES=redis scripts/harness.sh run go test ./store/redis/...
package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idemguard/idemguard/internal/testing/reqcount"
	"github.com/idemguard/idemguard/internal/testing/testenv"
	idemredis "github.com/idemguard/idemguard/store/redis"
)

// AddrEnv is the environment variable that holds the server's address.
const AddrEnv = testenv.RedisAddr

// Addr returns the server's address from [AddrEnv]. If it is unset, Addr
// skips the test, or fails it when the environment variable CI is "true".
// It fails the test for an address that is not on loopback: tests must
// never send traffic off the machine.
func Addr(t testing.TB) string {
	t.Helper()
	addr := testenv.Require(t, AddrEnv, "redis-server")
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("%s=%q: %v", AddrEnv, addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		t.Fatalf("%s=%q is not a loopback address", AddrEnv, addr)
	}
	return addr
}

// NewClient returns a client for the server (see [Addr]), adjusted by
// optFns, and closes it when the test ends.
func NewClient(t testing.TB, optFns ...func(*goredis.Options)) *goredis.Client {
	t.Helper()
	o := &goredis.Options{Addr: Addr(t)}
	for _, f := range optFns {
		f(o)
	}
	c := goredis.NewClient(o)
	t.Cleanup(func() { c.Close() })
	return c
}

var invalidPrefixChars = regexp.MustCompile(`[^a-zA-Z0-9_.-]+`)

// Prefix returns a key prefix unique to this call, derived from the test's
// name, ending in ":".
func Prefix(t testing.TB) string {
	name := invalidPrefixChars.ReplaceAllString(t.Name(), "-")
	if len(name) > 80 {
		name = name[len(name)-80:]
	}
	var b [6]byte
	rand.Read(b[:])
	return "idemguard-test:" + name + "-" + hex.EncodeToString(b[:]) + ":"
}

// NewStore returns a store on client under a fresh prefix (see [Prefix]),
// with opts after it, and deletes the prefix's keys when the test ends.
func NewStore(t testing.TB, client goredis.UniversalClient, opts ...idemredis.Option) *idemredis.Store {
	t.Helper()
	prefix := Prefix(t)
	s, err := idemredis.New(client, append([]idemredis.Option{idemredis.WithPrefix(prefix)}, opts...)...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { DeletePrefix(t, client, s.Prefix()) })
	return s
}

// DeletePrefix deletes every key that starts with prefix, on every master
// of a Cluster.
func DeletePrefix(t testing.TB, client goredis.UniversalClient, prefix string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	deleteOn := func(ctx context.Context, node goredis.UniversalClient) error {
		iter := node.Scan(ctx, 0, globEscape(prefix)+"*", 1000).Iterator()
		pipe := client.Pipeline() // one DEL per key: keys may be in different slots
		for iter.Next(ctx) {
			pipe.Del(ctx, iter.Val())
		}
		if err := iter.Err(); err != nil {
			return err
		}
		_, err := pipe.Exec(ctx)
		return err
	}
	var err error
	if cc, ok := client.(*goredis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *goredis.Client) error { return deleteOn(ctx, c) })
	} else {
		err = deleteOn(ctx, client)
	}
	if err != nil {
		t.Errorf("deleting the keys under %q: %v", prefix, err)
	}
}

func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\^-`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// setupCommands are the commands go-redis sends when it opens a connection.
var setupCommands = map[string]bool{"hello": true, "auth": true, "select": true, "client": true, "readonly": true}

// CountRequests adds a hook to client that counts what it sends and
// returns the counter: one round trip per command sent alone or per
// pipeline, with the commands by lower-case name ("evalsha", "hgetall",
// …). The commands go-redis sends by itself when it opens a pooled
// connection (HELLO, AUTH, SELECT, CLIENT SETINFO and the like) count as
// set-up, apart from the total: they are paid once per connection, not
// per call.
func CountRequests(client goredis.UniversalClient) *reqcount.Counter {
	c := &reqcount.Counter{}
	client.AddHook(counter{c})
	return c
}

// counter is the go-redis hook of CountRequests.
type counter struct{ c *reqcount.Counter }

func (counter) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (h counter) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		h.add(cmd)
		return next(ctx, cmd)
	}
}

func (h counter) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		h.add(cmds...)
		return next(ctx, cmds)
	}
}

func (h counter) add(cmds ...goredis.Cmder) {
	names := make([]string, len(cmds))
	setup := true
	for i, cmd := range cmds {
		names[i] = strings.ToLower(cmd.Name())
		setup = setup && setupCommands[names[i]]
	}
	if setup {
		h.c.SetupTrip()
		return
	}
	h.c.Trip(names...)
}
