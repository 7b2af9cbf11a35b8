package instrument

import (
	"context"
	"slices"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/idemguard/idemguard/telemetry"
)

// The histograms advise boundaries in seconds, so that a 3 ms store call
// lands in the (2.5 ms, 5 ms] bucket, not in the SDK's default [0, 5].
func TestHistogramsAdviseSecondBuckets(t *testing.T) {
	rd := sdkmetric.NewManualReader()
	s := New(nil, sdkmetric.NewMeterProvider(sdkmetric.WithReader(rd)), nil, "memory")
	ctx := context.Background()
	s.StoreDuration.Record(ctx, 0.003, s.Operation("acquire"))
	s.LockWait.Record(ctx, 0.003)
	var rm metricdata.ResourceMetrics
	if err := rd.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != telemetry.MetricStoreDuration && m.Name != telemetry.MetricLockWait {
				continue
			}
			seen++
			dp := m.Data.(metricdata.Histogram[float64]).DataPoints[0]
			if !slices.Equal(dp.Bounds, Buckets) {
				t.Errorf("%s bounds %v, want %v", m.Name, dp.Bounds, Buckets)
			}
			i := slices.Index(Buckets, 0.005)
			if dp.BucketCounts[i] != 1 {
				t.Errorf("%s bucket counts %v, want the 3 ms call in (0.0025, 0.005]", m.Name, dp.BucketCounts)
			}
		}
	}
	if seen != 2 {
		t.Errorf("%d histograms collected, want 2", seen)
	}
}
