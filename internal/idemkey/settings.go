package idemkey

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"regexp"
	"sync/atomic"
	"time"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/store"
)

// The transports' defaults, those of the ASP.NET idempotency middleware
// the HTTP layer follows.
const (
	// DefaultTTL is how long a stored response is replayed: 24 hours, as
	// Stripe and the ASP.NET middleware keep keys.
	DefaultTTL = 24 * time.Hour
	// DefaultWait is how long a duplicate waits for the first request's
	// response before it is refused as in progress (the ASP.NET
	// middleware's lock timeout).
	DefaultWait = 30 * time.Second
	// DefaultMaxResponse bounds the response stored for replays: 256 KiB
	// fits in a DynamoDB item (400 KB) even when it does not compress.
	DefaultMaxResponse = 256 << 10
	// HTTPScope and GRPCScope are the guard scopes of the middleware's and
	// the interceptor's keys unless WithScope says otherwise.
	HTTPScope = "http"
	GRPCScope = "grpc"
)

// Settings are the options the HTTP middleware and the gRPC interceptor
// share. Each package's Option functions set them through the methods
// below, which check the values; the first invalid one is kept in Err.
type Settings struct {
	Pkg         string // "httpguard" or "grpcguard", for messages
	Rules       Rules
	KeyOptional bool
	// SharedKeys: requests are not scoped by their credentials when no
	// principal function is given.
	SharedKeys  bool
	Scope       string
	MaxResponse int
	Logger      *slog.Logger
	// Guard are the user's guard call options (WithGuardOptions).
	Guard []guard.CallOption
	Err   error
}

// NewSettings returns the shared defaults for package pkg, whose keys are
// in scope.
func NewSettings(pkg, scope string) Settings {
	return Settings{Pkg: pkg, Rules: DefaultRules, Scope: scope, MaxResponse: DefaultMaxResponse}
}

// Fail records an invalid option, unless one was recorded already.
func (s *Settings) Fail(format string, args ...any) {
	if s.Err == nil {
		s.Err = fmt.Errorf(s.Pkg+": "+format, args...)
	}
}

// Set sets *dst to v if ok, and otherwise records the invalid option
// described by msg: the check of an option that must not be nil, empty or
// out of range.
func Set[T any](s *Settings, dst *T, v T, ok bool, msg string, args ...any) {
	if !ok {
		s.Fail(msg, args...)
		return
	}
	*dst = v
}

// SetKeyLength bounds keys' length; Finish checks the bounds.
func (s *Settings) SetKeyLength(min, max int) { s.Rules.MinLength, s.Rules.MaxLength = min, max }

// SetKeyPattern sets the format keys must match.
func (s *Settings) SetKeyPattern(p *regexp.Regexp) { s.Rules.Pattern = p }

// SetStrictKey accepts only quoted keys.
func (s *Settings) SetStrictKey() { s.Rules.Strict = true }

// SetKeyOptional lets requests without a key through, unguarded.
func (s *Settings) SetKeyOptional() { s.KeyOptional = true }

// SetSharedKeys stops scoping keys by the caller's credentials.
func (s *Settings) SetSharedKeys() { s.SharedKeys = true }

// SetScope sets the guard scope.
func (s *Settings) SetScope(scope string) {
	if scope == "" {
		s.Fail("empty scope")
		return
	}
	s.Scope = scope
}

// SetMaxResponse bounds stored responses.
func (s *Settings) SetMaxResponse(n int) {
	if n < 0 {
		s.Fail("max response bytes must not be negative, got %d", n)
		return
	}
	s.MaxResponse = n
}

// SetLogger sets the logger (nil: slog.Default()).
func (s *Settings) SetLogger(l *slog.Logger) { s.Logger = l }

// AddGuardOptions adds the user's guard call options.
func (s *Settings) AddGuardOptions(opts []guard.CallOption) { s.Guard = append(s.Guard, opts...) }

// Finish checks the settings and returns the guard call options of every
// guarded request, in the order that makes each win where it should:
//
//  1. the transport's defaults, through adapt.WithDefaults, so that what
//     the user gave guard.New wins over them: a TTL of [DefaultTTL] and
//     wait mode with a budget of [DefaultWait];
//  2. the user's options (WithGuardOptions), which win over both;
//  3. what the transport needs to work, which nothing overrides: the key
//     from the input's "k" member (required), the payload validation of
//     its "f" member when fingerprint, the outcome hook that fills a
//     [CallState], and own (the transport's codec and result policy).
//
// It checks them against g, checks that the user's options could be a
// guard's defaults (guard.WithKey and adapt.WithClaimToken name one call,
// and would give every request one key or one claim), and that g's store
// can hold the keys of the scope (guard.CheckScope).
func (s *Settings) Finish(g *guard.Guard, fingerprint bool, own ...guard.CallOption) ([]guard.CallOption, error) {
	if g == nil {
		return nil, fmt.Errorf("%s: nil guard", s.Pkg)
	}
	if s.Err != nil {
		return nil, s.Err
	}
	if err := s.Rules.Check(); err != nil {
		return nil, fmt.Errorf("%s: %w", s.Pkg, err)
	}
	if s.Logger == nil {
		s.Logger = slog.Default()
	}
	if err := g.CheckScope(s.Scope); err != nil {
		return nil, fmt.Errorf("%s: WithScope: %w", s.Pkg, err)
	}
	if len(s.Guard) > 0 {
		if _, err := guard.New(g.Store(), toOptions(s.Guard)...); err != nil {
			return nil, fmt.Errorf("%s: WithGuardOptions: %w", s.Pkg, err)
		}
	}
	// What the transport needs of its calls is fixed: the same option
	// given through WithGuardOptions is reported, not ignored.
	fixed := []guard.CallOption{guard.WithKeyPath(keyPath), guard.WithRequireKey(true), guard.WithOutcomeHook(recorded)}
	if fingerprint {
		fixed = append(fixed, guard.WithPayloadValidation(fingerprintPath))
	}
	call := make([]guard.CallOption, 0, 2+len(s.Guard))
	call = append(call, adapt.WithDefaults(guard.WithTTL(DefaultTTL), guard.WithWait(DefaultWait)))
	call = append(call, s.Guard...)
	call = append(call, adapt.Fixed(append(fixed, own...)...))
	if _, err := adapt.Settings(g, call...); err != nil {
		return nil, fmt.Errorf("%s: %w", s.Pkg, err)
	}
	return call, nil
}

func toOptions(opts []guard.CallOption) []guard.Option {
	out := make([]guard.Option, len(opts))
	for i, o := range opts {
		out[i] = adapt.Lift(o)
	}
	return out
}

// StoreFailed logs a request refused because the store failed before its
// handler ran, with the cause, at level Warn; the first such failure after
// a success (or since the transport started) is logged at level Error
// with a message that says what it means, so that a store that cannot be
// reached says so clearly once, and every refusal still has its cause.
func (s *Settings) StoreFailed(ctx context.Context, h *Health, refused string, err error, attrs ...slog.Attr) {
	attrs = append(attrs, slog.Any("error", err))
	if h.fail() {
		s.Logger.LogAttrs(ctx, slog.LevelError, s.Pkg+": the idempotency store failed; guarded requests are refused with "+refused+" until it answers", attrs...)
		return
	}
	s.Logger.LogAttrs(ctx, slog.LevelWarn, s.Pkg+": request refused with "+refused+": the idempotency store failed", attrs...)
}

// CallState is what the outcome hook learns about one guarded request.
type CallState struct {
	// ExpiresAt is the expiry of the record replayed or just recorded, if
	// any.
	ExpiresAt time.Time
}

type callStateKey struct{}

// WithCallState returns a context for adapt.Execute whose outcome hook
// (set by [Settings.Finish]) fills the returned state.
func WithCallState(ctx context.Context) (context.Context, *CallState) {
	st := &CallState{}
	return context.WithValue(ctx, callStateKey{}, st), st
}

func recorded(ctx context.Context, _ string, rec *store.Record, _ guard.Outcome) {
	if st, ok := ctx.Value(callStateKey{}).(*CallState); ok && rec != nil {
		st.ExpiresAt = rec.ExpiresAt
	}
}

// Expires is a record expiry as the transports announce it: rounded up to
// the whole second, as the DynamoDB and Redis stores keep it, so that the
// first response and every replay announce the same instant on every
// store.
func Expires(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	if r := t.Truncate(time.Second); !r.Equal(t) {
		return r.Add(time.Second)
	}
	return t
}

// The members of [Input] the guard reads.
const (
	keyPath         = "k"
	fingerprintPath = "f"
)

// Input is what the guard derives a request's key and fingerprint from,
// with the call options [Settings.Finish] returns: the key is the hash of
// K's canonical JSON, so two requests share a record only when all of the
// selection is the same; F, the request's fingerprint, is the payload
// validation.
type Input struct {
	K Selection `json:"k"`
	F string    `json:"f,omitempty"`
}

// Selection is the part of [Input] the key is derived from: the client's
// key, the method, the route, and who the caller is.
type Selection struct {
	Key       string `json:"key"`
	Method    string `json:"method"`          // HTTP method, or gRPC full method name
	Route     string `json:"route,omitempty"` // HTTP only
	Principal string `json:"principal,omitempty"`
	// Credential is the SHA-256 of the caller's credentials (see
	// [Credential]) when no principal function names the caller.
	Credential string `json:"credential,omitempty"`
}

// Credential returns what stands for a caller's credentials in a key: the
// lowercase hex SHA-256 of the values of its Authorization header (or
// authorization metadata), each followed by a zero byte; "" without
// credentials. The credentials themselves are never stored, and the key
// hashes this again.
func Credential(values []string) string {
	if len(values) == 0 {
		return ""
	}
	h := sha256.New()
	for _, v := range values {
		h.Write([]byte(v))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Key returns the record key the transport with scope derives for sel
// under g's key secret: what `idemguard key --http` prints.
func Key(g *guard.Guard, scope string, sel Selection) (string, error) {
	key, _, err := g.Key(scope, Input{K: sel}, guard.WithKeyPath(keyPath))
	return key, err
}

// Health tracks whether a transport's store answered its last request, so
// that [Settings.StoreFailed] can tell the first failure from the ones
// that follow. The zero Health is ready to use and safe for concurrent
// use.
type Health struct{ failing atomic.Bool }

// OK records a request the store answered.
func (h *Health) OK() {
	if h.failing.Load() {
		h.failing.Store(false)
	}
}

// fail records a failure and reports whether it is the first since the
// last success.
func (h *Health) fail() bool { return !h.failing.Swap(true) }
