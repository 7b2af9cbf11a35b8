package grpcguard_test

import (
	"context"
	"errors"
	"testing"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemguard/idemguard/grpcguard"
	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/internal/testing/teststores"
	"github.com/idemguard/idemguard/store/memory"
)

// stepping runs a step and answers with its value, or fails with
// FailedPrecondition when the request says "fail".
type stepping struct{}

func (stepping) Charge(ctx context.Context, req *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
	v, err := guard.Step(ctx, "charge", func(context.Context) (string, error) { return "ran", nil })
	if err != nil {
		return nil, err
	}
	if req.GetValue() == "fail" {
		return nil, status.Error(codes.FailedPrecondition, "declined")
	}
	return wrapperspb.String(v), nil
}

// A call without a key that may go without one runs as an unguarded call,
// as a disabled guard's calls do: a step in its handler runs its function
// unguarded instead of failing with adapt.ErrNotInCall. The guard's span
// and the server span label it alike: unguarded, and error when the
// handler fails.
func TestKeyOptionalRunsAsAnUnguardedCall(t *testing.T) {
	tr := teststores.NewTracing(t)
	g := newGuard(t, memory.New(), guard.WithTracerProvider(tr.Provider))
	conn := startWith(t, stepping{}, []grpc.ServerOption{
		grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(tr.Provider))),
		grpc.UnaryInterceptor(grpcguard.MustUnaryServerInterceptor(g, grpcguard.WithKeyOptional())),
	})
	for _, c := range []struct{ req, outcome string }{{"x", "unguarded"}, {"fail", "error"}} {
		tr.Reset()
		r := charge(t, conn, "", c.req)
		switch {
		case c.req == "fail" && status.Code(r.err) != codes.FailedPrecondition:
			t.Fatalf("keyless failing call: %v, want the handler's FailedPrecondition", r.err)
		case c.req != "fail" && (r.err != nil || r.value != "ran"):
			t.Fatalf("keyless call: %q %v, want \"ran\"", r.value, r.err)
		case errors.Is(r.err, adapt.ErrNotInCall):
			t.Fatal(r.err)
		}
		if len(r.header.Get("idempotency-key-status"))+len(r.trailer.Get("idempotency-key-status")) != 0 {
			t.Errorf("keyless call has idempotency metadata: %v %v", r.header, r.trailer)
		}
		server, execute := tr.Spans(t)
		teststores.CheckNested(t, server, execute, c.outcome)
	}
}
