package redis_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idemguard/idemguard/guard/guardtest"
	"github.com/idemguard/idemguard/internal/testing/redistest"
	"github.com/idemguard/idemguard/store"
)

// TestRequestCounts checks the round trips of each store call, counted by
// a hook on the client.
func TestRequestCounts(t *testing.T) {
	f := newFixture(t)
	step := func(what string, cmd string, call func() error) {
		t.Helper()
		f.n.Reset()
		if err := call(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if f.n.Total() != 1 || f.n.Get(cmd) == 0 {
			t.Errorf("%s sent %s; want one round trip with %s", what, f.n, cmd)
		}
	}
	rec := f.claim("scope#counts")
	step("Acquire new", "evalsha", func() error {
		_, err := f.s.Acquire(f.ctx, rec, f.t0)
		return err
	})
	step("Acquire conflict (in progress)", "evalsha", func() error {
		old, err := f.s.Acquire(f.ctx, f.claim(rec.Key), f.t0)
		if !errors.Is(err, store.ErrConflict) || old == nil || old.Token != rec.Token {
			return fmt.Errorf("Acquire = %+v, %v; want the holder's record and ErrConflict", old, err)
		}
		return nil
	})
	step("Extend", "evalsha", func() error {
		return f.s.Extend(f.ctx, rec.Key, rec.Token, f.t0.Add(2*time.Minute), f.t0.Add(time.Hour))
	})
	step("Complete", "evalsha", func() error {
		done := *rec
		done.Result = []byte(`"ok"`)
		return f.s.Complete(f.ctx, &done)
	})
	step("Acquire conflict (completed)", "evalsha", func() error {
		old, err := f.s.Acquire(f.ctx, f.claim(rec.Key), f.t0)
		if !errors.Is(err, store.ErrConflict) || old == nil || string(old.Result) != `"ok"` {
			return fmt.Errorf("Acquire = %+v, %v; want the completed record and ErrConflict", old, err)
		}
		return nil
	})
	step("Get", "hgetall", func() error {
		_, err := f.s.Get(f.ctx, rec.Key)
		return err
	})
	step("GetMany", "hgetall", func() error {
		_, err := f.s.GetMany(f.ctx, []string{rec.Key, "scope#absent", rec.Key})
		return err
	})
	held := f.claim("scope#counts-release") // Release deletes a claim in progress only
	if _, err := f.s.Acquire(f.ctx, held, f.t0); err != nil {
		t.Fatal(err)
	}
	step("Release", "evalsha", func() error {
		return f.s.Release(f.ctx, held.Key, held.Token)
	})
}

// TestRequestFloor holds the guard to its round-trip floor
// (docs/redis.md) on a real redis-server, counting round trips with a hook
// on the client, and to the commands it sends: a first call runs the claim
// and the completion scripts; a replay runs the claim script, which returns
// the completed record; a batch's lookup is one pipeline of HGETALLs.
func TestRequestFloor(t *testing.T) {
	client := redistest.NewClient(t)
	n := redistest.CountRequests(client)
	guardtest.RunRequestFloor(t, func(t *testing.T) store.Store { return redistest.NewStore(t, client) }, n, guardtest.Sent{
		FirstCall:     "2 round trips: evalsha=2",
		Replay:        "1 round trip: evalsha=1",
		BatchFirstRun: "201 round trips: evalsha=200 hgetall=100",
		BatchReplay:   "1 round trip: hgetall=100",
	})
}
