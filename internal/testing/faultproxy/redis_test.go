package faultproxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idemguard/idemguard/internal/testing/testenv"
)

// Each fault of the Redis proxy as go-redis sees it: whether the command
// fails, and how many times it ran on the server (INCR counts them).
func TestRedisProxyFaults(t *testing.T) {
	addr := testenv.Require(t, testenv.RedisAddr, "redis-server")
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
		{Reset, false, 1},          // not forwarded; go-redis retries on a new connection
		{ResetAfter, false, 2},     // ran, its reply lost to a reset; go-redis retries, and it runs again
		{ConnCloseAfter, false, 2}, // the same with EOF
		{Latency, false, 1},
	} {
		name := string(tc.fault)
		if name == "" {
			name = "none"
		}
		t.Run(name, func(t *testing.T) {
			key := "chaos-proxy-test:" + randomID()
			t.Cleanup(func() { direct.Del(context.Background(), key) })
			p := newRedisProxy(t, addr, Config{MaxLatency: 200 * time.Millisecond})
			c := goredis.NewClient(&goredis.Options{Addr: p.Addr(), PoolSize: 1, MinRetryBackoff: time.Millisecond, MaxRetryBackoff: 5 * time.Millisecond})
			defer c.Close()
			if err := c.Ping(ctx).Err(); err != nil { // the connection and its handshake, without faults
				t.Fatal(err)
			}
			before := p.Requests()
			p.SetScript(tc.fault)
			start := time.Now()
			err := c.Incr(ctx, key).Err()
			if (err != nil) != tc.fails {
				t.Errorf("INCR through %q: error %v; want an error: %v", tc.fault, err, tc.fails)
			}
			if n, _ := direct.Get(ctx, key).Int(); n != tc.ran {
				t.Errorf("INCR through %q ran %d times on the server; want %d", tc.fault, n, tc.ran)
			}
			if tc.fault == Latency && time.Since(start) < 20*time.Millisecond {
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
		p := newRedisProxy(t, addr, Config{Seed: uint64(i)})
		c := goredis.NewClient(&goredis.Options{Addr: p.Addr(), PoolSize: 1, MinRetryBackoff: time.Millisecond, MaxRetryBackoff: 5 * time.Millisecond})
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		p.SetScript(ErrorReply)
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

func newRedisProxy(t *testing.T, target string, cfg Config) *Redis {
	t.Helper()
	p, err := NewRedis(target, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// randomID returns 64 random bits, hex.
func randomID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Retarget cuts the connections open through the proxy, and the client's
// next connection reaches the new target.
func TestRedisProxyRetarget(t *testing.T) {
	addr := testenv.Require(t, testenv.RedisAddr, "redis-server")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := newRedisProxy(t, addr, Config{})
	c := goredis.NewClient(&goredis.Options{Addr: p.Addr(), PoolSize: 1, MaxRetries: -1})
	defer c.Close()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	// A second server: a fake that answers PING, and refuses the rest
	// (HELLO, CLIENT SETINFO) as an old server would.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	seen := make(chan struct{}, 1)
	go func() {
		for {
			s, err := ln.Accept()
			if err != nil {
				return
			}
			select {
			case seen <- struct{}{}:
			default:
			}
			go func() {
				defer s.Close()
				r := bufio.NewReader(s)
				var buf bytes.Buffer
				for {
					buf.Reset()
					if readCommand(r, &buf) != nil {
						return
					}
					if strings.Contains(strings.ToUpper(buf.String()), "PING") {
						s.Write([]byte("+PONG\r\n"))
					} else {
						s.Write([]byte("-ERR unknown command\r\n"))
					}
				}
			}()
		}
	}()
	if err := p.Retarget(ln.Addr().String()); err != nil {
		t.Fatal(err)
	}
	// The pooled connection was cut: the first command may fail on it.
	var perr error
	for range 3 {
		if perr = c.Ping(ctx).Err(); perr == nil {
			break
		}
	}
	if perr != nil {
		t.Fatalf("PING after Retarget: %v", perr)
	}
	select {
	case <-seen:
	default:
		t.Errorf("no connection reached the new target")
	}
	if err := p.Retarget("10.0.0.1:6379"); err == nil {
		t.Errorf("Retarget accepted a target that is not on loopback")
	}
}
