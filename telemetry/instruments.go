package telemetry

import (
	"log/slog"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Instruments are the tracer, meter instruments and logger one guard
// records with. Build them once with [New]; they are safe for concurrent use.
type Instruments struct {
	Tracer        trace.Tracer
	Calls         metric.Int64Counter
	LockWait      metric.Float64Histogram
	StoreDuration metric.Float64Histogram
	LeaseLost     metric.Int64Counter
	Logger        *slog.Logger
	// Store is the store's name, recorded as StoreKey.
	Store string

	storeAttr attribute.KeyValue
	opSets    sync.Map // operation -> metric.MeasurementOption
	callSets  sync.Map // scope+"\x00"+outcome -> metric.MeasurementOption
}

// New builds the instruments from tp and mp (nil: the global providers) for
// a store named storeName. Errors creating instruments go to otel.Handle and
// leave a no-op instrument in place; they never fail the caller.
func New(tp trace.TracerProvider, mp metric.MeterProvider, logger *slog.Logger, storeName string) *Instruments {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	if logger == nil {
		logger = slog.New(warnDefault{})
	}
	meter := mp.Meter(ScopeName, metric.WithInstrumentationVersion(Version))
	in := &Instruments{
		Tracer:    tp.Tracer(ScopeName, trace.WithInstrumentationVersion(Version)),
		Logger:    logger,
		Store:     storeName,
		storeAttr: StoreKey.String(storeName),
	}
	var err error
	if in.Calls, err = meter.Int64Counter(MetricCalls,
		metric.WithDescription("Guarded calls, by outcome and scope."),
		metric.WithUnit("{call}")); err != nil {
		otel.Handle(err)
	}
	if in.LockWait, err = meter.Float64Histogram(MetricLockWait,
		metric.WithDescription("Time a call waited for another holder of its key."),
		metric.WithUnit("s")); err != nil {
		otel.Handle(err)
	}
	if in.StoreDuration, err = meter.Float64Histogram(MetricStoreDuration,
		metric.WithDescription("Duration of store calls, by operation and store."),
		metric.WithUnit("s")); err != nil {
		otel.Handle(err)
	}
	if in.LeaseLost, err = meter.Int64Counter(MetricLeaseLost,
		metric.WithDescription("Claims taken over by another caller while their function ran."),
		metric.WithUnit("{claim}")); err != nil {
		otel.Handle(err)
	}
	return in
}

// StoreAttr is the StoreKey attribute of the instruments' store.
func (in *Instruments) StoreAttr() attribute.KeyValue { return in.storeAttr }

// OperationOption returns the measurement option for a store operation,
// built once per operation.
func (in *Instruments) OperationOption(op string) metric.MeasurementOption {
	if o, ok := in.opSets.Load(op); ok {
		return o.(metric.MeasurementOption)
	}
	o, _ := in.opSets.LoadOrStore(op, metric.WithAttributeSet(attribute.NewSet(OperationKey.String(op), in.storeAttr)))
	return o.(metric.MeasurementOption)
}

// CallOption returns the measurement option for a call's outcome within a
// scope, built once per pair.
func (in *Instruments) CallOption(scope, outcome string) metric.MeasurementOption {
	k := callKey{scope, outcome}
	if o, ok := in.callSets.Load(k); ok {
		return o.(metric.MeasurementOption)
	}
	o, _ := in.callSets.LoadOrStore(k, metric.WithAttributeSet(attribute.NewSet(ScopeKey.String(scope), OutcomeKey.String(outcome))))
	return o.(metric.MeasurementOption)
}

type callKey struct{ scope, outcome string }
