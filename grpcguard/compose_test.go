package grpcguard_test

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemguard/idemguard/grpcguard"
	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/guard/guardtest"
	"github.com/idemguard/idemguard/internal/teststores"
)

// A unary method behind the interceptor joins the composition suite on
// every store: a guard.Step inside it, Unavailable after the step
// (released), a key reused with another request (FailedPrecondition), a
// paused holder taken over.
func TestCompositionGRPC(t *testing.T) {
	guardtest.RunComposition(t, guardtest.EntryPoint{
		Name: "grpcguard",
		Run: func(ctx context.Context, t *testing.T, g *guard.Guard, call guardtest.Call, effect guardtest.Effect, body guardtest.Body) (string, error) {
			icpt := grpcguard.UnaryServerInterceptor(g)
			ctx = metadata.NewIncomingContext(ctx, metadata.Pairs(grpcguard.DefaultKeyMetadata, call.Key))
			resp, err := icpt(ctx, wrapperspb.String(call.Payload), &grpc.UnaryServerInfo{FullMethod: "/orders.v1.Orders/Place"},
				func(ctx context.Context, _ any) (any, error) {
					v, err := body(ctx, effect)
					if err != nil {
						return nil, status.Error(codes.Unavailable, err.Error())
					}
					return wrapperspb.String(v), nil
				})
			if err != nil {
				return "", err
			}
			return resp.(*wrapperspb.StringValue).GetValue(), nil
		},
	}, teststores.All())
}
