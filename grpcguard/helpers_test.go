package grpcguard_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemguard/idemguard/grpcguard"
	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/testing/teststores"
)

// A small service without generated code: a handwritten ServiceDesc with
// well-known wrapper messages.
const (
	serviceName  = "idemguard.test.Payments"
	chargeMethod = "/" + serviceName + "/Charge"
)

type paymentsServer interface {
	Charge(context.Context, *wrapperspb.StringValue) (*wrapperspb.StringValue, error)
}

var paymentsDesc = grpc.ServiceDesc{
	ServiceName: serviceName,
	HandlerType: (*paymentsServer)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Charge",
		Handler: func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			call := func(ctx context.Context, req any) (any, error) {
				return srv.(paymentsServer).Charge(ctx, req.(*wrapperspb.StringValue))
			}
			if interceptor == nil {
				return call(ctx, in)
			}
			return interceptor(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: chargeMethod}, call)
		},
	}},
}

// payments answers "charge <run>: <request>", so that a second run of one
// request shows in the response. fail, if set, picks an error for a run.
type payments struct {
	runs  atomic.Int64
	keyed atomic.Int64 // runs whose context had the idempotency key
	fail  func(run int64, req string) error
	block func() // called before answering
}

func (p *payments) Charge(ctx context.Context, req *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
	n := p.runs.Add(1)
	if p.block != nil {
		p.block()
	}
	if p.fail != nil {
		if err := p.fail(n, req.GetValue()); err != nil {
			return nil, err
		}
	}
	if _, ok := guard.KeyFromContext(ctx); ok {
		p.keyed.Add(1)
	}
	if strings.HasPrefix(req.GetValue(), "big:") {
		return wrapperspb.String(strings.Repeat("x", 4096)), nil
	}
	return wrapperspb.String(fmt.Sprintf("charge %d: %s", n, req.GetValue())), nil
}

var eachStore = teststores.Each

// newGuard returns a guard over s.
var newGuard = teststores.NewGuard

// start serves p on a loopback listener behind the interceptor and returns
// a client connection.
func start(t testing.TB, g *guard.Guard, p paymentsServer, opts ...grpcguard.Option) *grpc.ClientConn {
	t.Helper()
	icpt, err := grpcguard.UnaryServerInterceptor(g, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return startWith(t, p, []grpc.ServerOption{grpc.UnaryInterceptor(icpt)})
}

func startWith(t testing.TB, p paymentsServer, sopts []grpc.ServerOption, dopts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(sopts...)
	srv.RegisterService(&paymentsDesc, p)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, dopts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// reply is a call's outcome as the client saw it.
type reply struct {
	value   string
	err     error
	header  metadata.MD
	trailer metadata.MD
}

// charge calls Charge with key (none if "") and extra metadata pairs.
func charge(t testing.TB, conn *grpc.ClientConn, key, req string, kv ...string) reply {
	t.Helper()
	ctx := context.Background()
	if key != "" {
		ctx = grpcguard.ContextWithKey(ctx, key)
	}
	if len(kv) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, kv...)
	}
	var r reply
	out := new(wrapperspb.StringValue)
	r.err = conn.Invoke(ctx, chargeMethod, wrapperspb.String(req), out, grpc.Header(&r.header), grpc.Trailer(&r.trailer))
	r.value = out.GetValue()
	return r
}

// statusOf is the status metadata: in the header with a response, in the
// trailer with an error.
func statusOf(r reply) string {
	md := r.header
	if r.err != nil {
		md = r.trailer
	}
	if v := md.Get(grpcguard.StatusMetadata); len(v) == 1 {
		return v[0]
	}
	return ""
}

// wantRefusal checks that err is the interceptor's refusal with code and
// reason, and returns its status.
func wantRefusal(t *testing.T, err error, code codes.Code, reason string) *status.Status {
	t.Helper()
	st := status.Convert(err)
	if st.Code() != code {
		t.Errorf("code %v (%v), want %v", st.Code(), err, code)
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			if info.Reason != reason || info.Domain != grpcguard.ErrorDomain {
				t.Errorf("ErrorInfo %s/%s, want %s/%s", info.Domain, info.Reason, grpcguard.ErrorDomain, reason)
			}
			return st
		}
	}
	t.Errorf("%v: no ErrorInfo detail", err)
	return st
}
