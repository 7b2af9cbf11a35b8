package watermillguard_test

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/store/memory"
	"github.com/idemguard/idemguard/telemetry"
	"github.com/idemguard/idemguard/watermillguard"
)

// metadataCarrier carries W3C trace context in a message's metadata, as
// Watermill tracing decorators do.
type metadataCarrier message.Metadata

func (c metadataCarrier) Get(key string) string { return message.Metadata(c).Get(key) }
func (c metadataCarrier) Set(key, value string) { message.Metadata(c).Set(key, value) }
func (c metadataCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// consumerTracing is the tracing middleware a Watermill user installs
// before the guard: it continues the publisher's trace from the message's
// metadata in a consumer span, and puts that span in the message's
// context.
func consumerTracing(tp trace.TracerProvider) message.HandlerMiddleware {
	tracer := tp.Tracer("watermill")
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			ctx := propagation.TraceContext{}.Extract(msg.Context(), metadataCarrier(msg.Metadata))
			ctx, span := tracer.Start(ctx, "orders process", trace.WithSpanKind(trace.SpanKindConsumer))
			defer span.End()
			msg.SetContext(ctx)
			return h(msg)
		}
	}
}

// The guard's span nests under the consumer span that continues the
// publisher's trace, the handler's spans under the guard's; the calls
// metric counts the publisher's duplicate as replayed: dropped.
func TestTelemetry(t *testing.T) {
	b := redisBroker(t)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { tp.Shutdown(context.Background()); mp.Shutdown(context.Background()) })
	g := newGuard(t, memory.New(), guard.WithTracerProvider(tp), guard.WithMeterProvider(mp))

	in := b.topic("orders")
	r, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	var deliveries counts
	r.AddMiddleware(deliveries.counting, consumerTracing(tp), watermillguard.MustMiddleware(g))
	r.AddConsumerHandler("ship", in, b.sub(t, "shipping"), func(msg *message.Message) error {
		_, span := tp.Tracer("shop").Start(msg.Context(), "charge")
		span.End()
		return nil
	})
	runRouter(t, r)

	ctx, producer := tp.Tracer("shop").Start(context.Background(), "orders publish", trace.WithSpanKind(trace.SpanKindProducer))
	msg := message.NewMessage(watermill.NewUUID(), []byte(`{}`))
	propagation.TraceContext{}.Inject(ctx, metadataCarrier(msg.Metadata))
	for range 2 { // the publisher's retry sends it again
		if err := b.pub.Publish(in, msg.Copy()); err != nil {
			t.Fatal(err)
		}
	}
	producer.End()
	eventually(t, "both deliveries handled", func() bool {
		n := 0
		for _, s := range exp.GetSpans() {
			if s.Name == "orders process" {
				n++
			}
		}
		return n == 2
	})

	spans := exp.GetSpans()
	byID := map[trace.SpanID]tracetest.SpanStub{}
	for _, s := range spans {
		byID[s.SpanContext.SpanID()] = s
	}
	parentName := func(s tracetest.SpanStub) string { return byID[s.Parent.SpanID()].Name }
	outcomes := map[string]int{}
	for _, s := range spans {
		if s.SpanContext.TraceID() != producer.SpanContext().TraceID() {
			t.Errorf("%s is in trace %s, not the publisher's %s", s.Name, s.SpanContext.TraceID(), producer.SpanContext().TraceID())
		}
		switch s.Name {
		case telemetry.SpanExecute:
			if p := parentName(s); p != "orders process" {
				t.Errorf("%s's parent is %q, want the consumer span", s.Name, p)
			}
			attrs := map[string]string{}
			for _, a := range s.Attributes {
				attrs[string(a.Key)] = a.Value.String()
			}
			if attrs[string(watermillguard.MessageIDKey)] != msg.UUID || attrs[string(telemetry.ScopeKey)] != "ship" {
				t.Errorf("%s attributes %v: want the message UUID and the handler's name as scope", s.Name, attrs)
			}
			outcomes[attrs[string(telemetry.OutcomeKey)]]++
		case "charge":
			if p := parentName(s); p != telemetry.SpanExecute {
				t.Errorf("the handler's span's parent is %q, want %s", p, telemetry.SpanExecute)
			}
		case "orders process":
			if p := parentName(s); p != "orders publish" {
				t.Errorf("the consumer span's parent is %q, want the publisher's", p)
			}
		}
	}
	if outcomes[telemetry.OutcomeExecuted] != 1 || outcomes[telemetry.OutcomeReplayed] != 1 {
		t.Errorf("execute spans by outcome %v, want executed 1, replayed 1", outcomes)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	calls := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == telemetry.MetricCalls {
				for _, dp := range sum.DataPoints {
					if s, _ := dp.Attributes.Value(telemetry.ScopeKey); s.AsString() == "ship" {
						o, _ := dp.Attributes.Value(telemetry.OutcomeKey)
						calls[o.AsString()] += dp.Value
					}
				}
			}
		}
	}
	if calls[telemetry.OutcomeReplayed] != 1 || calls[telemetry.OutcomeExecuted] != 1 {
		t.Errorf("%s by outcome %v: want executed 1 and replayed 1 (the duplicate dropped)", telemetry.MetricCalls, calls)
	}
}
