package guard_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/idemguard/idemguard/guard"
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
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i > 0 && i%benchStoreSize == 0 {
			b.StopTimer()
			g = benchGuard(b)
			b.StartTimer()
		}
		_, out, err := guard.Execute(ctx, g, "charge", benchRequest{OrderID: ids[i], Amount: 100}, benchFn)
		if err != nil || out != guard.OutcomeExecuted {
			b.Fatal(out, err)
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
	for i := 0; i < b.N; i++ {
		v, out, err := guard.Execute(ctx, g, "charge", req, benchFn)
		if err != nil || out != guard.OutcomeReplayed || v.ChargeID != "ch_123" {
			b.Fatal(v, out, err)
		}
	}
}

// BenchmarkReplay: the key is completed in the store; every call replays it.
func BenchmarkReplay(b *testing.B) { benchReplay(b) }

// BenchmarkReplayCached: as BenchmarkReplay, answered by the local cache.
func BenchmarkReplayCached(b *testing.B) { benchReplay(b, guard.WithCache(1024)) }

func BenchmarkMissParallel(b *testing.B) {
	g := benchGuard(b)
	var next atomic.Int64
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			id := "order-" + strconv.FormatInt(next.Add(1), 10)
			_, out, err := guard.Execute(ctx, g, "charge", benchRequest{OrderID: id, Amount: 100}, benchFn)
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

func BenchmarkReplayCachedParallel(b *testing.B) { benchReplayParallel(b, guard.WithCache(1024)) }
