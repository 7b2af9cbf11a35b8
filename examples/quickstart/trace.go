package main

import (
	"fmt"
	"sort"
	"strings"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemguard/idemguard/telemetry"
)

// newTracerProvider returns an OpenTelemetry SDK tracer provider that
// exports every span, as it ends, to an in-memory exporter.
func newTracerProvider() (*sdktrace.TracerProvider, *tracetest.InMemoryExporter) {
	exp := tracetest.NewInMemoryExporter()
	return sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp)), exp
}

// renderTree draws spans as one tree per trace, children in the order they
// started:
//
//	RunWorkflow:Payment
//	└─ StartActivity:Charge
//	   └─ RunActivity:Charge
//	      └─ idemguard.execute  attempt=1 outcome=executed
//	         ├─ idemguard.acquire
//	         └─ idemguard.complete
func renderTree(spans tracetest.SpanStubs) string {
	byID := map[trace.SpanID]*tracetest.SpanStub{}
	for i := range spans {
		byID[spans[i].SpanContext.SpanID()] = &spans[i]
	}
	children := map[trace.SpanID][]*tracetest.SpanStub{}
	var roots []*tracetest.SpanStub
	for i := range spans {
		s := &spans[i]
		if _, ok := byID[s.Parent.SpanID()]; ok && s.Parent.IsValid() {
			children[s.Parent.SpanID()] = append(children[s.Parent.SpanID()], s)
		} else {
			roots = append(roots, s)
		}
	}
	byStart := func(ss []*tracetest.SpanStub) {
		sort.SliceStable(ss, func(i, j int) bool { return ss[i].StartTime.Before(ss[j].StartTime) })
	}
	byStart(roots)

	var b strings.Builder
	var draw func(s *tracetest.SpanStub, prefix, branch string)
	draw = func(s *tracetest.SpanStub, prefix, branch string) {
		fmt.Fprintf(&b, "%s%s%s\n", prefix, branch, label(s))
		switch branch {
		case "├─ ":
			prefix += "│  "
		case "└─ ":
			prefix += "   "
		}
		kids := children[s.SpanContext.SpanID()]
		byStart(kids)
		for i, k := range kids {
			if i == len(kids)-1 {
				draw(k, prefix, "└─ ")
			} else {
				draw(k, prefix, "├─ ")
			}
		}
	}
	for _, r := range roots {
		draw(r, "", "")
	}
	return b.String()
}

// label is a span's name with what matters about it: the attempt and
// outcome of a guarded call, and any error.
func label(s *tracetest.SpanStub) string {
	l := s.Name
	attrs := map[string]string{}
	for _, a := range s.Attributes {
		attrs[string(a.Key)] = a.Value.String()
	}
	if id, ok := attrs["temporalWorkflowID"]; ok && strings.HasPrefix(s.Name, "RunWorkflow:") {
		l += "  workflow=" + id
	}
	if s.Name == telemetry.SpanExecute {
		if step, ok := attrs[string(telemetry.StepKey)]; ok {
			l += "  step=" + step // a guard.Step's name
		}
		if v, ok := attrs["temporal.activity.attempt"]; ok { // set by package activity
			l += "  attempt=" + v
		}
		l += "  outcome=" + attrs[string(telemetry.OutcomeKey)]
	}
	if s.Status.Code == codes.Error {
		l += "  error: " + s.Status.Description
	}
	return l
}
