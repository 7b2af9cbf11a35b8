package grpcguard

import (
	"context"
	"log/slog"
	"regexp"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/idemguard/idemguard/internal/idemkey"
)

// Defaults used when an option is not given.
const (
	// DefaultKeyMetadata is the request metadata key that carries the
	// idempotency key (gRPC metadata keys are lowercase).
	DefaultKeyMetadata = "idempotency-key"
	// StatusMetadata is the response header metadata that says whether the
	// response ran fresh ("executed"), is a stored one ("replayed"), or was
	// not kept ("released").
	StatusMetadata = "idempotency-key-status"
	// ExpiresMetadata is the response header metadata that says until when
	// a stored response is replayed (RFC 3339, UTC).
	ExpiresMetadata = "idempotency-key-expires"
	// DefaultScope is the guard scope of the interceptor's keys.
	DefaultScope = "grpc"
	// DefaultTTL is how long a stored response is replayed.
	DefaultTTL = 24 * time.Hour
	// DefaultMaxResponseBytes bounds the response message stored for
	// replays (its wire size).
	DefaultMaxResponseBytes = 256 << 10
)

// Values of the status metadata.
const (
	StatusExecuted = "executed"
	StatusReplayed = "replayed"
	StatusReleased = "released"
)

// Option configures the interceptor.
type Option func(*config)

// CodePolicy decides from a handler's error code whether the error is
// stored and replayed (true) or the key is released so that the client's
// retry runs the handler again (false).
type CodePolicy func(codes.Code) bool

// StoreClientErrors stores the errors that answer the request as sent, the
// codes that map to a 4xx HTTP status: InvalidArgument, NotFound,
// AlreadyExists, PermissionDenied, FailedPrecondition, OutOfRange and
// Unauthenticated. Every other code — Canceled, Aborted and
// ResourceExhausted, which ask for a retry, and the server's failures
// (Unknown, Internal, Unavailable, DeadlineExceeded, DataLoss,
// Unimplemented) — releases the key. It is the default, as 4xx/5xx is for
// httpguard.
func StoreClientErrors(c codes.Code) bool {
	switch c {
	case codes.InvalidArgument, codes.NotFound, codes.AlreadyExists, codes.PermissionDenied,
		codes.FailedPrecondition, codes.OutOfRange, codes.Unauthenticated:
		return true
	}
	return false
}

// StoreAllErrors stores every error, so a retry always gets the first
// answer.
func StoreAllErrors(codes.Code) bool { return true }

type config struct {
	idemkey.Settings
	methods     map[string]bool // nil: every unary method
	skip        func(ctx context.Context, fullMethod string) bool
	keyMD       string
	principal   func(context.Context) string
	fingerprint func(fullMethod string, req any) (string, error)
	policy      CodePolicy
	types       protoregistry.MessageTypeResolver
}

func defaults() config {
	return config{
		Settings:    idemkey.NewSettings("grpcguard", DefaultScope, DefaultTTL, DefaultMaxResponseBytes),
		keyMD:       DefaultKeyMetadata,
		fingerprint: DefaultFingerprint,
		policy:      StoreClientErrors,
		types:       protoregistry.GlobalTypes,
	}
}

// WithMethods guards only the unary methods named, by full method name
// ("/payments.v1.Payments/Charge"). By default every unary method the
// server has is guarded: install the interceptor on servers whose methods
// change state, or name those methods here.
func WithMethods(fullMethods ...string) Option {
	return func(c *config) {
		if len(fullMethods) == 0 {
			c.Fail("WithMethods needs at least one method")
			return
		}
		c.methods = make(map[string]bool, len(fullMethods))
		for _, m := range fullMethods {
			if !strings.HasPrefix(m, "/") {
				c.Fail("%q is not a full method name such as /pkg.Service/Method", m)
				return
			}
			c.methods[m] = true
		}
	}
}

// WithSkip sets a predicate for calls the interceptor passes through
// although their method is guarded.
func WithSkip(skip func(ctx context.Context, fullMethod string) bool) Option {
	return func(c *config) { c.skip = skip }
}

// WithKeyMetadata sets the metadata key that carries the idempotency key
// (default [DefaultKeyMetadata]).
func WithKeyMetadata(name string) Option {
	return func(c *config) {
		if name == "" {
			c.Fail("empty key metadata name")
			return
		}
		c.keyMD = strings.ToLower(name)
	}
}

// WithKeyLength bounds a key's length in bytes (default 1 to 255).
func WithKeyLength(min, max int) Option {
	return func(c *config) { c.SetKeyLength(min, max) }
}

// WithKeyPattern makes keys that pattern does not match InvalidArgument.
func WithKeyPattern(pattern *regexp.Regexp) Option {
	return func(c *config) { c.SetKeyPattern(pattern) }
}

// WithStrictKey accepts only RFC 8941 structured-field strings in double
// quotes, as the IETF draft prescribes for the HTTP header. By default a
// bare value is accepted too, and means the same key as its quoted form.
func WithStrictKey() Option {
	return func(c *config) { c.Rules.Strict = true }
}

// WithKeyOptional runs a call without a key unguarded instead of failing
// it with InvalidArgument.
func WithKeyOptional() Option {
	return func(c *config) { c.KeyOptional = true }
}

// WithPrincipal sets how the authenticated caller of a call is named (from
// what an authentication interceptor put in the context, or the peer's
// certificate) and puts it in every key, so that the same key sent by two
// callers names two records and no caller is ever replayed another's
// response. A call for which principal returns "" fails with
// Unauthenticated.
func WithPrincipal(principal func(ctx context.Context) string) Option {
	return func(c *config) {
		if principal == nil {
			c.Fail("nil principal function")
			return
		}
		c.principal = principal
	}
}

// WithFingerprint sets how a request is fingerprinted (default
// [DefaultFingerprint]); a key reused with another fingerprint fails with
// FailedPrecondition. nil turns the fingerprint off.
func WithFingerprint(fingerprint func(fullMethod string, req any) (string, error)) Option {
	return func(c *config) { c.fingerprint = fingerprint }
}

// WithScope sets the guard scope of the interceptor's keys (default
// [DefaultScope]).
func WithScope(scope string) Option {
	return func(c *config) { c.SetScope(scope) }
}

// WithTTL sets how long a stored response is replayed (default
// [DefaultTTL]), instead of the guard's default TTL.
func WithTTL(ttl time.Duration) Option {
	return func(c *config) { c.SetTTL(ttl) }
}

// WithLease sets the in-progress lease of a call's claim (default: the
// call's deadline, as the guard takes it, or the guard's default). The
// lease is extended while the handler runs.
func WithLease(lease time.Duration) Option {
	return func(c *config) { c.SetLease(lease) }
}

// WithWait makes a duplicate that arrives while the first call runs wait up
// to budget for its response instead of failing at once with Aborted.
func WithWait(budget time.Duration) Option {
	return func(c *config) { c.SetWait(budget) }
}

// WithCodePolicy sets which handler errors are stored and replayed
// (default [StoreClientErrors]).
func WithCodePolicy(policy CodePolicy) Option {
	return func(c *config) {
		if policy == nil {
			c.Fail("nil code policy")
			return
		}
		c.policy = policy
	}
}

// WithMaxResponseBytes bounds the stored response message's wire size
// (default [DefaultMaxResponseBytes]). A larger response is returned to
// the caller and recorded without a result, so the handler never runs
// twice for its key; a replay fails with AlreadyExists.
func WithMaxResponseBytes(n int) Option {
	return func(c *config) { c.SetMaxResponse(n) }
}

// WithTypes sets where replays find response message types by their full
// name (default protoregistry.GlobalTypes, where generated code registers
// its messages).
func WithTypes(types protoregistry.MessageTypeResolver) Option {
	return func(c *config) {
		if types == nil {
			c.Fail("nil type resolver")
			return
		}
		c.types = types
	}
}

// WithLogger sets where the interceptor logs a response returned but not
// recorded. The default is slog.Default().
func WithLogger(l *slog.Logger) Option {
	return func(c *config) { c.Logger = l }
}
