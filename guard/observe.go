package guard

import (
	"context"
	"errors"
	"log/slog"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/idemguard/idemguard/internal/telemetry"
)

// The guard's telemetry: spans, metrics and logs named in package telemetry.

// child starts a child span of the span in ctx, if that one records.
func (g *Guard) child(ctx context.Context, name string) (context.Context, trace.Span) {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return ctx, noop.Span{}
	}
	return g.tel.Tracer.Start(ctx, name, trace.WithAttributes(g.tel.StoreAttr))
}

// span starts a guarded call's (or batch's) span, unless no SDK would
// record it.
func (g *Guard) span(ctx context.Context, name string) (context.Context, trace.Span) {
	if !g.tel.Tracing() {
		return ctx, noop.Span{}
	}
	return g.tel.Tracer.Start(ctx, name)
}

// outcomeLabel maps a call's outcome and error to telemetry's outcome values.
func outcomeLabel(out Outcome, err error) string {
	switch {
	case errors.Is(err, ErrInProgress):
		return telemetry.OutcomeInProgress
	case errors.Is(err, ErrPayloadMismatch):
		return telemetry.OutcomePayloadMismatch
	case out == OutcomeReplayed || out == OutcomeShared:
		return telemetry.OutcomeReplayed
	case err != nil || out == 0:
		return telemetry.OutcomeError
	case out == OutcomeUnguarded:
		return telemetry.OutcomeUnguarded
	}
	// Executed, or executed and released by the result filter.
	return telemetry.OutcomeExecuted
}

// observation collects what the execute span and the calls metric report.
type observation struct {
	scope string // the call's scope in telemetry: a step's is its call's
	step  string // the step's name, for a step
	c     *config
	span  trace.Span
	cache string // "hit", "miss", or "" without a cache
}

// endExecute ends a guarded call's span and counts the call.
func (g *Guard) endExecute(ctx context.Context, o *observation, d *derived, out Outcome, err error) {
	c := o.c
	label := outcomeLabel(out, err)
	if g.tel.Metering() {
		// The store, the cache's answer and, for errors, what failed: so
		// that dashboards filter by store and chart cache hits and store
		// errors from the calls metric.
		kv := [5]attribute.KeyValue{telemetry.ScopeKey.String(o.scope), telemetry.OutcomeKey.String(label), g.tel.StoreAttr}
		n := 3
		if o.cache != "" {
			kv[n] = telemetry.CacheKey.String(o.cache)
			n++
		}
		if label == telemetry.OutcomeError {
			kv[n] = telemetry.ErrorTypeKey.String(callErrorType(out, err))
			n++
		}
		g.tel.Calls.Add(ctx, 1, metric.WithAttributes(kv[:n]...))
		if errors.Is(err, ErrLeaseLost) {
			g.tel.LeaseLost.Add(ctx, 1, metric.WithAttributes(kv[0], kv[2])) // scope, store
		}
	}
	span := o.span
	if span.IsRecording() {
		attrs := make([]attribute.KeyValue, 0, 7+len(c.spanAttrs))
		attrs = append(attrs, telemetry.ScopeKey.String(o.scope), telemetry.OutcomeKey.String(label), g.tel.StoreAttr)
		if h := d.hash(); h != "" {
			attrs = append(attrs, telemetry.KeyHashKey.String(h))
		}
		if o.step != "" {
			attrs = append(attrs, telemetry.StepKey.String(o.step))
		}
		if c.rawKeyAttr && d.selection != nil {
			attrs = append(attrs, telemetry.KeySelectionKey.String(string(d.selection)))
		}
		if o.cache != "" {
			attrs = append(attrs, telemetry.CacheKey.String(o.cache))
		}
		attrs = append(attrs, c.spanAttrs...)
		span.SetAttributes(attrs...)
		switch {
		case err != nil:
			recordError(span, err)
		case out == 0:
			span.SetStatus(codes.Error, "guarded function panicked")
		}
	}
	span.End()
}

func recordErrorIf(span trace.Span, err error) {
	if err != nil {
		recordError(span, err)
	}
}

func recordError(span trace.Span, err error) {
	if !span.IsRecording() {
		return
	}
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
	span.SetAttributes(telemetry.ErrorTypeKey.String(errorType(err)))
}

// errorType names an error for error.type: the guard's sentinel it matches,
// else its Go type.
func errorType(err error) string {
	for _, s := range []struct {
		err  error
		name string
	}{
		{ErrInProgress, telemetry.ErrorTypeInProgress}, {ErrPayloadMismatch, telemetry.ErrorTypePayloadMismatch},
		{ErrKeyMissing, telemetry.ErrorTypeKeyMissing}, {ErrLeaseLost, telemetry.ErrorTypeLeaseLost},
		{ErrResultUnavailable, telemetry.ErrorTypeResultUnavailable}, {ErrNotRecorded, telemetry.ErrorTypeNotRecorded},
		{ErrRefused, telemetry.ErrorTypeRefused}, {ErrStore, telemetry.ErrorTypeStore},
		{ErrInvalidInput, telemetry.ErrorTypeInvalidInput}, {ErrInvalidOption, telemetry.ErrorTypeInvalidOption},
		{context.Canceled, telemetry.ErrorTypeCanceled}, {context.DeadlineExceeded, telemetry.ErrorTypeDeadlineExceeded},
	} {
		if errors.Is(err, s.err) {
			return s.name
		}
	}
	return typeName(err)
}

// callErrorType is the error.type of a call counted as an error: "panic"
// when the function panicked, else errorType.
func callErrorType(out Outcome, err error) string {
	if err == nil && out == 0 {
		return telemetry.ErrorTypePanic
	}
	return errorType(err)
}

// log writes a guard event with the key's scope and hash and the trace
// identifiers.
func (g *Guard) log(ctx context.Context, level slog.Level, msg string, d *derived, args ...any) {
	l := g.tel.Logger
	if !l.Enabled(ctx, level) {
		return
	}
	args = append(args, slog.String("idemguard.scope", d.scope), slog.String("idemguard.key.hash", d.hash()))
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		args = append(args, slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	l.Log(ctx, level, msg, args...)
}

// unguardedRun warns that the call d runs unguarded because its key
// selected nothing: at most once per scope per unguardedLogEvery, with
// the number of such calls since the last warning. The calls metric
// counts every one of them (outcome unguarded).
func (g *Guard) unguardedRun(ctx context.Context, d *derived) {
	if !g.tel.Logger.Enabled(ctx, slog.LevelWarn) {
		return
	}
	s := g.unguarded.scope(d.scope)
	s.calls.Add(1)
	now := g.clock.Now().UnixNano()
	next := s.next.Load()
	if now < next || !s.next.CompareAndSwap(next, now+int64(unguardedLogEvery)) {
		return
	}
	g.log(ctx, slog.LevelWarn, "idemguard: key selection is empty; running unguarded, with no record (WithRequireKey(true) refuses such calls; this is logged at most once a minute per scope)", d,
		slog.Int64("idemguard.unguarded.calls", s.calls.Swap(0)))
}
