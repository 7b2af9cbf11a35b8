package redis_test

import (
	"bytes"
	"log/slog"
	"net"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	idemredis "github.com/idemguard/idemguard/store/redis"
)

// A server that cannot be reached when the store starts is said so once,
// clearly, not as a maxmemory-policy that could not be checked.
func TestNewUnreachableServer(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close() // nothing listens there now
	client := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1})
	defer client.Close()
	var logs bytes.Buffer
	if _, err := idemredis.New(client, idemredis.WithLogger(slog.New(slog.NewTextHandler(&logs, nil)))); err != nil {
		t.Fatalf("New: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], "cannot reach the Redis server") || !strings.Contains(lines[0], addr) || strings.Contains(lines[0], "CONFIG GET") {
		t.Errorf("logged %q; want one line saying the server at %s cannot be reached", lines, addr)
	}
}
