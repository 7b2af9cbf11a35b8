package teststores

import (
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemguard/idemguard/telemetry"
)

// Tracing is an OpenTelemetry SDK tracer provider that exports to memory,
// for tests of how the guard's spans nest under a transport's.
type Tracing struct {
	Provider *sdktrace.TracerProvider
	exporter *tracetest.InMemoryExporter
}

// NewTracing returns a provider with a synchronous in-memory exporter.
func NewTracing(t testing.TB) *Tracing {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { tp.Shutdown(t.Context()) })
	return &Tracing{Provider: tp, exporter: exp}
}

// Reset forgets the spans exported so far.
func (tr *Tracing) Reset() { tr.exporter.Reset() }

// Spans waits up to 5 s for a server span and one named
// telemetry.SpanExecute to be exported (a server span ends after its
// response has left), and returns the last of each.
func (tr *Tracing) Spans(t testing.TB) (server, execute tracetest.SpanStub) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		var sok, eok bool
		for _, s := range tr.exporter.GetSpans() {
			switch {
			case s.SpanKind == trace.SpanKindServer:
				server, sok = s, true
			case s.Name == telemetry.SpanExecute:
				execute, eok = s, true
			}
		}
		if sok && eok {
			return server, execute
		}
		if time.Now().After(deadline) {
			var names []string
			for _, s := range tr.exporter.GetSpans() {
				names = append(names, s.Name)
			}
			t.Fatalf("a server span and %q were not both exported; got %q", telemetry.SpanExecute, names)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// CheckNested checks that execute is a child of server and that both say
// outcome in idemguard.outcome.
func CheckNested(t testing.TB, server, execute tracetest.SpanStub, outcome string) {
	t.Helper()
	if execute.Parent.SpanID() != server.SpanContext.SpanID() || execute.SpanContext.TraceID() != server.SpanContext.TraceID() {
		t.Errorf("%s (parent %s) is not a child of %s (%s)", execute.Name, execute.Parent.SpanID(), server.Name, server.SpanContext.SpanID())
	}
	for _, s := range []tracetest.SpanStub{server, execute} {
		if got := attr(s.Attributes, telemetry.OutcomeKey); got != outcome {
			t.Errorf("%s: %s = %q, want %q", s.Name, telemetry.OutcomeKey, got, outcome)
		}
	}
}

func attr(attrs []attribute.KeyValue, key attribute.Key) string {
	for _, a := range attrs {
		if a.Key == key {
			return a.Value.String()
		}
	}
	return ""
}
