package redis_test

import (
	"context"
	"flag"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idemguard/idemguard/internal/testing/failovertest"
	"github.com/idemguard/idemguard/internal/testing/faultproxy"
	"github.com/idemguard/idemguard/internal/testing/linz"
	"github.com/idemguard/idemguard/store"
	idemredis "github.com/idemguard/idemguard/store/redis"
)

var failoverFlag = flag.Bool("failover", false, "run TestFailover: a primary and a replica of the test's own, the replica promoted under load")

// failoverRig is a primary, a replica that reaches it through a delaying
// link (the replication lag a failover can lose), and a front proxy the
// clients connect to, which a failover points at the replica, as a
// virtual IP or Sentinel-aware client would.
type failoverRig struct {
	primary, replica *goredis.Client // direct, for administration
	link             *faultproxy.Delay
	front            *faultproxy.Redis
	client           *goredis.Client // through front, go-redis retries off
}

func newFailoverRig(t *testing.T, lag time.Duration) *failoverRig {
	t.Helper()
	r := &failoverRig{}
	r.primary, _ = startServer(t, func(c *goredis.Client) bool { return c.Ping(context.Background()).Err() == nil },
		"--maxmemory-policy", "noeviction", "--repl-diskless-sync-delay", "0")
	var err error
	if r.link, err = faultproxy.NewDelay(r.primary.Options().Addr, lag); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.link.Close() })
	r.replica, _ = startReplica(t, r.link.Addr())
	if r.front, err = faultproxy.NewRedis(r.primary.Options().Addr, faultproxy.Config{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.front.Close() })
	r.client = goredis.NewClient(&goredis.Options{Addr: r.front.Addr(), MaxRetries: -1, PoolSize: 64})
	t.Cleanup(func() { r.client.Close() })
	return r
}

// failover loses the primary with what its link had not delivered, sends
// the clients to the replica (commands in flight on the primary lose
// their answers) and promotes it.
func (r *failoverRig) failover(t *testing.T) {
	t.Helper()
	r.link.Close()
	if err := r.front.Retarget(r.replica.Options().Addr); err != nil {
		t.Fatal(err)
	}
	if err := r.replica.Do(context.Background(), "REPLICAOF", "NO", "ONE").Err(); err != nil {
		t.Fatalf("REPLICAOF NO ONE: %v", err)
	}
}

// runFailover drives s through the rig for before, fails over, goes on for
// after, and measures what the promoted replica lost of the writes the
// primary acknowledged.
func runFailover(t *testing.T, r *failoverRig, s *idemredis.Store, replicated bool, before, after time.Duration) failovertest.Figures {
	t.Helper()
	return failovertest.Run(t, s, failovertest.Config{
		Before: before, After: after, Failover: r.failover,
		Promoted: func(t *testing.T) store.Store {
			promoted, err := idemredis.New(r.replica, idemredis.WithPrefix(s.Prefix()), idemredis.WithoutServerCheck())
			if err != nil {
				t.Fatal(err)
			}
			return promoted
		},
		AcquireMayRelease: replicated,
		Precision:         linz.Precision{Expiry: time.Second, Lease: time.Millisecond},
	})
}

// The lag of the replication link in the failover runs: a replica a few
// tens of milliseconds behind, as across availability zones under load.
const failoverLag = 50 * time.Millisecond

// TestFailover measures what a failover to a replica loses (docs/redis.md,
// Failover): a replica fed through a link 50 ms late is promoted
// (REPLICAOF NO ONE) while writers claim and complete keys and a recorder
// plays guards on hot keys; the clients then reach the promoted replica.
// Without WithReplicas the writes the primary acknowledged in the last
// lag's worth of time before the failover are gone, claims among them:
// another caller can claim such a key again and run the side effect a
// second time. With WithReplicas(1, …) every write the store
// acknowledged is on the replica, and the store refuses writes while no
// replica can acknowledge them.
//
// It takes about 10 s, so it runs only with -failover (make failover).
func TestFailover(t *testing.T) {
	if !*failoverFlag {
		t.Skip("run with -failover (make failover)")
	}
	t.Run("async", func(t *testing.T) {
		r := newFailoverRig(t, failoverLag)
		s, err := idemredis.New(r.client, idemredis.WithPrefix("failover:"), idemredis.WithoutServerCheck())
		if err != nil {
			t.Fatal(err)
		}
		fig := runFailover(t, r, s, false, 1500*time.Millisecond, 500*time.Millisecond)
		t.Logf("without WithReplicas: %s", fig)
		if fig.LostClaims+fig.LostCompletions == 0 {
			t.Errorf("no acknowledged write was lost behind a %v replication lag; the failover did not land in the lag (%s)", failoverLag, fig)
		}
	})
	t.Run("WithReplicas", func(t *testing.T) {
		r := newFailoverRig(t, failoverLag)
		s, err := idemredis.New(r.client, idemredis.WithPrefix("failover:"), idemredis.WithoutServerCheck(),
			idemredis.WithReplicas(1, 500*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		fig := runFailover(t, r, s, true, 1500*time.Millisecond, 500*time.Millisecond)
		t.Logf("with WithReplicas(1, 500ms): %s", fig)
		if fig.LostClaims+fig.LostCompletions != 0 {
			t.Errorf("with WithReplicas, %d claims and %d completions the store acknowledged are not on the promoted replica", fig.LostClaims, fig.LostCompletions)
		}
		if fig.Claims == 0 || fig.AfterOK != 0 {
			t.Errorf("with WithReplicas: %d claims before the failover (want some), %d writes acknowledged after it with no replica left (want none)", fig.Claims, fig.AfterOK)
		}
	})
}
