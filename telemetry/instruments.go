package telemetry

import (
	"log/slog"
	"reflect"
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
	// idleTP and idleMP are the global providers as they were when no SDK
	// was installed, if the instruments use the globals; nil otherwise.
	idleTP trace.TracerProvider
	idleMP metric.MeterProvider

	mu       sync.RWMutex
	opSets   map[string]metric.MeasurementOption            // protected by mu: by operation
	callSets map[string]map[string]metric.MeasurementOption // protected by mu: by scope, outcome
}

// New builds the instruments from tp and mp (nil: the global providers) for
// a store named storeName. Errors creating instruments go to otel.Handle and
// leave a no-op instrument in place; they never fail the caller.
func New(tp trace.TracerProvider, mp metric.MeterProvider, logger *slog.Logger, storeName string) *Instruments {
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
	meter := mp.Meter(ScopeName, metric.WithInstrumentationVersion(Version))
	in := &Instruments{
		Tracer:    tp.Tracer(ScopeName, trace.WithInstrumentationVersion(Version)),
		Logger:    logger,
		Store:     storeName,
		storeAttr: StoreKey.String(storeName),
		idleTP:    idleTP,
		idleMP:    idleMP,
		opSets:    map[string]metric.MeasurementOption{},
		callSets:  map[string]map[string]metric.MeasurementOption{},
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

// Tracing reports whether spans may be recorded: false only while the
// instruments use the global tracer provider and no SDK has been installed
// in it, so that callers can skip starting spans nobody records.
func (in *Instruments) Tracing() bool {
	return in.idleTP == nil || otel.GetTracerProvider() != in.idleTP
}

// Metering reports whether measurements may be recorded, as Tracing does
// for spans.
func (in *Instruments) Metering() bool {
	return in.idleMP == nil || otel.GetMeterProvider() != in.idleMP
}

// isGlobalDefault reports whether p is OpenTelemetry's own global provider
// that delegates to an SDK once one is installed (its concrete type lives in
// otel/internal/global). Should that type ever move, the check fails safe:
// the instruments then always record.
func isGlobalDefault(p any, name string) bool {
	t := reflect.TypeOf(p)
	if t == nil || t.Kind() != reflect.Pointer {
		return false
	}
	t = t.Elem()
	return t.Name() == name && t.PkgPath() == "go.opentelemetry.io/otel/internal/global"
}

// OperationOption returns the measurement option for a store operation,
// built once per operation.
func (in *Instruments) OperationOption(op string) metric.MeasurementOption {
	in.mu.RLock()
	o, ok := in.opSets[op]
	in.mu.RUnlock()
	if ok {
		return o
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if o, ok = in.opSets[op]; !ok {
		o = metric.WithAttributeSet(attribute.NewSet(OperationKey.String(op), in.storeAttr))
		in.opSets[op] = o
	}
	return o
}

// CallOption returns the measurement option for a call's outcome within a
// scope, built once per pair.
func (in *Instruments) CallOption(scope, outcome string) metric.MeasurementOption {
	in.mu.RLock()
	o, ok := in.callSets[scope][outcome]
	in.mu.RUnlock()
	if ok {
		return o
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	byOutcome := in.callSets[scope]
	if byOutcome == nil {
		byOutcome = map[string]metric.MeasurementOption{}
		in.callSets[scope] = byOutcome
	}
	if o, ok = byOutcome[outcome]; !ok {
		o = metric.WithAttributeSet(attribute.NewSet(ScopeKey.String(scope), OutcomeKey.String(outcome)))
		byOutcome[outcome] = o
	}
	return o
}
