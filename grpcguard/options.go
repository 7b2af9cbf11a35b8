package grpcguard

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/transport"
)

// Names of the metadata.
const (
	// defaultKeyMetadata is the request metadata key that carries the
	// idempotency key (gRPC metadata keys are lowercase).
	defaultKeyMetadata = "idempotency-key"
	// statusMetadata is the response header metadata that says whether the
	// response ran fresh ("executed"), is a stored one ("replayed"), or was
	// not kept ("released").
	statusMetadata = "idempotency-key-status"
	// expiresMetadata is the response header metadata that says until when
	// a stored response is replayed (RFC 3339, UTC).
	expiresMetadata = "idempotency-key-expires"
)

// Values of the status metadata.
const (
	statusExecuted = "executed"
	statusReplayed = "replayed"
	statusReleased = "released"
)

// Option configures the interceptor.
type Option interface{ apply(*config) }

// optionFunc is an Option that is a function.
type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	transport.Config
	skip        func(ctx context.Context, fullMethod string) bool
	keyMD       string
	principal   func(context.Context) string
	fingerprint func(fullMethod string, req any) (string, error)
	policy      func(codes.Code) bool
	types       protoregistry.MessageTypeResolver
}

func defaults() config {
	return config{
		Config:      transport.NewConfig("grpcguard", transport.GRPCScope, "Unavailable"),
		keyMD:       defaultKeyMetadata,
		fingerprint: DefaultFingerprint,
		policy:      func(codes.Code) bool { return false },
		types:       protoregistry.GlobalTypes,
	}
}

// retryLater are the codes never stored, whatever the policy: those
// gRPC's status-code guide asks the client to retry (Unavailable,
// ResourceExhausted, Aborted), and a call that did not finish (Canceled,
// DeadlineExceeded). httpguard never stores 408, 425 and 429 likewise.
func retryLater(c codes.Code) bool {
	switch c {
	case codes.Canceled, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Aborted, codes.Unavailable:
		return true
	}
	return false
}

// shared adapts an option the interceptor shares with the HTTP middleware.
func shared(o transport.Option) Option { return optionFunc(func(c *config) { o(&c.Config) }) }

// stores reports whether a handler's error with code c is stored.
func (c *config) stores(code codes.Code) bool { return !retryLater(code) && c.policy(code) }

// WithGuardOptions passes guard call options to every guarded call, such
// as guard.WithTTL (default 24 hours), guard.WithWait (default: wait up to
// 30 s for an in-flight duplicate), guard.WithWait(0) (fail a duplicate
// with Aborted at once) or guard.WithLease. They win over the defaults
// given to guard.New, which win over the interceptor's own. The
// interceptor sets the key (path and requirement), the payload validation
// (see [WithFingerprint]), the codecs, the definite errors (see
// [WithCodePolicy]) and the outcome hook of its calls itself: those set
// on the guard give way, and those given here are refused
// (guard.ErrInvalidOption), as are guard.WithKey and adapt.WithClaimToken,
// which name one call.
func WithGuardOptions(opts ...guard.CallOption) Option {
	return shared(transport.GuardOptions(opts...))
}

// WithMethods guards only the unary methods named, by full method name
// ("/payments.v1.Payments/Charge"). By default every unary method the
// server has is guarded: install the interceptor on servers whose methods
// change state, or name those methods here.
func WithMethods(fullMethods ...string) Option {
	return shared(transport.Methods(fullMethod, fullMethods...))
}

// fullMethod checks a full method name.
func fullMethod(m string) (string, error) {
	if !strings.HasPrefix(m, "/") {
		return "", fmt.Errorf("%q is not a full method name such as /pkg.Service/Method", m)
	}
	return m, nil
}

// WithSkip sets a predicate for calls the interceptor passes through
// although their method is guarded.
func WithSkip(skip func(ctx context.Context, fullMethod string) bool) Option {
	return optionFunc(func(c *config) { c.skip = skip })
}

// WithKeyOptional runs a call without a key unguarded instead of failing
// it with InvalidArgument: the handler runs as an unguarded call (as
// guard.Do runs one whose key selection is empty), so that guard.Step in
// it runs its function unguarded, and the guard counts it (outcome
// unguarded, or error when the handler fails) and warns, at most once a
// minute, that calls run unguarded. A key that is present is still
// validated.
func WithKeyOptional() Option { return shared(transport.KeyOptional()) }

// WithKeyMetadata sets the metadata key that carries the idempotency key
// (default "idempotency-key").
func WithKeyMetadata(name string) Option {
	return optionFunc(func(c *config) {
		transport.Set(&c.Config, &c.keyMD, strings.ToLower(name), name != "", "empty key metadata name")
	})
}

// WithKeyLength bounds a key's length in bytes (default 1 to 256).
func WithKeyLength(min, max int) Option { return shared(transport.KeyLength(min, max)) }

// WithKeyPattern makes keys that pattern does not match InvalidArgument.
func WithKeyPattern(pattern *regexp.Regexp) Option { return shared(transport.KeyPattern(pattern)) }

// WithStrictKey accepts only RFC 8941 structured-field strings in double
// quotes, as the IETF draft prescribes for the HTTP header. By default a
// bare value is accepted too, and means the same key as its quoted form.
func WithStrictKey() Option { return shared(transport.StrictKey()) }

// WithPrincipal sets how the authenticated caller of a call is named (from
// what an authentication interceptor put in the context, or the peer's
// certificate) and puts it in every key, so that the same key sent by two
// callers names two records and no caller is ever replayed another's
// response. A call for which principal returns "" fails with
// Unauthenticated. Without this option, keys are scoped by the call's
// authorization metadata (see [WithSharedKeys]).
func WithPrincipal(principal func(ctx context.Context) string) Option {
	return optionFunc(func(c *config) {
		transport.Set(&c.Config, &c.principal, principal, principal != nil, "nil principal function")
	})
}

// WithSharedKeys stops scoping keys by the caller's credentials, for
// methods whose callers send none. By default, without [WithPrincipal],
// the SHA-256 of the call's authorization metadata (where per-call
// credentials such as OAuth tokens travel) is part of every key, so that
// two callers with different credentials never share a record. Services
// that authenticate callers otherwise (a client certificate, a metadata
// key of their own) should name them with WithPrincipal.
func WithSharedKeys() Option { return shared(transport.SharedKeys()) }

// WithFingerprint sets how a request is fingerprinted (default
// [DefaultFingerprint]); a key reused with another fingerprint fails with
// FailedPrecondition. nil turns the fingerprint off.
func WithFingerprint(fingerprint func(fullMethod string, req any) (string, error)) Option {
	return optionFunc(func(c *config) { c.fingerprint = fingerprint })
}

// WithScope sets the guard scope of the interceptor's keys (default
// "grpc").
func WithScope(scope string) Option { return shared(transport.Scope(scope)) }

// WithCodePolicy sets which handler errors are stored and replayed as
// their status, by code; by default none is: an error releases the key,
// so that the client's retry runs the handler again, as httpguard
// releases 4xx and 5xx. Canceled, DeadlineExceeded, ResourceExhausted,
// Aborted and Unavailable are never stored, whatever the policy: they ask
// the client to come back later. To store the errors that answer the
// request as sent (the codes that map to a 4xx):
//
//	grpcguard.WithCodePolicy(func(c codes.Code) bool {
//		switch c {
//		case codes.InvalidArgument, codes.NotFound, codes.AlreadyExists, codes.PermissionDenied,
//			codes.FailedPrecondition, codes.OutOfRange, codes.Unauthenticated:
//			return true
//		}
//		return false
//	})
func WithCodePolicy(store func(codes.Code) bool) Option {
	return optionFunc(func(c *config) { transport.Set(&c.Config, &c.policy, store, store != nil, "nil code policy") })
}

// WithCacheErrors stores every error (but the codes that ask for a later
// retry, see [WithCodePolicy]), as httpguard's WithCacheErrors
// does: a client that retries a failed call gets the same status instead
// of another attempt, until the key expires.
func WithCacheErrors() Option {
	return WithCodePolicy(func(codes.Code) bool { return true })
}

// WithMaxResponseBytes bounds the stored response message's wire size
// (default 256 KiB). A larger response is returned to
// the caller and recorded without a result, so the handler never runs
// twice for its key; a replay fails with AlreadyExists.
func WithMaxResponseBytes(n int) Option { return shared(transport.MaxResponseBytes(n)) }

// WithTypes sets where replays find response message types by their full
// name (default protoregistry.GlobalTypes, where generated code registers
// its messages).
func WithTypes(types protoregistry.MessageTypeResolver) Option {
	return optionFunc(func(c *config) { transport.Set(&c.Config, &c.types, types, types != nil, "nil type resolver") })
}

// WithLogger sets where the interceptor logs what an operator must know:
// a call refused because the store failed (with the cause), a response
// returned but not recorded. The default is slog.Default().
func WithLogger(l *slog.Logger) Option { return shared(transport.Logger(l)) }
