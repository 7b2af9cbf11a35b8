package redis_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idemguard/idemguard/internal/testing/redistest"
	"github.com/idemguard/idemguard/store"
	idemredis "github.com/idemguard/idemguard/store/redis"
)

// TestThrottledOOM: with maxmemory reached under noeviction the server
// refuses writes with OOM; the store's error matches store.ErrThrottled,
// and reads go on.
func TestThrottledOOM(t *testing.T) {
	f := newFixture(t)
	held := f.claim("scope#before-oom")
	f.mustAcquire(t, held)
	setConfig(t, f.client, "maxmemory", "1")
	_, err := f.s.Acquire(f.ctx, f.claim("scope#oom"), f.t0)
	if !errors.Is(err, store.ErrThrottled) || !goredis.IsOOMError(err) {
		t.Errorf("Acquire over maxmemory = %v; want ErrThrottled wrapping OOM", err)
	}
	if _, err := f.s.Get(f.ctx, held.Key); err != nil {
		t.Errorf("Get over maxmemory = %v; reads are allowed", err)
	}
}

// TestThrottledBusy: while a script runs past busy-reply-threshold the
// server answers BUSY, which matches store.ErrThrottled.
func TestThrottledBusy(t *testing.T) {
	f := newFixture(t)
	setConfig(t, f.client, "busy-reply-threshold", "50")
	other := redistest.NewClient(t)
	done := make(chan error, 1)
	go func() {
		// A read-only script that loops until SCRIPT KILL.
		done <- other.Eval(context.Background(), "local i = 0 while true do i = i + 1 end", nil).Err()
	}()
	deadline := time.Now().Add(10 * time.Second)
	var err error
	for time.Now().Before(deadline) {
		if _, err = f.s.Get(f.ctx, "scope#busy"); err != nil && !errors.Is(err, store.ErrNotFound) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !errors.Is(err, store.ErrThrottled) || !strings.Contains(err.Error(), "BUSY") {
		t.Errorf("Get while a script is busy = %v; want ErrThrottled wrapping BUSY", err)
	}
	// SCRIPT KILL answers NOTBUSY once the script has ended.
	for f.client.ScriptKill(context.Background()).Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	<-done
}

// TestThrottledPoolTimeout: a client whose only connection is busy times
// out waiting for one; that matches store.ErrThrottled.
func TestThrottledPoolTimeout(t *testing.T) {
	client := redistest.NewClient(t, func(o *goredis.Options) {
		o.PoolSize, o.PoolTimeout, o.MaxIdleConns = 1, 50*time.Millisecond, 1
	})
	s := redistest.NewStore(t, client)
	blocked, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		close(blocked)
		client.BLPop(context.Background(), time.Second, s.Prefix()+"never")
	}()
	<-blocked
	time.Sleep(100 * time.Millisecond)
	_, err := s.Get(context.Background(), "scope#pool")
	if !errors.Is(err, store.ErrThrottled) || !errors.Is(err, goredis.ErrPoolTimeout) {
		t.Errorf("Get with the pool exhausted = %v; want ErrThrottled wrapping ErrPoolTimeout", err)
	}
	<-done
}

// redisErr is a server error reply, as go-redis reports them.
type redisErr string

func (e redisErr) Error() string { return string(e) }
func (redisErr) RedisError()     {}

// failHook makes every command fail with err.
type failHook struct{ err error }

func (failHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (h failHook) ProcessHook(goredis.ProcessHook) goredis.ProcessHook {
	return func(_ context.Context, cmd goredis.Cmder) error {
		cmd.SetErr(h.err)
		return h.err
	}
}
func (h failHook) ProcessPipelineHook(goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(_ context.Context, cmds []goredis.Cmder) error {
		for _, c := range cmds {
			c.SetErr(h.err)
		}
		return h.err
	}
}

// TestThrottleClassification injects the server's replies that mean
// "retry later" and some that do not.
func TestThrottleClassification(t *testing.T) {
	f := newFixture(t)
	for _, c := range []struct {
		err       error
		throttled bool
	}{
		{redisErr("OOM command not allowed when used memory > 'maxmemory'."), true},
		{redisErr("BUSY Redis is busy running a script."), true},
		{redisErr("LOADING Redis is loading the dataset in memory"), true},
		{redisErr("TRYAGAIN Multiple keys request during rehashing of slot"), true},
		{redisErr("ERR max number of clients reached"), true},
		{goredis.ErrPoolTimeout, true},
		{goredis.ErrPoolExhausted, true},
		{redisErr("READONLY You can't write against a read only replica."), false},
		{redisErr("NOPERM this user has no permissions to run the 'evalsha' command"), false},
		{redisErr("ERR syntax error"), false},
		{errors.New("dial tcp 127.0.0.1:1: connect: connection refused"), false},
	} {
		client := redistest.NewClient(t)
		client.AddHook(failHook{c.err})
		s, err := idemredis.New(client, idemredis.WithPrefix(redistest.Prefix(t)), idemredis.WithoutServerCheck())
		if err != nil {
			t.Fatal(err)
		}
		_, err = s.Acquire(f.ctx, f.claim("scope#classify"), f.t0)
		if got := errors.Is(err, store.ErrThrottled); got != c.throttled || !errors.Is(err, c.err) {
			t.Errorf("Acquire failing with %q = %v; throttled %v, want %v, wrapping the cause", c.err, err, got, c.throttled)
		}
		_, err = s.GetMany(f.ctx, []string{"scope#a", "scope#b"})
		if got := errors.Is(err, store.ErrThrottled); got != c.throttled {
			t.Errorf("GetMany failing with %q = %v; throttled %v, want %v", c.err, err, got, c.throttled)
		}
	}
}
