package faultproxy

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemguard/idemguard/internal/testing/testenv"
)

// viaProxy returns the PostgreSQL URL raw with its host and port replaced
// by addr.
func viaProxy(t *testing.T, raw, addr string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = addr
	q := u.Query()
	q.Set("sslmode", "disable")
	u.RawQuery = q.Encode()
	return u.String()
}

func newPostgresProxy(t *testing.T, target string, cfg Config) *Postgres {
	t.Helper()
	p, err := NewPostgres(target, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// Each fault of the PostgreSQL proxy as pgx sees it: whether the request
// fails, and whether it ran on the server (a row counts it), for a single
// statement and for a pipeline of statements sent together.
func TestPostgresProxyFaults(t *testing.T) {
	raw := testenv.Require(t, testenv.PostgresURL, "PostgreSQL server")
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	direct, err := pgx.Connect(ctx, raw)
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close(context.Background())
	table := "faultproxy_" + randomID()
	if _, err := direct.Exec(ctx, "CREATE TABLE "+table+" (id text PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { direct.Exec(context.Background(), "DROP TABLE "+table) })

	for _, tc := range []struct {
		fault Fault
		fails bool
		ran   bool
	}{
		{"", false, true},
		{Reset, true, false},
		{ResetAfter, true, true},
		{ConnCloseAfter, true, true},
		{Latency, false, true},
	} {
		for _, batch := range []bool{false, true} {
			name := fmt.Sprintf("%s/batch=%v", tc.fault, batch)
			if tc.fault == "" {
				name = fmt.Sprintf("none/batch=%v", batch)
			}
			t.Run(name, func(t *testing.T) {
				p := newPostgresProxy(t, u.Host, Config{MaxLatency: 200 * time.Millisecond})
				c, err := pgx.Connect(ctx, viaProxy(t, raw, p.Addr()))
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close(context.Background())
				// Prepare the statements first, without faults, so that
				// the faulted request is the statement or pipeline itself.
				id := randomID()
				ins := "INSERT INTO " + table + " (id) VALUES ($1)"
				if _, err := c.Prepare(ctx, "ins", ins); err != nil {
					t.Fatal(err)
				}
				var warm pgx.Batch
				warm.Queue("BEGIN")
				warm.Queue("COMMIT")
				if err := c.SendBatch(ctx, &warm).Close(); err != nil {
					t.Fatal(err)
				}
				before := p.Requests()
				p.SetScript(tc.fault)
				start := time.Now()
				if batch {
					var b pgx.Batch
					b.Queue("BEGIN")
					b.Queue("ins", id)
					b.Queue("COMMIT")
					err = c.SendBatch(ctx, &b).Close()
				} else {
					_, err = c.Exec(ctx, "ins", id)
				}
				if (err != nil) != tc.fails {
					t.Errorf("through %q: error %v; want an error: %v", tc.fault, err, tc.fails)
				}
				var n int
				// The server may still be finishing a request whose
				// answer was lost: wait for it.
				for range 50 {
					if err := direct.QueryRow(ctx, "SELECT count(*) FROM "+table+" WHERE id = $1", id).Scan(&n); err != nil {
						t.Fatal(err)
					}
					if n > 0 || !tc.ran {
						break
					}
					time.Sleep(20 * time.Millisecond)
				}
				if (n == 1) != tc.ran {
					t.Errorf("through %q: %d rows; want ran=%v", tc.fault, n, tc.ran)
				}
				if tc.fault == Latency && time.Since(start) < 20*time.Millisecond {
					t.Errorf("latency: answered after %v; want at least 20 ms", time.Since(start))
				}
				if tc.fault != "" && p.Counts()[tc.fault] != 1 {
					t.Errorf("counted %v; want one %s", p.Counts(), tc.fault)
				}
				if p.Requests() != before+1 {
					t.Errorf("the proxy counted %d requests; want 1", p.Requests()-before)
				}
				if tc.fails {
					return
				}
				// The connection still works.
				var one int
				if err := c.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
					t.Errorf("SELECT 1 after the fault: %d, %v", one, err)
				}
			})
		}
	}
}

// Retarget cuts the connections open through the proxy; new ones reach
// the new target.
func TestPostgresProxyRetarget(t *testing.T) {
	raw := testenv.Require(t, testenv.PostgresURL, "PostgreSQL server")
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := newPostgresProxy(t, "127.0.0.1:1", Config{}) // nothing listens there
	if _, err := pgx.Connect(ctx, viaProxy(t, raw, p.Addr())); err == nil {
		t.Fatal("connected through a proxy whose target does not listen")
	}
	if err := p.Retarget(u.Host); err != nil {
		t.Fatal(err)
	}
	c, err := pgx.Connect(ctx, viaProxy(t, raw, p.Addr()))
	if err != nil {
		t.Fatalf("connecting after Retarget: %v", err)
	}
	defer c.Close(context.Background())
	if err := p.Retarget(u.Host); err != nil {
		t.Fatal(err)
	}
	var one int
	if err := c.QueryRow(ctx, "SELECT 1").Scan(&one); err == nil {
		t.Errorf("a connection open through the proxy survived Retarget")
	}
	if err := p.Retarget("10.0.0.1:5432"); err == nil {
		t.Errorf("Retarget accepted a target that is not on loopback")
	}
}

func TestPostgresProxyLoopbackOnly(t *testing.T) {
	for _, target := range []string{"10.0.0.1:5432", "example.com:5432"} {
		if _, err := NewPostgres(target, Config{}); err == nil {
			t.Errorf("NewPostgres(%s) accepted a target that is not on loopback", target)
		}
	}
}

// echo starts a loopback server that writes back what it reads.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 1024)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						c.Write(buf[:n])
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// The delay line holds each direction back by its delay, and keeps the
// bytes and their order.
func TestDelay(t *testing.T) {
	const d = 40 * time.Millisecond
	p, err := NewDelay(echo(t), d)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	msg := strings.Repeat("0123456789", 100)
	start := time.Now()
	for i := 0; i < len(msg); i += 100 {
		if _, err := c.Write([]byte(msg[i : i+100])); err != nil {
			t.Fatal(err)
		}
	}
	got := make([]byte, 0, len(msg))
	buf := make([]byte, 256)
	for len(got) < len(msg) {
		n, err := c.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, buf[:n]...)
	}
	if rt := time.Since(start); rt < 2*d {
		t.Errorf("round trip %v; want at least twice the delay, %v", rt, 2*d)
	}
	if string(got) != msg {
		t.Errorf("the bytes came back changed or out of order")
	}
}
