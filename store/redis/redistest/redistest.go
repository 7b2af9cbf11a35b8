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
	"fmt"
	"net"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idemguard/idemguard/internal/testenv"
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

// Counter is a go-redis hook that counts what a client sends: round trips
// (a command, or a whole pipeline) and commands by name ("evalsha",
// "hgetall", …). The commands go-redis sends by itself when it opens a
// pooled connection (HELLO, AUTH, SELECT, CLIENT SETINFO and the like) are
// counted apart, by [Counter.Setup]: they are paid once per connection, not
// per call. It is safe for concurrent use.
type Counter struct {
	mu     sync.Mutex
	trips  int            // protected by mu
	setup  int            // protected by mu
	byName map[string]int // protected by mu
}

// setupCommands are the commands go-redis sends when it opens a connection.
var setupCommands = map[string]bool{"hello": true, "auth": true, "select": true, "client": true, "readonly": true}

// CountRequests adds a [Counter] to client's hooks and returns it.
func CountRequests(client goredis.UniversalClient) *Counter {
	c := &Counter{}
	client.AddHook(c)
	return c
}

// DialHook implements goredis.Hook.
func (c *Counter) DialHook(next goredis.DialHook) goredis.DialHook { return next }

// ProcessHook implements goredis.Hook: one round trip per command.
func (c *Counter) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		c.add(cmd)
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook implements goredis.Hook: one round trip per pipeline.
func (c *Counter) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		c.add(cmds...)
		return next(ctx, cmds)
	}
}

func (c *Counter) add(cmds ...goredis.Cmder) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byName == nil {
		c.byName = make(map[string]int)
	}
	setup := true
	for _, cmd := range cmds {
		setup = setup && setupCommands[strings.ToLower(cmd.Name())]
	}
	if setup {
		c.setup++
		return
	}
	c.trips++
	for _, cmd := range cmds {
		c.byName[strings.ToLower(cmd.Name())]++
	}
}

// Setup returns the round trips of connection set-up, which Total leaves
// out.
func (c *Counter) Setup() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.setup
}

// Reset sets every count to zero.
func (c *Counter) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.trips, c.setup, c.byName = 0, 0, nil
}

// Total returns the round trips counted: commands sent alone plus
// pipelines, without connection set-up.
func (c *Counter) Total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.trips
}

// Get returns the count of the command name (lower case).
func (c *Counter) Get(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byName[name]
}

// String lists the round trips and the commands, e.g.
// "2 round trips: evalsha=2" or "1 round trip: hgetall=100".
func (c *Counter) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	names := make([]string, 0, len(c.byName))
	for n := range c.byName {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s=%d", n, c.byName[n])
	}
	unit := "round trips"
	if c.trips == 1 {
		unit = "round trip"
	}
	return fmt.Sprintf("%d %s: %s", c.trips, unit, strings.Join(parts, " "))
}
