package guard_test

import (
	"context"
	"testing"

	"github.com/idemguard/idemguard/guard"
)

// benchBatchSize is the number of items in a benchmarked batch.
const benchBatchSize = 100

func benchBatchFn(_ context.Context, r benchRequest) (benchResult, error) {
	return benchResult{ChargeID: "ch_" + r.OrderID, Amount: r.Amount}, nil
}

// BenchmarkBatchMiss: a batch of new keys on a fresh store, so every item
// is looked up, claimed, run and completed. The figure is per batch.
func BenchmarkBatchMiss(b *testing.B) {
	ctx := context.Background()
	ids := benchIDs(benchBatchSize)
	in := make([]benchRequest, len(ids))
	for i, id := range ids {
		in[i] = benchRequest{OrderID: id, Amount: 100}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		g := benchGuard(b)
		b.StartTimer()
		for j, r := range guard.DoBatch(ctx, g, "charge", in, benchBatchFn) {
			if r.Err != nil || r.Outcome != guard.OutcomeExecuted {
				b.Fatal(j, r.Outcome, r.Err)
			}
		}
	}
}
