// Package failovertest measures what a store loses when its server fails
// over to a replica: the workload and the accounting of the Redis and
// PostgreSQL failover tests (make failover), which differ only in how they
// build the servers, fail over and open the promoted replica.
package failovertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemguard/idemguard/internal/testing/linz"
	"github.com/idemguard/idemguard/store"
)

// Config is one failover run.
type Config struct {
	// Before and After are how long the load runs before and after the
	// failover.
	Before, After time.Duration
	// Failover loses the primary and sends the store's clients to the
	// replica, promoted.
	Failover func(t *testing.T)
	// Promoted opens a store on the promoted replica, directly, once the
	// load has stopped.
	Promoted func(t *testing.T) store.Store
	// AcquireMayRelease is the history recorder's option of that name:
	// the store may give back a claim it could not replicate.
	AcquireMayRelease bool
	// Precision is the store's clock precision for the history check.
	Precision linz.Precision
}

// Figures is what one failover run measured.
type Figures struct {
	// Claims and Completions are the writes the primary acknowledged
	// before the failover; LostClaims and LostCompletions those of them
	// the promoted replica does not hold.
	Claims, Completions         int
	LostClaims, LostCompletions int
	// LostWindow is how long before the failover the oldest lost write
	// was acknowledged.
	LostWindow time.Duration
	// P50 and P99 are the acknowledged claims' latency before the
	// failover.
	P50, P99 time.Duration
	// AfterOK and AfterFailed count the writes after the failover.
	AfterOK, AfterFailed int
	// History is the hot keys' history checked for linearizability
	// across the failover (nil when it could not be recorded).
	History *linz.CheckResult
}

func (f Figures) String() string {
	verdict := "not checked"
	if f.History != nil {
		verdict = f.History.String()
	}
	return fmt.Sprintf("%d claims and %d completions acknowledged by the primary before the failover; lost: %d claims, %d completions (acknowledged up to %v before it); claim latency p50 %v, p99 %v; after the failover %d writes succeeded and %d failed; hot-key history: %s",
		f.Claims, f.Completions, f.LostClaims, f.LostCompletions, f.LostWindow.Round(time.Millisecond),
		f.P50.Round(10*time.Microsecond), f.P99.Round(10*time.Microsecond), f.AfterOK, f.AfterFailed, verdict)
}

// ack is a write a client heard succeed.
type ack struct {
	key, token string
	at         time.Time
}

// Run drives s for c.Before, fails over, goes on for c.After, and measures
// what the promoted replica lost of the writes the primary acknowledged:
// eight writers claim and complete fresh keys, and a history recorder
// plays guards on a few hot keys through the same client.
func Run(t *testing.T, s store.Store, c Config) Figures {
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
	// count files a write's answer: before the failover an acknowledged
	// write joins acks; after it, it only counts.
	count := func(err error, acks *[]ack, a ack, lat time.Duration) {
		post := failedAt.Load() != nil
		switch {
		case err != nil && post:
			afterFailed.Add(1)
		case err == nil && post:
			afterOK.Add(1)
		case err == nil:
			mu.Lock()
			*acks = append(*acks, a)
			if lat >= 0 {
				latencies = append(latencies, lat)
			}
			mu.Unlock()
		}
	}
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
				count(err, &claims, ack{rec.Key, rec.Token, time.Now()}, time.Since(t0))
				if err == nil {
					done := *rec
					done.Status, done.Result = store.StatusCompleted, []byte(`"ok"`)
					err = s.Complete(octx, &done)
					count(err, &completions, ack{rec.Key, rec.Token, time.Now()}, -1)
				}
				cancel()
			}
		}()
	}
	var h *linz.History
	wg.Add(1)
	go func() {
		defer wg.Done()
		var err error
		h, err = linz.RecordHistory(ctx, s, linz.HistoryConfig{
			Ops: 1 << 30, Duration: c.Before + c.After, Prefix: "hot#",
			AcquireMayRelease: c.AcquireMayRelease, OpTimeout: 2 * time.Second,
		})
		if err != nil {
			t.Error(err)
		}
	}()
	time.Sleep(c.Before)
	at := time.Now()
	c.Failover(t)
	failedAt.Store(&at)
	time.Sleep(c.After)
	close(stop)
	wg.Wait()

	// What the promoted replica holds of what the primary acknowledged.
	promoted := c.Promoted(t)
	fig := Figures{AfterOK: int(afterOK.Load()), AfterFailed: int(afterFailed.Load())}
	lost := func(acks []ack, want store.Status) (total, n int) {
		for _, a := range acks {
			if a.at.After(at) {
				continue
			}
			total++
			got, err := promoted.Get(ctx, a.key)
			switch {
			case errors.Is(err, store.ErrNotFound):
			case err != nil:
				t.Fatalf("Get(%s) on the promoted replica: %v", a.key, err)
			case got.Token == a.token && (got.Status == want || want == store.StatusInProgress):
				continue
			}
			n++
			fig.LostWindow = max(fig.LostWindow, at.Sub(a.at))
		}
		return total, n
	}
	fig.Claims, fig.LostClaims = lost(claims, store.StatusInProgress)
	fig.Completions, fig.LostCompletions = lost(completions, store.StatusCompleted)
	slices.Sort(latencies)
	if n := len(latencies); n > 0 {
		fig.P50, fig.P99 = latencies[n/2], latencies[n*99/100]
	}
	if h != nil {
		fig.History = h.Check(c.Precision, linz.CheckOptions{Name: t.Name(), Dir: t.TempDir(), ShrinkTimeout: 30 * time.Second})
		if !fig.History.Linearizable {
			t.Logf("the hot keys' history across the failover: %s", fig.History.Report())
		}
	}
	return fig
}
