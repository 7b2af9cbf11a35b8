package redis_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idemguard/idemguard/internal/testing/redistest"
	"github.com/idemguard/idemguard/internal/testing/reqcount"
	"github.com/idemguard/idemguard/store"
	idemredis "github.com/idemguard/idemguard/store/redis"
)

// fixture is a store under a fresh prefix, with the raw client and a
// round-trip counter on that client.
type fixture struct {
	client *goredis.Client
	n      *reqcount.Counter
	s      *idemredis.Store
	ctx    context.Context
	t0     time.Time
}

func newFixture(t *testing.T, opts ...idemredis.Option) *fixture {
	t.Helper()
	f := &fixture{client: redistest.NewClient(t)}
	f.n = redistest.CountRequests(f.client)
	f.s = redistest.NewStore(t, f.client, opts...)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	f.ctx = ctx
	f.t0 = time.Now().Truncate(time.Second).Add(24 * time.Hour)
	f.n.Reset()
	return f
}

var tokens atomic.Int64

// claim returns an in-progress record for key: a one-minute lease and a
// one-hour life from f.t0.
func (f *fixture) claim(key string) *store.Record {
	return &store.Record{
		Key:            key,
		Status:         store.StatusInProgress,
		Token:          fmt.Sprintf("tok-%d", tokens.Add(1)),
		PayloadHash:    "ph-" + key,
		ExpiresAt:      f.t0.Add(time.Hour),
		LeaseExpiresAt: f.t0.Add(time.Minute),
	}
}

func (f *fixture) mustAcquire(t *testing.T, rec *store.Record) {
	t.Helper()
	if old, err := f.s.Acquire(f.ctx, rec, f.t0); err != nil {
		t.Fatalf("Acquire(%q) = %v, %v", rec.Key, old, err)
	}
}

// complete stores result as rec's outcome.
func (f *fixture) complete(t *testing.T, rec *store.Record, result []byte) *store.Record {
	t.Helper()
	done := *rec
	done.Status = store.StatusCompleted
	done.Result = result
	done.ExpiresAt = f.t0.Add(2 * time.Hour)
	if err := f.s.Complete(f.ctx, &done); err != nil {
		t.Fatalf("Complete(%q) = %v", rec.Key, err)
	}
	return &done
}

// key returns the Redis key of the record key.
func (f *fixture) key(k string) string { return f.s.Prefix() + k }

// raw reads the hash of the record key straight from the server.
func (f *fixture) raw(t *testing.T, k string) map[string]string {
	t.Helper()
	h, err := f.client.HGetAll(f.ctx, f.key(k)).Result()
	if err != nil {
		t.Fatalf("HGETALL %s: %v", f.key(k), err)
	}
	return h
}
