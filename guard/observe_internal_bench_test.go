package guard

import (
	"context"
	"testing"

	"github.com/idemguard/idemguard/store/memory"
	"github.com/idemguard/idemguard/telemetry"
)

// BenchmarkReplayTelemetry performs exactly the instrumentation work of a
// replay from the store (BenchmarkReplay) with no OpenTelemetry SDK
// installed: the execute span, the acquire child, the store timing and the
// calls counter. Its ns/op against BenchmarkReplay's, in the same run, is
// what instrumentation costs when nobody listens.
func BenchmarkReplayTelemetry(b *testing.B) {
	g, err := New(memory.New())
	if err != nil {
		b.Fatal(err)
	}
	c := &g.cfg
	d := derived{key: "charge#2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae"}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		ectx, span := g.startExecute(ctx, telemetry.SpanExecute)
		o := observation{span: span}
		actx, aspan := g.child(ectx, telemetry.SpanAcquire)
		g.timeStore(actx, "acquire", g.storeStart())
		aspan.End()
		g.endExecute(ectx, &o, &d, c, "charge", OutcomeReplayed, nil)
	}
}
