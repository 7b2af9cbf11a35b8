package redis_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idemguard/idemguard/internal/faultproxy"
	"github.com/idemguard/idemguard/store"
	idemredis "github.com/idemguard/idemguard/store/redis"
	"github.com/idemguard/idemguard/store/storetest"
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

// ack is a write a client heard succeed.
type ack struct {
	key, token string
	at         time.Time
}

// failoverFigures is what one failover run measured.
type failoverFigures struct {
	claims, completions         int // acknowledged by the primary before the failover
	lostClaims, lostCompletions int
	lostWindow                  time.Duration // how long before the failover the oldest lost write was acknowledged
	p50, p99                    time.Duration // acknowledged writes' latency before the failover
	afterOK, afterFailed        int           // writes after the failover
	history                     *storetest.CheckResult
}

func (f failoverFigures) String() string {
	verdict := "not checked"
	if f.history != nil {
		verdict = f.history.String()
	}
	return fmt.Sprintf("%d claims and %d completions acknowledged by the primary before the failover; lost: %d claims, %d completions (acknowledged up to %v before it); claim latency p50 %v, p99 %v; after the failover %d writes succeeded and %d failed; hot-key history: %s",
		f.claims, f.completions, f.lostClaims, f.lostCompletions, f.lostWindow.Round(time.Millisecond),
		f.p50.Round(10*time.Microsecond), f.p99.Round(10*time.Microsecond), f.afterOK, f.afterFailed, verdict)
}

// runFailover drives s through the rig for before, fails over, goes on for
// after, and measures what the promoted replica lost of the writes the
// primary acknowledged: writers claim and complete fresh keys, and a
// history recorder plays guards on a few hot keys (checked for
// linearizability across the failover).
func runFailover(t *testing.T, r *failoverRig, s *idemredis.Store, replicated bool, before, after time.Duration) failoverFigures {
	t.Helper()
	ctx := context.Background()
	base := time.Now().Add(24 * time.Hour)
	var (
		mu          sync.Mutex
		claims      []ack
		completions []ack
		latencies   []time.Duration
		failedAt    atomic.Pointer[time.Time]
		afterOK     atomic.Int64
		afterFailed atomic.Int64
		seq         atomic.Int64
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				n := seq.Add(1)
				rec := &store.Record{Key: fmt.Sprintf("loss#%d", n), Status: store.StatusInProgress,
					Token: fmt.Sprintf("w%d.%d", w, n), ExpiresAt: base.Add(time.Hour), LeaseExpiresAt: base.Add(time.Minute)}
				octx, cancel := context.WithTimeout(ctx, 2*time.Second)
				t0 := time.Now()
				_, err := s.Acquire(octx, rec, base)
				lat := time.Since(t0)
				post := failedAt.Load() != nil
				switch {
				case err != nil && post:
					afterFailed.Add(1)
				case err == nil && post:
					afterOK.Add(1)
				case err == nil:
					mu.Lock()
					claims = append(claims, ack{rec.Key, rec.Token, time.Now()})
					latencies = append(latencies, lat)
					mu.Unlock()
				}
				if err == nil {
					done := *rec
					done.Status, done.Result = store.StatusCompleted, []byte(`"ok"`)
					err = s.Complete(octx, &done)
					post := failedAt.Load() != nil
					switch {
					case err != nil && post:
						afterFailed.Add(1)
					case err == nil && post:
						afterOK.Add(1)
					case err == nil:
						mu.Lock()
						completions = append(completions, ack{rec.Key, rec.Token, time.Now()})
						mu.Unlock()
					}
				}
				cancel()
			}
		}()
	}
	// The hot keys, recorded for the checker, through the same client.
	var h *storetest.History
	wg.Add(1)
	go func() {
		defer wg.Done()
		var err error
		h, err = storetest.RecordHistory(ctx, s, storetest.HistoryConfig{
			Ops: 1 << 30, Duration: before + after, Prefix: "hot#", AcquireMayRelease: replicated, OpTimeout: 2 * time.Second,
		})
		if err != nil {
			t.Error(err)
		}
	}()
	time.Sleep(before)
	at := time.Now()
	r.failover(t)
	failedAt.Store(&at)
	time.Sleep(after)
	close(stop)
	wg.Wait()

	// What the promoted replica holds of what the primary acknowledged.
	promoted, err := idemredis.New(r.replica, idemredis.WithPrefix(s.Prefix()), idemredis.WithoutServerCheck())
	if err != nil {
		t.Fatal(err)
	}
	fig := failoverFigures{afterOK: int(afterOK.Load()), afterFailed: int(afterFailed.Load())}
	lost := func(acks []ack, want store.Status) (n int) {
		for _, a := range acks {
			if a.at.After(at) {
				continue
			}
			got, err := promoted.Get(ctx, a.key)
			switch {
			case errors.Is(err, store.ErrNotFound):
			case err != nil:
				t.Fatalf("Get(%s) on the promoted replica: %v", a.key, err)
			case got.Token == a.token && (got.Status == want || want == store.StatusInProgress):
				continue
			}
			n++
			fig.lostWindow = max(fig.lostWindow, at.Sub(a.at))
		}
		return n
	}
	for _, a := range claims {
		if !a.at.After(at) {
			fig.claims++
		}
	}
	for _, a := range completions {
		if !a.at.After(at) {
			fig.completions++
		}
	}
	fig.lostClaims = lost(claims, store.StatusInProgress)
	fig.lostCompletions = lost(completions, store.StatusCompleted)
	slices.Sort(latencies)
	if n := len(latencies); n > 0 {
		fig.p50, fig.p99 = latencies[n/2], latencies[n*99/100]
	}
	if h != nil {
		fig.history = h.Check(storetest.Precision{Expiry: time.Second, Lease: time.Millisecond}, storetest.CheckOptions{Name: t.Name(), Dir: t.TempDir(), ShrinkTimeout: 30 * time.Second})
	}
	return fig
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
		if fig.history != nil && !fig.history.Linearizable {
			t.Logf("the hot keys' history across the failover: %s", fig.history.Report())
		}
		if fig.lostClaims+fig.lostCompletions == 0 {
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
		if fig.history != nil && !fig.history.Linearizable {
			t.Logf("the hot keys' history across the failover: %s", fig.history.Report())
		}
		if fig.lostClaims+fig.lostCompletions != 0 {
			t.Errorf("with WithReplicas, %d claims and %d completions the store acknowledged are not on the promoted replica", fig.lostClaims, fig.lostCompletions)
		}
		if fig.claims == 0 || fig.afterOK != 0 {
			t.Errorf("with WithReplicas: %d claims before the failover (want some), %d writes acknowledged after it with no replica left (want none)", fig.claims, fig.afterOK)
		}
	})
}
