package chaos

import (
	"bufio"
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idemguard/idemguard/internal/testenv"
)

// Each fault of the Redis proxy as go-redis sees it: whether the command
// fails, and how many times it ran on the server (INCR counts them).
func TestRedisProxyFaults(t *testing.T) {
	addr := testenv.Require(t, RedisAddrEnv, "redis-server")
	direct := goredis.NewClient(&goredis.Options{Addr: addr})
	t.Cleanup(func() { direct.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, tc := range []struct {
		fault Fault
		fails bool // the command returns an error
		ran   int  // times the command ran on the server
	}{
		{"", false, 1},
		{FaultReset, false, 1},          // not forwarded; go-redis retries on a new connection
		{FaultResetAfter, false, 2},     // ran, its reply lost to a reset; go-redis retries, and it runs again
		{FaultConnCloseAfter, false, 2}, // the same with EOF
		{FaultLatency, false, 1},
	} {
		name := string(tc.fault)
		if name == "" {
			name = "none"
		}
		t.Run(name, func(t *testing.T) {
			key := "chaos-proxy-test:" + randomID()
			t.Cleanup(func() { direct.Del(context.Background(), key) })
			p := newRedisProxy(t, addr, FaultConfig{MaxLatency: 200 * time.Millisecond})
			c := goredis.NewClient(&goredis.Options{Addr: p.Addr(), PoolSize: 1, MinRetryBackoff: time.Millisecond, MaxRetryBackoff: 5 * time.Millisecond})
			defer c.Close()
			if err := c.Ping(ctx).Err(); err != nil { // the connection and its handshake, without faults
				t.Fatal(err)
			}
			before := p.Requests()
			p.setScript(tc.fault)
			start := time.Now()
			err := c.Incr(ctx, key).Err()
			if (err != nil) != tc.fails {
				t.Errorf("INCR through %q: error %v; want an error: %v", tc.fault, err, tc.fails)
			}
			if n, _ := direct.Get(ctx, key).Int(); n != tc.ran {
				t.Errorf("INCR through %q ran %d times on the server; want %d", tc.fault, n, tc.ran)
			}
			if tc.fault == FaultLatency && time.Since(start) < 20*time.Millisecond {
				t.Errorf("latency: the reply came after %v; want at least 20 ms", time.Since(start))
			}
			if got := p.Counts()[tc.fault]; tc.fault != "" && got != 1 {
				t.Errorf("counted %d %s faults; want 1", got, tc.fault)
			}
			if p.Requests() <= before {
				t.Errorf("the proxy counted no command")
			}
			if err := c.Ping(ctx).Err(); err != nil {
				t.Errorf("PING after the fault: %v; want a new connection to work", err)
			}
		})
	}
	// An error reply is LOADING, which go-redis retries (the command then
	// runs once), or BUSY, which it returns (the command does not run).
	seen := map[bool]bool{}
	for i := 0; i < 40 && len(seen) < 2; i++ {
		key := "chaos-proxy-test:" + randomID()
		p := newRedisProxy(t, addr, FaultConfig{Seed: uint64(i)})
		c := goredis.NewClient(&goredis.Options{Addr: p.Addr(), PoolSize: 1, MinRetryBackoff: time.Millisecond, MaxRetryBackoff: 5 * time.Millisecond})
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		p.setScript(FaultErrorReply)
		err := c.Incr(ctx, key).Err()
		n, _ := direct.Get(ctx, key).Int()
		direct.Del(ctx, key)
		c.Close()
		switch {
		case err == nil && n == 1:
			seen[false] = true
		case err != nil && strings.HasPrefix(err.Error(), "BUSY ") && n == 0:
			seen[true] = true
		default:
			t.Fatalf("INCR through an error reply: %v, ran %d times; want LOADING retried (no error, 1 run) or BUSY (an error, no run)", err, n)
		}
	}
	if len(seen) < 2 {
		t.Errorf("40 error replies were all of one kind: %v", seen)
	}
}

func newRedisProxy(t *testing.T, target string, cfg FaultConfig) *RedisProxy {
	t.Helper()
	p, err := NewRedisProxy(target, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// setScript makes the next commands get faults, in order.
func (p *faultPicker) setScript(faults ...Fault) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.script = append(p.script[:0], faults...)
}

// The proxy reads whole replies of every RESP2 and RESP3 type, so that it
// loses or passes exactly one reply per command.
func TestReadReply(t *testing.T) {
	replies := []string{
		"+OK\r\n",
		"-ERR bad\r\n",
		":42\r\n",
		"$5\r\nhello\r\n",
		"$-1\r\n",
		"$0\r\n\r\n",
		"*-1\r\n",
		"*0\r\n",
		"*3\r\n$6\r\nstatus\r\n$9\r\nCOMPLETED\r\n:1\r\n",
		"*2\r\n*1\r\n+a\r\n$4\r\na\r\nb\r\n",
		"%2\r\n+server\r\n$5\r\nredis\r\n+proto\r\n:3\r\n",
		"~2\r\n+a\r\n+b\r\n",
		",3.14\r\n", "#t\r\n", "_\r\n", "(12345678901234567890\r\n",
		"=9\r\ntxt:hello\r\n", "!5\r\noops!\r\n",
		"|1\r\n+key-popularity\r\n%1\r\n$1\r\na\r\n,0.5\r\n*1\r\n:2\r\n",
		">2\r\n+message\r\n+x\r\n",
	}
	stream := strings.Join(replies, "")
	r := bufio.NewReader(strings.NewReader(stream))
	for _, want := range replies {
		var buf bytes.Buffer
		if err := readReply(r, &buf); err != nil {
			t.Fatalf("reading %q: %v", want, err)
		}
		if buf.String() != want {
			t.Errorf("read %q; want %q", buf.String(), want)
		}
	}
	for _, bad := range []string{"?\r\n", "$x\r\n", ":1\n", "$5\r\nab"} {
		var buf bytes.Buffer
		if err := readReply(bufio.NewReader(strings.NewReader(bad)), &buf); err == nil {
			t.Errorf("reading %q: no error", bad)
		}
	}
	cmd := "*3\r\n$7\r\nEVALSHA\r\n$4\r\nab\r\n\r\n$1\r\n0\r\n"
	var buf bytes.Buffer
	if err := readCommand(bufio.NewReader(strings.NewReader(cmd+"*1\r\n$4\r\nPING\r\n")), &buf); err != nil || buf.String() != cmd {
		t.Errorf("readCommand = %q, %v; want %q", buf.String(), err, cmd)
	}
}
