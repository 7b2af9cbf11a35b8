package grpcguard

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/internal/transport"
)

// ErrorDomain is the domain of the google.rpc.ErrorInfo detail on the
// interceptor's own errors; the reason tells them apart (see the
// Reason constants).
const ErrorDomain = "idemguard"

// Reasons in the ErrorInfo detail of the interceptor's own errors.
const (
	ReasonKeyMissing          = "IDEMPOTENCY_KEY_MISSING"          // InvalidArgument
	ReasonKeyInvalid          = "IDEMPOTENCY_KEY_INVALID"          // InvalidArgument
	ReasonPrincipalMissing    = "IDEMPOTENCY_PRINCIPAL_MISSING"    // Unauthenticated
	ReasonInProgress          = "IDEMPOTENCY_KEY_IN_PROGRESS"      // Aborted, with RetryInfo
	ReasonKeyReused           = "IDEMPOTENCY_KEY_REUSED"           // FailedPrecondition
	ReasonResponseUnavailable = "IDEMPOTENCY_RESPONSE_UNAVAILABLE" // AlreadyExists
	ReasonStoreUnavailable    = "IDEMPOTENCY_STORE_UNAVAILABLE"    // Unavailable
	ReasonRequestUnkeyable    = "IDEMPOTENCY_REQUEST_UNKEYABLE"    // InvalidArgument
)

// UnaryServerInterceptor returns a unary server interceptor that guards
// calls with g: see the package documentation. It reports an invalid
// option or a nil guard as an error; [MustUnaryServerInterceptor] panics
// instead.
func UnaryServerInterceptor(g *guard.Guard, opts ...Option) (grpc.UnaryServerInterceptor, error) {
	c := defaults()
	for _, o := range opts {
		o.apply(&c)
	}
	t, err := transport.New(g, c.Config, c.fingerprint != nil,
		guard.WithCodec(messageCodec{max: c.MaxResponse, types: c.types}),
		adapt.WithErrorCodec(statusCodec{}),
		guard.WithDefiniteErrors(func(err error) bool { return c.stores(status.Code(err)) }))
	if err != nil {
		return nil, err
	}
	c.Config = t.Config
	in := &interceptor{t: t, c: c}
	return in.intercept, nil
}

// MustUnaryServerInterceptor is [UnaryServerInterceptor] that panics if an
// option is invalid or the guard is nil, for servers built once at
// start-up.
func MustUnaryServerInterceptor(g *guard.Guard, opts ...Option) grpc.UnaryServerInterceptor {
	i, err := UnaryServerInterceptor(g, opts...)
	if err != nil {
		panic(err)
	}
	return i
}

type interceptor struct {
	t *transport.Transport
	c config
}

// DefaultFingerprint is the default request fingerprint: the SHA-256 of
// the full method name and the request message's deterministic wire
// encoding. Deterministic encoding is stable for one binary; a server
// upgrade that changes the message's encoding of the same request (a new
// field with a default, for instance, is not encoded and so does not)
// would make a retry across the upgrade get FailedPrecondition.
func DefaultFingerprint(fullMethod string, req any) (string, error) {
	m, ok := req.(proto.Message)
	if !ok {
		return "", fmt.Errorf("grpcguard: the request is a %T, not a proto.Message", req)
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	io.WriteString(h, fullMethod)
	h.Write([]byte{0})
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil)), nil
}

func (in *interceptor) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if !in.t.Guards(info.FullMethod) || (in.c.skip != nil && in.c.skip(ctx, info.FullMethod)) {
		return handler(ctx, req)
	}
	if in.t.Guard().Disabled() {
		return in.unguarded(ctx, req, handler)
	}
	md, _ := metadata.FromIncomingContext(ctx)
	r := transport.Request{
		Keys:        md.Get(in.c.keyMD),
		Method:      info.FullMethod,
		Credentials: md.Get("authorization"),
	}
	if in.c.principal != nil && len(r.Keys) > 0 {
		r.Principal, r.HasPrincipal = in.c.principal(ctx), true
	}
	k, keyless, refused, err := in.t.Prologue(r)
	switch {
	case keyless:
		return in.unguarded(ctx, req, handler)
	case refused != 0:
		return nil, in.answer(info.FullMethod, refused, err, 0)
	}
	if in.c.fingerprint != nil {
		if k.F, err = in.c.fingerprint(info.FullMethod, req); err != nil {
			return nil, status.Errorf(codes.Internal, "grpcguard: fingerprinting the request: %v", err)
		}
	}

	var hresp any
	var herr error
	ran := false
	resp, out, st, err := transport.Run(ctx, in.t, k, func(ctx context.Context) (any, error) {
		ran = true
		hresp, herr = handler(ctx, req)
		return hresp, herr
	}, adapt.WithSpanAttributes(attribute.String("rpc.method", info.FullMethod)))

	switch {
	case ran:
		if errors.Is(err, guard.ErrNotRecorded) || errors.Is(err, guard.ErrLeaseLost) {
			in.t.NotRecorded(ctx, err, slog.String("method", info.FullMethod))
		} else if out == guard.OutcomeExecuted || out == guard.OutcomeReleased {
			v := statusReleased
			var exp time.Time
			if herr == nil || in.c.stores(status.Code(herr)) {
				// The expiry of the record just written.
				v, exp = statusExecuted, st.ExpiresAt
			}
			setMetadata(ctx, v, exp, herr != nil)
		}
		return hresp, herr
	case (out == guard.OutcomeReplayed || out == guard.OutcomeShared) && !errors.Is(err, guard.ErrResultUnavailable):
		if err != nil && !in.c.stores(status.Code(err)) {
			// An error shared by a concurrent duplicate, not stored.
			setMetadata(ctx, statusReleased, time.Time{}, true)
			return nil, err
		}
		setMetadata(ctx, statusReplayed, st.ExpiresAt, err != nil)
		return resp, err
	}
	refused, retry := in.t.Refuse(ctx, err, slog.String("method", info.FullMethod))
	if refused == transport.Canceled {
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	return nil, in.answer(info.FullMethod, refused, err, retry)
}

// unguarded runs handler as an unguarded call: for a disabled guard
// (IDEMGUARD_DISABLED), and for a call without a key that may go without
// one (WithKeyOptional). The handler runs inside a call, as the function
// of any unguarded call does, so that guard.Step in it runs its function
// unguarded; what handler returns is returned as it is.
func (in *interceptor) unguarded(ctx context.Context, req any, handler grpc.UnaryHandler) (any, error) {
	return transport.Unguarded(ctx, in.t, func(ctx context.Context) (any, error) { return handler(ctx, req) })
}

// answer is the status of a call the interceptor refuses for refused;
// detail is the invalid key's error, retry the delay in seconds a call
// still in progress asks for.
func (in *interceptor) answer(method string, refused transport.Refusal, detail error, retry int) error {
	switch refused {
	case transport.KeyMissing:
		return refusal(codes.InvalidArgument, ReasonKeyMissing, fmt.Sprintf("%s requires an %s metadata value: a unique key that the client sends again when it retries the call", method, in.c.keyMD))
	case transport.KeyInvalid:
		return refusal(codes.InvalidArgument, ReasonKeyInvalid, detail.Error())
	case transport.PrincipalMissing:
		return refusal(codes.Unauthenticated, ReasonPrincipalMissing, "idempotent calls need an authenticated caller, so that one caller's key never meets another's")
	case transport.InProgress:
		st, _ := status.New(codes.Aborted, fmt.Sprintf("a call with this idempotency key is still running; retry it unchanged in %d s", retry)).WithDetails(
			&errdetails.ErrorInfo{Reason: ReasonInProgress, Domain: ErrorDomain},
			&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Duration(retry) * time.Second)})
		return st.Err()
	case transport.KeyReused:
		return refusal(codes.FailedPrecondition, ReasonKeyReused, "this idempotency key was first used with a different request; send this request with a new key")
	case transport.ResponseUnavailable:
		return refusal(codes.AlreadyExists, ReasonResponseUnavailable, "the call with this idempotency key was processed, but its response was too large to keep; it will not run again: look up its result instead of retrying")
	case transport.StoreUnavailable:
		return refusal(codes.Unavailable, ReasonStoreUnavailable, "the call was not processed: its idempotency record could not be read or written; retrying is safe")
	case transport.RequestUnkeyable:
		return refusal(codes.InvalidArgument, ReasonRequestUnkeyable, "the call cannot be keyed: its principal is not valid UTF-8")
	}
	return status.Error(codes.Internal, "grpcguard: the call failed in the idempotency layer")
}

// refusal is a status with an ErrorInfo detail naming reason.
func refusal(code codes.Code, reason, msg string) error {
	st, err := status.New(code, msg).WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain})
	if err != nil {
		return status.Error(code, msg)
	}
	return st.Err()
}

// setMetadata sends the status and expiry metadata with the response: in
// its header metadata, or, with an error, in its trailer metadata, since
// header metadata would commit the call and so stop the retries gRPC
// makes by itself (a retry policy, transparent retries).
func setMetadata(ctx context.Context, v string, expires time.Time, isErr bool) {
	md := metadata.Pairs(statusMetadata, v)
	if !expires.IsZero() {
		// Rounded up to the second, as the stores keep it, so that every
		// replay says the same.
		md.Set(expiresMetadata, transport.Expires(expires).UTC().Format(time.RFC3339))
	}
	if isErr {
		_ = grpc.SetTrailer(ctx, md)
		return
	}
	_ = grpc.SetHeader(ctx, md)
}
