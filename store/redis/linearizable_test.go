package redis_test

import (
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idemguard/idemguard/internal/testing/faultproxy"
	"github.com/idemguard/idemguard/internal/testing/linz"
	"github.com/idemguard/idemguard/internal/testing/redistest"
	"github.com/idemguard/idemguard/store"
	idemredis "github.com/idemguard/idemguard/store/redis"
	"github.com/idemguard/idemguard/store/storetest"
)

// The store keeps expiration in epoch seconds (rounded up) and
// in_progress_expiration in milliseconds.
var precision = linz.Precision{Expiry: time.Second, Lease: time.Millisecond}

var linzFaults = faultproxy.Config{Rate: 0.08, MaxLatency: 150 * time.Millisecond}

// linzStore returns a store under a fresh prefix whose client reaches
// redis-server through a fault proxy (resets before and after a command
// ran, replies lost to a closed connection, LOADING and BUSY replies,
// latency), with go-redis's retries off: every attempt is an operation in
// the history, and the recorder repeats lost requests itself.
func linzStore(t *testing.T, faults faultproxy.Config, opts ...idemredis.Option) store.Store {
	t.Helper()
	p, err := faultproxy.NewRedis(redistest.Addr(t), faults)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	client := goredis.NewClient(&goredis.Options{Addr: p.Addr(), MaxRetries: -1})
	t.Cleanup(func() { client.Close() })
	direct := redistest.NewClient(t)
	s := redistest.NewStore(t, direct) // only for its fresh prefix and the clean-up
	rs, err := idemredis.New(client, append([]idemredis.Option{idemredis.WithPrefix(s.Prefix()), idemredis.WithoutServerCheck()}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// Histories of concurrent claims on a few hot keys through the fault
// proxy are linearizable.
func TestLinearizable(t *testing.T) {
	storetest.RunLinearizable(t, linzStore(t, linzFaults), storetest.WithPrecision(precision.Expiry, precision.Lease), storetest.WithOps(1500))
}

// Each broken store is caught.
func TestLinearizableMutants(t *testing.T) {
	linz.RunMutants(t, func(t *testing.T) store.Store { return linzStore(t, linzFaults) }, precision, linz.HistoryConfig{Ops: 600})
}
