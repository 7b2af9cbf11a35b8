// Package instrument builds the OpenTelemetry instruments and the logger a
// guard records with, under the names package telemetry exports.
package instrument

import (
	"log/slog"
	"reflect"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemguard/idemguard/internal/telemetry"
)

// Buckets are the bucket boundaries, in seconds, that the guard's
// histograms advise: the SDK's default boundaries (0, 5, 10, … 10000) are
// meant for milliseconds and would put every store call of a second or
// less in one bucket. From 100 µs (an in-memory or Redis call) to 30 s (a
// long wait for another holder).
var Buckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}

// Set is the tracer, metric instruments and logger of one guard. Build it
// once with [New]; it is safe for concurrent use.
type Set struct {
	Tracer        trace.Tracer
	Calls         metric.Int64Counter
	LockWait      metric.Float64Histogram
	StoreDuration metric.Float64Histogram
	LeaseLost     metric.Int64Counter
	BatchItems    metric.Int64Counter
	// ClaimsTakenOver counts claims taken over after their holder's lease
	// lapsed (telemetry.MetricClaimTakenOver).
	ClaimsTakenOver metric.Int64Counter
	Logger          *slog.Logger
	// StoreAttr names the guard's store (telemetry.StoreKey).
	StoreAttr attribute.KeyValue

	// idleTP and idleMP are the global providers as they were when no SDK
	// was installed, if the Set uses the globals; nil otherwise.
	idleTP trace.TracerProvider
	idleMP metric.MeterProvider
}

// New builds a Set from tp and mp (nil: the global providers, which do
// nothing until the application installs an SDK) for a store named
// storeName. A nil logger writes warnings and errors to slog.Default().
// Errors creating instruments go to otel.Handle and leave a no-op
// instrument in place; they never fail the caller.
func New(tp trace.TracerProvider, mp metric.MeterProvider, logger *slog.Logger, storeName string) *Set {
	var idleTP trace.TracerProvider
	var idleMP metric.MeterProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
		if isGlobalDefault(tp, "tracerProvider") {
			idleTP = tp
		}
	}
	if mp == nil {
		mp = otel.GetMeterProvider()
		if isGlobalDefault(mp, "meterProvider") {
			idleMP = mp
		}
	}
	if logger == nil {
		logger = slog.New(warnDefault{})
	}
	meter := mp.Meter(telemetry.ScopeName, metric.WithInstrumentationVersion(telemetry.Version))
	s := &Set{
		Tracer:    tp.Tracer(telemetry.ScopeName, trace.WithInstrumentationVersion(telemetry.Version)),
		Logger:    logger,
		StoreAttr: telemetry.StoreKey.String(storeName),
		idleTP:    idleTP,
		idleMP:    idleMP,
	}
	var err error
	if s.Calls, err = meter.Int64Counter(telemetry.MetricCalls,
		metric.WithDescription("Guarded calls, by outcome and scope."),
		metric.WithUnit("{call}")); err != nil {
		otel.Handle(err)
	}
	if s.LockWait, err = meter.Float64Histogram(telemetry.MetricLockWait,
		metric.WithDescription("Time a call waited for another holder of its key."),
		metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(Buckets...)); err != nil {
		otel.Handle(err)
	}
	if s.StoreDuration, err = meter.Float64Histogram(telemetry.MetricStoreDuration,
		metric.WithDescription("Duration of store calls, by operation and store."),
		metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(Buckets...)); err != nil {
		otel.Handle(err)
	}
	if s.LeaseLost, err = meter.Int64Counter(telemetry.MetricLeaseLost,
		metric.WithDescription("Calls whose claim was gone (taken over after its lease lapsed, or deleted) when they came to record their outcome, which was not recorded."),
		metric.WithUnit("{call}")); err != nil {
		otel.Handle(err)
	}
	if s.ClaimsTakenOver, err = meter.Int64Counter(telemetry.MetricClaimTakenOver,
		metric.WithDescription("Claims that replaced a claim whose lease had lapsed without a completion (a holder that crashed, hung or lost the store)."),
		metric.WithUnit("{claim}")); err != nil {
		otel.Handle(err)
	}
	if s.BatchItems, err = meter.Int64Counter(telemetry.MetricBatchItems,
		metric.WithDescription("Items of batches, by outcome (not_run: the batch did not start them)."),
		metric.WithUnit("{item}")); err != nil {
		otel.Handle(err)
	}
	return s
}

// Tracing reports whether spans may be recorded: false only while the Set
// uses the global tracer provider and no SDK has been installed in it. The
// guard then skips its spans: starting and ending spans nobody records,
// with their contexts and attributes, is about 1% of a DynamoDB client's
// instructions per call (docs/benchmarks.md).
func (s *Set) Tracing() bool {
	return s.idleTP == nil || otel.GetTracerProvider() != s.idleTP
}

// Metering reports whether measurements may be recorded, as Tracing does
// for spans.
func (s *Set) Metering() bool {
	return s.idleMP == nil || otel.GetMeterProvider() != s.idleMP
}

// isGlobalDefault reports whether p is OpenTelemetry's own global provider,
// which delegates to an SDK once one is installed (its concrete type lives
// in otel/internal/global). Should that type ever move, the check fails
// safe: the Set then always records.
func isGlobalDefault(p any, name string) bool {
	t := reflect.TypeOf(p)
	if t == nil || t.Kind() != reflect.Pointer {
		return false
	}
	t = t.Elem()
	return t.Name() == name && t.PkgPath() == "go.opentelemetry.io/otel/internal/global"
}

// Operation is the measurement option of a store operation.
func (s *Set) Operation(op string) metric.MeasurementOption {
	return metric.WithAttributes(telemetry.OperationKey.String(op), s.StoreAttr)
}

// Scoped is the measurement option of a measurement within scope with
// outcome.
func Scoped(scope, outcome string) metric.MeasurementOption {
	return metric.WithAttributes(telemetry.ScopeKey.String(scope), telemetry.OutcomeKey.String(outcome))
}
