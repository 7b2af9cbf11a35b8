package guard_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/memory"
)

// Benchmarks of the guard's own cost, on the memory store. Run with
//
//	go test -run '^$' -bench . -benchmem ./guard/
//
// Key derivation alone is in key_internal_bench_test.go.

// benchRequest is a small request, keyed as a whole.
type benchRequest struct {
	OrderID string `json:"order_id"`
	Amount  int    `json:"amount"`
}

type benchResult struct {
	ChargeID string `json:"charge_id"`
	Amount   int    `json:"amount"`
}

func benchFn(_ context.Context) (benchResult, error) {
	return benchResult{ChargeID: "ch_123", Amount: 100}, nil
}

func benchGuard(b *testing.B, opts ...guard.Option) *guard.Guard {
	b.Helper()
	g, err := guard.New(memory.New(), opts...)
	if err != nil {
		b.Fatal(err)
	}
	return g
}

// benchIDs are distinct order ids, built before the timer runs.
func benchIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = "order-" + strconv.Itoa(i)
	}
	return ids
}

// benchStoreSize bounds the records a miss benchmark keeps in one memory
// store: a map of millions of records would make the figure depend on b.N
// (garbage collection scans it), which a real store does not.
const benchStoreSize = 1 << 14

// BenchmarkMiss: every call has a new key, so it claims, runs and completes.
func BenchmarkMiss(b *testing.B) {
	g := benchGuard(b)
	ids := benchIDs(b.N)
	ctx := context.Background()
	// Every call runs the function: a new key is never replayed.
	var ran int
	fn := func(ctx context.Context) (benchResult, error) { ran++; return benchFn(ctx) }
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i > 0 && i%benchStoreSize == 0 {
			b.StopTimer()
			g = benchGuard(b)
			b.StartTimer()
		}
		if _, err := guard.Do(ctx, g, "charge", benchRequest{OrderID: ids[i], Amount: 100}, fn); err != nil || ran != i+1 {
			b.Fatal(ran, err)
		}
	}
}

func benchReplay(b *testing.B, opts ...guard.Option) {
	g := benchGuard(b, opts...)
	ctx := context.Background()
	req := benchRequest{OrderID: "order-1", Amount: 100}
	if _, err := guard.Do(ctx, g, "charge", req, benchFn); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	fn := func(context.Context) (benchResult, error) {
		b.Fatal("a replay ran the function")
		return benchResult{}, nil
	}
	for i := 0; i < b.N; i++ {
		v, err := guard.Do(ctx, g, "charge", req, fn)
		if err != nil || v.ChargeID != "ch_123" {
			b.Fatal(v, err)
		}
	}
}

// BenchmarkReplay: the key is completed in the store; every call replays it.
func BenchmarkReplay(b *testing.B) { benchReplay(b) }

// BenchmarkReplayCached: as BenchmarkReplay, answered by the local cache.
func BenchmarkReplayCached(b *testing.B) { benchReplay(b, guard.WithCache(1024, 0)) }

func BenchmarkMissParallel(b *testing.B) {
	g := benchGuard(b)
	var next atomic.Int64
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			id := "order-" + strconv.FormatInt(next.Add(1), 10)
			_, out, err := adapt.Execute(ctx, g, "charge", benchRequest{OrderID: id, Amount: 100}, benchFn)
			if err != nil || out != guard.OutcomeExecuted {
				b.Error(out, err)
				return
			}
		}
	})
}

func benchReplayParallel(b *testing.B, opts ...guard.Option) {
	g := benchGuard(b, opts...)
	ctx := context.Background()
	req := benchRequest{OrderID: "order-1", Amount: 100}
	if _, err := guard.Do(ctx, g, "charge", req, benchFn); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			v, err := guard.Do(ctx, g, "charge", req, benchFn)
			if err != nil || v.ChargeID != "ch_123" {
				b.Error(v, err)
				return
			}
		}
	})
}

func BenchmarkReplayParallel(b *testing.B) { benchReplayParallel(b) }

func BenchmarkReplayCachedParallel(b *testing.B) { benchReplayParallel(b, guard.WithCache(1024, 0)) }

// BenchmarkOverhead measures the guard's own cost over the store called
// directly, on the memory store: "direct" claims with a record and a fresh
// token, encodes the result with encoding/json and completes (first), or
// meets the completed record and decodes its result (replay), as code
// without the guard would; "guarded" is the same call through
// guard.Do. The difference in allocations per operation is the
// guard's own (docs/benchmarks.md):
//
//	go test -run '^$' -bench Overhead -benchmem ./guard/
func BenchmarkOverhead(b *testing.B) {
	ctx := context.Background()
	direct := func(s *memory.Store, key string, first bool) {
		now := time.Now()
		rec := &store.Record{Key: key, Status: store.StatusInProgress, Token: newBenchToken(),
			ExpiresAt: now.Add(time.Hour), LeaseExpiresAt: now.Add(time.Minute)}
		old, err := s.Acquire(ctx, rec, now)
		if first {
			if err != nil {
				b.Fatal(err)
			}
			v, _ := benchFn(ctx)
			data, _ := json.Marshal(v)
			done := &store.Record{Key: key, Status: store.StatusCompleted, Token: rec.Token, Result: data, ExpiresAt: now.Add(time.Hour)}
			if err := s.Complete(ctx, done); err != nil {
				b.Fatal(err)
			}
			return
		}
		var v benchResult
		if old == nil || json.Unmarshal(old.Result, &v) != nil || v.ChargeID != "ch_123" {
			b.Fatal(old, err)
		}
	}
	b.Run("first/direct", func(b *testing.B) {
		s := memory.New()
		ids := benchIDs(b.N)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if i > 0 && i%benchStoreSize == 0 {
				b.StopTimer()
				s = memory.New()
				b.StartTimer()
			}
			direct(s, "charge#"+ids[i], true)
		}
	})
	b.Run("first/guarded", BenchmarkMiss)
	b.Run("replay/direct", func(b *testing.B) {
		s := memory.New()
		direct(s, "charge#1", true)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			direct(s, "charge#1", false)
		}
	})
	b.Run("replay/guarded", BenchmarkReplay)
}

func newBenchToken() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
