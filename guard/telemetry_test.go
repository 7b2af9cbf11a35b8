package guard_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/internal/telemetry"
)

type otelHarness struct {
	spans  *tracetest.SpanRecorder
	reader *sdkmetric.ManualReader
	opts   []guard.Option
}

func newOtel() *otelHarness {
	sr := tracetest.NewSpanRecorder()
	rd := sdkmetric.NewManualReader()
	return &otelHarness{
		spans:  sr,
		reader: rd,
		opts: []guard.Option{
			guard.WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))),
			guard.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(rd))),
		},
	}
}

// ended returns the spans ended so far.
func (h *otelHarness) ended() []sdktrace.ReadOnlySpan { return h.spans.Ended() }

func (h *otelHarness) reset() { h.spans.Reset() }

func spanNamed(t *testing.T, spans []sdktrace.ReadOnlySpan, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	for _, s := range spans {
		if s.Name() == name {
			return s
		}
	}
	t.Fatalf("no %s span among %v", name, names(spans))
	return nil
}

func names(spans []sdktrace.ReadOnlySpan) []string {
	var n []string
	for _, s := range spans {
		n = append(n, s.Name())
	}
	return n
}

func attr(s sdktrace.ReadOnlySpan, k attribute.Key) (attribute.Value, bool) {
	for _, a := range s.Attributes() {
		if a.Key == k {
			return a.Value, true
		}
	}
	return attribute.Value{}, false
}

func wantAttr(t *testing.T, s sdktrace.ReadOnlySpan, k attribute.Key, want string) {
	t.Helper()
	v, ok := attr(s, k)
	if !ok || v.Emit() != want {
		t.Errorf("%s %s = %q (present %v), want %q", s.Name(), k, v.Emit(), ok, want)
	}
}

// children checks that exactly the named spans are children of parent.
func children(t *testing.T, spans []sdktrace.ReadOnlySpan, parent sdktrace.ReadOnlySpan, want ...string) {
	t.Helper()
	var got []string
	for _, s := range spans {
		if s.Parent().SpanID() == parent.SpanContext().SpanID() && s.SpanContext().TraceID() == parent.SpanContext().TraceID() {
			got = append(got, s.Name())
		}
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("children of %s = %v, want %v", parent.Name(), got, want)
	}
}

func (h *otelHarness) metrics(t *testing.T) map[string]metricdata.Aggregation {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := h.reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != telemetry.ScopeName || sm.Scope.Version != telemetry.Version {
			t.Errorf("instrumentation scope %s %s, want %s %s", sm.Scope.Name, sm.Scope.Version, telemetry.ScopeName, telemetry.Version)
		}
		for _, m := range sm.Metrics {
			out[m.Name] = m.Data
		}
	}
	return out
}

// callCount sums the calls counted with scope and outcome, whatever their
// other attributes (store, cache, error.type).
func callCount(t *testing.T, h *otelHarness, scope, outcome string, more ...attribute.KeyValue) int64 {
	t.Helper()
	sum, ok := h.metrics(t)[telemetry.MetricCalls].(metricdata.Sum[int64])
	if !ok {
		t.Fatalf("no %s counter", telemetry.MetricCalls)
	}
	var n int64
points:
	for _, dp := range sum.DataPoints {
		s, _ := dp.Attributes.Value(telemetry.ScopeKey)
		o, _ := dp.Attributes.Value(telemetry.OutcomeKey)
		if s.AsString() != scope || o.AsString() != outcome {
			continue
		}
		for _, kv := range more {
			if v, ok := dp.Attributes.Value(kv.Key); !ok || v != kv.Value {
				continue points
			}
		}
		n += dp.Value
	}
	return n
}

func TestTelemetryFirstCallReplayAndCache(t *testing.T) {
	h := newOtel()
	m, _ := newMemory()
	g := mustGuard(t, m, append(h.opts, guard.WithCache(4, 0))...)
	fn := func(context.Context) (int, error) { return 1, nil }

	guard.Do(ctx, g, "charge", "order-1", fn)
	spans := h.ended()
	exec := spanNamed(t, spans, telemetry.SpanExecute)
	children(t, spans, exec, telemetry.SpanAcquire, telemetry.SpanComplete)
	wantAttr(t, exec, telemetry.OutcomeKey, "executed")
	wantAttr(t, exec, telemetry.ScopeKey, "charge")
	wantAttr(t, exec, telemetry.StoreKey, "memory")
	wantAttr(t, exec, telemetry.CacheKey, "miss")
	wantAttr(t, exec, telemetry.KeyHashKey, keyHash(t, "order-1"))
	wantAttr(t, spanNamed(t, spans, telemetry.SpanComplete), telemetry.ResultKindKey, "value")

	// A replay from the store: a second guard without the record cached.
	h.reset()
	g2 := mustGuard(t, m, h.opts...)
	guard.Do(ctx, g2, "charge", "order-1", fn)
	spans = h.ended()
	exec = spanNamed(t, spans, telemetry.SpanExecute)
	children(t, spans, exec, telemetry.SpanAcquire)
	wantAttr(t, exec, telemetry.OutcomeKey, "replayed")
	if _, ok := attr(exec, telemetry.CacheKey); ok {
		t.Error("cache attribute on a guard without a cache")
	}

	// A replay from the local cache: no store span at all.
	h.reset()
	guard.Do(ctx, g, "charge", "order-1", fn)
	spans = h.ended()
	exec = spanNamed(t, spans, telemetry.SpanExecute)
	children(t, spans, exec)
	wantAttr(t, exec, telemetry.OutcomeKey, "replayed")
	wantAttr(t, exec, telemetry.CacheKey, "hit")

	if n := callCount(t, h, "charge", "executed"); n != 1 {
		t.Errorf("calls{executed} = %d, want 1", n)
	}
	if n := callCount(t, h, "charge", "replayed"); n != 2 {
		t.Errorf("calls{replayed} = %d, want 2", n)
	}
	// The calls metric carries the store and the cache's answer.
	for _, c := range []struct {
		outcome, cache string
	}{{"executed", "miss"}, {"replayed", "hit"}} {
		if n := callCount(t, h, "charge", c.outcome, telemetry.StoreKey.String("memory"), telemetry.CacheKey.String(c.cache)); n != 1 {
			t.Errorf("calls{%s, store=memory, cache=%s} = %d, want 1", c.outcome, c.cache, n)
		}
	}
	hist, ok := h.metrics(t)[telemetry.MetricStoreDuration].(metricdata.Histogram[float64])
	if !ok {
		t.Fatal("no store duration histogram")
	}
	ops := map[string]uint64{}
	for _, dp := range hist.DataPoints {
		op, _ := dp.Attributes.Value(telemetry.OperationKey)
		st, _ := dp.Attributes.Value(telemetry.StoreKey)
		if st.AsString() != "memory" {
			t.Errorf("store attribute %q", st.AsString())
		}
		ops[op.AsString()] += dp.Count
	}
	if ops["acquire"] != 2 || ops["complete"] != 1 {
		t.Errorf("store calls by operation = %v, want acquire 2, complete 1", ops)
	}
}

func TestTelemetryInProgressAndMismatch(t *testing.T) {
	h := newOtel()
	m, _ := newMemory()
	opts := append(h.opts, guard.WithKeyPath("id"), guard.WithPayloadValidation("amount"))
	holder := mustGuard(t, m, opts...)
	other := mustGuard(t, m, opts...)
	inside, release := make(chan struct{}), make(chan struct{})
	done := make(chan struct{})
	go func() {
		guard.Do(ctx, holder, "pay", order{ID: "p", Amount: 1}, func(context.Context) (int, error) { close(inside); <-release; return 1, nil })
		close(done)
	}()
	<-inside
	h.reset()
	guard.Do(ctx, other, "pay", order{ID: "p", Amount: 1}, func(context.Context) (int, error) { return 0, nil })
	exec := spanNamed(t, h.ended(), telemetry.SpanExecute)
	wantAttr(t, exec, telemetry.OutcomeKey, "in_progress")
	wantAttr(t, exec, telemetry.ErrorTypeKey, "in_progress")
	if exec.Status().Code != codes.Error {
		t.Errorf("in-progress status %v, want Error", exec.Status())
	}
	close(release)
	<-done

	h.reset()
	guard.Do(ctx, other, "pay", order{ID: "p", Amount: 2}, func(context.Context) (int, error) { return 0, nil })
	exec = spanNamed(t, h.ended(), telemetry.SpanExecute)
	wantAttr(t, exec, telemetry.OutcomeKey, "payload_mismatch")
	if n := callCount(t, h, "pay", "payload_mismatch"); n != 1 {
		t.Errorf("calls{payload_mismatch} = %d, want 1", n)
	}
}

func TestTelemetryWaitThenReplay(t *testing.T) {
	h := newOtel()
	m, _ := newMemory()
	holder := mustGuard(t, m)
	waiter := mustGuard(t, m, append(h.opts, guard.WithWait(5*time.Second), adapt.WithWaitBackoff(2*time.Millisecond, 4*time.Millisecond))...)
	inside, release := make(chan struct{}), make(chan struct{})
	go guard.Do(ctx, holder, "job", "k", func(context.Context) (int, error) { close(inside); <-release; return 7, nil })
	<-inside
	go func() { time.Sleep(30 * time.Millisecond); close(release) }()
	if v, err := guard.Do(ctx, waiter, "job", "k", func(context.Context) (int, error) { return 0, nil }); v != 7 || err != nil {
		t.Fatalf("waiter: %d, %v", v, err)
	}
	spans := h.ended()
	exec := spanNamed(t, spans, telemetry.SpanExecute)
	wantAttr(t, exec, telemetry.OutcomeKey, "replayed")
	acq := spanNamed(t, spans, telemetry.SpanAcquire)
	var waits int
	for _, e := range acq.Events() {
		if e.Name == telemetry.EventWait {
			waits++
			found := false
			for _, a := range e.Attributes {
				found = found || a.Key == telemetry.LeaseExpiresKey
			}
			if !found {
				t.Error("wait event without the holder's lease end")
			}
		}
	}
	if waits == 0 {
		t.Error("no wait events on the acquire span")
	}
	if v, ok := attr(acq, telemetry.WaitKey); !ok || v.AsFloat64() < 0.02 {
		t.Errorf("acquire wait seconds = %v, want about 0.03", v.AsFloat64())
	}
	hist, ok := h.metrics(t)[telemetry.MetricLockWait].(metricdata.Histogram[float64])
	if !ok || len(hist.DataPoints) == 0 || hist.DataPoints[0].Count != 1 || hist.DataPoints[0].Sum < 0.02 {
		t.Errorf("lock wait histogram = %+v, want one wait of about 30 ms", hist)
	}
}

func TestTelemetryLeaseLost(t *testing.T) {
	h := newOtel()
	m := newMemoryStore()
	clock := newFakeClock()
	zs := newCounting(m)
	zombie := mustGuard(t, zs, append(h.opts, adapt.WithClock(clock), guard.WithLease(30*time.Second))...)
	holder := mustGuard(t, m, adapt.WithClock(clock), guard.WithLease(30*time.Second))
	inside, resume := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	var zerr error
	go func() {
		defer wg.Done()
		_, zerr = guard.Do(ctx, zombie, "charge", "o", func(context.Context) (int, error) { close(inside); <-resume; return 1, nil })
	}()
	<-inside
	zs.set(func(c *countingStore) { c.failExtend = errors.New("partition") })
	for range 4 { // past the 30 s lease, in steps that let each extension fail
		clock.Advance(8 * time.Second)
		time.Sleep(2 * time.Millisecond)
	}
	waitFor(t, "a failed extension", func() bool { return zs.extends.Load() > 0 })
	guard.Do(ctx, holder, "charge", "o", func(context.Context) (int, error) { return 2, nil })
	close(resume)
	wg.Wait()
	if !errors.Is(zerr, guard.ErrLeaseLost) {
		t.Fatalf("zombie: %v", zerr)
	}
	spans := h.ended()
	exec := spanNamed(t, spans, telemetry.SpanExecute)
	wantAttr(t, exec, telemetry.OutcomeKey, "error")
	wantAttr(t, exec, telemetry.ErrorTypeKey, "lease_lost")
	ext := spanNamed(t, spans, telemetry.SpanExtend)
	if ext.Parent().SpanID() != exec.SpanContext().SpanID() || ext.Status().Code != codes.Error {
		t.Errorf("extend span: parent %v status %v; want a failed child of execute", ext.Parent().SpanID(), ext.Status())
	}
	sum, ok := h.metrics(t)[telemetry.MetricLeaseLost].(metricdata.Sum[int64])
	if !ok || len(sum.DataPoints) != 1 || sum.DataPoints[0].Value != 1 {
		t.Errorf("lease lost counter = %+v, want 1", sum)
	} else {
		scope, _ := sum.DataPoints[0].Attributes.Value(telemetry.ScopeKey)
		st, _ := sum.DataPoints[0].Attributes.Value(telemetry.StoreKey)
		if scope.AsString() != "charge" || st.AsString() == "" {
			t.Errorf("lease lost counted with %v, want scope charge and the store", sum.DataPoints[0].Attributes.ToSlice())
		}
	}
	// The holder lost its claim; the caller that took it over after the
	// lease lapsed counted a takeover, though it is not instrumented here.
	if got := takeovers(t, h); len(got) != 0 {
		t.Errorf("the zombie counted takeovers %v; only the caller that takes over counts one", got)
	}
	if n := callCount(t, h, "charge", "error", telemetry.ErrorTypeKey.String("lease_lost")); n != 1 {
		t.Errorf("calls{error, error.type=lease_lost} = %d, want 1", n)
	}
}

func TestTelemetryNeverRecordsRawKeyUnlessAskedTo(t *testing.T) {
	const secret = "4111-1111-1111-1111"
	for _, optIn := range []bool{false, true} {
		h := newOtel()
		m, _ := newMemory()
		g := mustGuard(t, m, append(h.opts, adapt.WithKeySelectionAttribute(optIn))...)
		guard.Do(ctx, g, "charge", map[string]string{"card": secret}, func(context.Context) (int, error) { return 1, nil })
		guard.Do(ctx, g, "charge", map[string]string{"card": secret}, func(context.Context) (int, error) { return 1, nil })
		seen := false
		for _, s := range h.ended() {
			for _, a := range s.Attributes() {
				seen = seen || strings.Contains(a.Value.Emit(), secret)
			}
			for _, e := range s.Events() {
				for _, a := range e.Attributes {
					seen = seen || strings.Contains(a.Value.Emit(), secret)
				}
			}
		}
		if seen != optIn {
			t.Errorf("opted in %v: raw key value in span attributes = %v", optIn, seen)
		}
	}
}

func TestTelemetryReleaseAndSpanAttributes(t *testing.T) {
	h := newOtel()
	m, _ := newMemory()
	g := mustGuard(t, m, h.opts...)
	boom := errors.New("boom")
	guard.Do(ctx, g, "job", "k", func(context.Context) (int, error) { return 0, boom },
		adapt.WithSpanAttributes(attribute.String("temporal.workflow_id", "wf-1")))
	spans := h.ended()
	exec := spanNamed(t, spans, telemetry.SpanExecute)
	children(t, spans, exec, telemetry.SpanAcquire, telemetry.SpanRelease)
	wantAttr(t, exec, telemetry.OutcomeKey, "error")
	wantAttr(t, exec, "temporal.workflow_id", "wf-1")
	if exec.Status().Code != codes.Error || exec.Status().Description != "boom" {
		t.Errorf("status %v", exec.Status())
	}
}

// Without providers the guard uses the global ones, skipping span and metric
// work while no SDK is installed, and records once one is, even into a guard
// built before.
func TestTelemetryGlobalProvidersInstalledLater(t *testing.T) {
	m, _ := newMemory()
	g := mustGuard(t, m)
	fn := func(context.Context) (int, error) { return 1, nil }
	guard.Do(ctx, g, "late", "k1", fn)

	sr := tracetest.NewSpanRecorder()
	rd := sdkmetric.NewManualReader()
	prevTP, prevMP := otel.GetTracerProvider(), otel.GetMeterProvider()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr)))
	otel.SetMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(rd)))
	t.Cleanup(func() { otel.SetTracerProvider(prevTP); otel.SetMeterProvider(prevMP) })

	guard.Do(ctx, g, "late", "k2", fn)
	exec := spanNamed(t, sr.Ended(), telemetry.SpanExecute)
	wantAttr(t, exec, telemetry.ScopeKey, "late")
	h := &otelHarness{reader: rd}
	if n := callCount(t, h, "late", "executed"); n != 1 {
		t.Errorf("calls{executed} after the SDK was installed = %d, want 1", n)
	}
}

// A duplicate that shares a concurrent call's outcome in the same process
// is labelled by what it got: a shared result, or a shared error that the
// other call recorded (a definite error), is "replayed" — the call was kept
// from running twice —, while a shared failure that nothing recorded (a
// panic) is "error".
func TestTelemetrySharedOutcomes(t *testing.T) {
	for _, tc := range []struct {
		name   string
		fn     func() (int, error)
		want   string
		leader string
	}{
		{"result", func() (int, error) { return 1, nil }, telemetry.OutcomeReplayed, telemetry.OutcomeExecuted},
		{"definite error", func() (int, error) { return 0, guard.Definite(errors.New("declined")) }, telemetry.OutcomeReplayed, telemetry.OutcomeError},
		{"panic", func() (int, error) { panic("kaboom") }, telemetry.OutcomeError, telemetry.OutcomeError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newOtel()
			_, cs := newMemory()
			g := mustGuard(t, cs, append(h.opts, guard.WithWait(5*time.Second))...)
			inside, release := make(chan struct{}), make(chan struct{})
			var wg sync.WaitGroup
			wg.Add(2)
			go func() {
				defer wg.Done()
				defer func() { recover() }()
				guard.Do(ctx, g, "s", "k", func(context.Context) (int, error) { close(inside); <-release; return tc.fn() })
			}()
			<-inside
			var out guard.Outcome
			go func() {
				defer wg.Done()
				_, out, _ = adapt.Execute(ctx, g, "s", "k", func(context.Context) (int, error) { return 2, nil })
			}()
			waitFor(t, "the duplicate to join", func() bool { return joinedAny(g) })
			close(release)
			wg.Wait()
			if tc.want == telemetry.OutcomeReplayed && out != guard.OutcomeShared {
				t.Errorf("duplicate's outcome %v, want shared", out)
			}
			var got []string
			for _, s := range h.ended() {
				if s.Name() == telemetry.SpanExecute {
					v, _ := attr(s, telemetry.OutcomeKey)
					got = append(got, v.Emit())
				}
			}
			if len(got) != 2 || !((got[0] == tc.leader && got[1] == tc.want) || (got[1] == tc.leader && got[0] == tc.want)) {
				t.Errorf("execute spans' outcomes %v, want the leader's %q and the duplicate's %q", got, tc.leader, tc.want)
			}
			wantCounts := map[string]int64{tc.leader: 1}
			wantCounts[tc.want]++
			for o, n := range wantCounts {
				if c := callCount(t, h, "s", o); c != n {
					t.Errorf("calls{outcome=%s} = %d, want %d", o, c, n)
				}
			}
		})
	}
}
