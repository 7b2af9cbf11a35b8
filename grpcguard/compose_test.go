package grpcguard_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemguard/idemguard/grpcguard"
	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/guard/guardtest"
	"github.com/idemguard/idemguard/internal/testing/teststores"
)

// A unary method behind the interceptor joins the composition suite on
// every store: a guard.Step inside it, Unavailable after the step
// (released), a key reused with another request (FailedPrecondition), a
// duplicate while the first runs (Aborted, or the first's response after
// waiting), paused holders taken over (the zombie's response returned
// without idempotency-key-status: not recorded), and the disabled guard's
// pass-through.
func TestCompositionGRPC(t *testing.T) {
	const method = "/orders.v1.Orders/Place"
	guardtest.RunComposition(t, guardtest.EntryPoint{
		Name: "grpcguard",
		Run: func(ctx context.Context, t *testing.T, g *guard.Guard, call guardtest.Call, effect guardtest.Effect, body guardtest.Body) (string, error) {
			icpt := grpcguard.MustUnaryServerInterceptor(g)
			stream := &metadataStream{method: method}
			ctx = grpc.NewContextWithServerTransportStream(metadata.NewIncomingContext(ctx, metadata.Pairs("idempotency-key", call.Key)), stream)
			resp, err := icpt(ctx, wrapperspb.String(call.Payload), &grpc.UnaryServerInfo{FullMethod: method},
				func(ctx context.Context, _ any) (any, error) {
					v, err := body(ctx, effect)
					switch {
					case errors.Is(err, guard.ErrPayloadMismatch):
						// A step refused the key reused: the method
						// answers as the interceptor does.
						return nil, status.Error(codes.FailedPrecondition, err.Error())
					case err != nil:
						return nil, status.Error(codes.Unavailable, err.Error())
					}
					return wrapperspb.String(v), nil
				})
			switch code := status.Code(err); {
			case code == codes.Aborted:
				return "", fmt.Errorf("%w: %w", err, guard.ErrInProgress)
			case code == codes.FailedPrecondition:
				return "", fmt.Errorf("%w: %w", err, guard.ErrPayloadMismatch)
			case err != nil:
				return "", err
			case stream.header(grpcguard.StatusMetadata) == "" && !g.Disabled():
				// Returned, but not recorded: its claim was taken over.
				return "", fmt.Errorf("a response without %s, not recorded: %w", grpcguard.StatusMetadata, guard.ErrLeaseLost)
			}
			return resp.(*wrapperspb.StringValue).GetValue(), nil
		},
	}, teststores.All())
}

// metadataStream is the server transport stream of a call made straight
// through the interceptor: it keeps the header metadata the interceptor
// sets.
type metadataStream struct {
	method string
	mu     sync.Mutex
	md     metadata.MD // protected by mu
}

func (s *metadataStream) Method() string { return s.method }

func (s *metadataStream) SetHeader(md metadata.MD) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.md = metadata.Join(s.md, md)
	return nil
}

func (s *metadataStream) SendHeader(md metadata.MD) error { return s.SetHeader(md) }

func (s *metadataStream) SetTrailer(metadata.MD) error { return nil }

// header returns the header metadata value key, or "".
func (s *metadataStream) header(key string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v := s.md.Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}
