package grpcguard_test

import (
	"testing"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"

	"github.com/idemguard/idemguard/grpcguard"
	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/testing/teststores"
	"github.com/idemguard/idemguard/store/memory"
)

// With otelgrpc's server stats handler, the guard's span nests under the
// gRPC server span, and both tell a fresh response from a replay.
func TestSpansNestUnderOtelgrpc(t *testing.T) {
	tr := teststores.NewTracing(t)
	g := newGuard(t, memory.New(), guard.WithTracerProvider(tr.Provider))
	conn := startWith(t, &payments{}, []grpc.ServerOption{
		grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(tr.Provider))),
		grpc.UnaryInterceptor(grpcguard.MustUnaryServerInterceptor(g)),
	})
	for _, want := range []string{"executed", "replayed"} {
		tr.Reset()
		if r := charge(t, conn, "key-otel", "x"); r.err != nil {
			t.Fatal(r.err)
		}
		server, execute := tr.Spans(t)
		teststores.CheckNested(t, server, execute, want)
	}
}
