// Package transport is the one implementation behind the HTTP middleware
// (httpguard) and the gRPC interceptor (grpcguard), and what the
// idemguard command (key --http) shares with them. It holds the options
// both transports have (each package's option is a one-line forwarder to
// one of them), reads and checks the idempotency key a request carries in
// a header or in metadata and derives the request's record key from it
// (the key prologue), runs a request as a guarded call — or, for a
// disabled guard and a request without a key that may go without one, as
// an unguarded call, so that guard.Step inside works — and keeps the
// bookkeeping around it: the outcome on the transport's server span, the
// store's health in the logs, the retry hint a duplicate gets while the
// first request runs. What a transport answers is named here as a
// [Refusal]; each package renders it on its wire (an RFC 9457 problem, a
// gRPC status).
//
// It sits above package guard, beside the adapters: it is their plumbing,
// not a leaf below the engine.
package transport

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/telemetry"
)

// Transport is one configured transport: its options, the guard, the
// call options of every guarded request and the store's health. It is
// safe for concurrent use.
type Transport struct {
	Config
	g      *guard.Guard
	call   []guard.CallOption
	ttl    time.Duration
	health health
}

// New checks c against g and returns the transport. fingerprint says that
// requests carry a fingerprint (the payload validation); own are the
// transport's own call options (its codec and result policy), which
// nothing overrides. See [Config] for the order of the call options.
func New(g *guard.Guard, c Config, fingerprint bool, own ...guard.CallOption) (*Transport, error) {
	call, ttl, err := c.callOptions(g, fingerprint, own)
	if err != nil {
		return nil, err
	}
	return &Transport{Config: c, g: g, call: call, ttl: ttl}, nil
}

// Guard returns the transport's guard.
func (t *Transport) Guard() *guard.Guard { return t.g }

// Settings returns the settings of a call with the transport's call
// options and extra, a request's own.
func (t *Transport) Settings(extra ...guard.CallOption) (adapt.CallSettings, error) {
	return adapt.Settings(t.g, append(t.call[:len(t.call):len(t.call)], extra...)...)
}

// TTL returns the record life of the transport's calls, unless a request
// asks for its own.
func (t *Transport) TTL() time.Duration { return t.ttl }

// Refusal is why a transport answers a request itself instead of with its
// handler's response.
type Refusal int

const (
	// KeyMissing: a guarded request without a key.
	KeyMissing Refusal = iota + 1
	// KeyInvalid: a key the rules refuse; the detail is [Parse]'s error.
	KeyInvalid
	// PrincipalMissing: the principal function named no caller.
	PrincipalMissing
	// InProgress: another request with the key is running; retry later.
	InProgress
	// KeyReused: the key was first used with another request.
	KeyReused
	// ResponseUnavailable: the request was processed, but its response
	// was not kept.
	ResponseUnavailable
	// StoreUnavailable: the store failed before the handler ran.
	StoreUnavailable
	// RequestUnkeyable: the request's selection is not valid UTF-8.
	RequestUnkeyable
	// Canceled: the request's context ended before the handler ran.
	Canceled
	// Internal: anything else; logged.
	Internal
)

// Request is a request as the key prologue reads it.
type Request struct {
	// Keys are the values of the key header or metadata.
	Keys []string
	// Method is the HTTP method or the gRPC full method name; Route the
	// HTTP route.
	Method, Route string
	// Principal names the request's caller, when the transport has a
	// principal function (WithPrincipal, which HasPrincipal says).
	Principal    string
	HasPrincipal bool
	// Credentials are the request's Authorization values, which scope its
	// key unless it has a principal or the keys are shared. (Values, not
	// functions, so that a request's prologue allocates nothing.)
	Credentials []string
}

// Prologue reads r's key and returns the input its guarded call derives
// the key from. keyless reports a request without a key that may go
// without one (WithKeyOptional): run it with [Unguarded]. Otherwise a
// refusal other than 0 says how to answer instead, with err saying why for
// [KeyInvalid].
func (t *Transport) Prologue(r Request) (in Input, keyless bool, refusal Refusal, err error) {
	if len(r.Keys) == 0 {
		if t.KeyOptional {
			return in, true, 0, nil
		}
		return in, false, KeyMissing, nil
	}
	key, err := Parse(r.Keys, t.Rules)
	if err != nil {
		return in, false, KeyInvalid, err
	}
	in.K = Selection{Key: key, Method: r.Method, Route: r.Route}
	switch {
	case r.HasPrincipal:
		if in.K.Principal = r.Principal; in.K.Principal == "" {
			return in, false, PrincipalMissing, nil
		}
	case !t.SharedKeys:
		in.K.Credential = Credential(r.Credentials)
	}
	return in, false, 0, nil
}

// Run runs fn as the guarded call of one request, with the input in, the
// transport's call options and extra. It puts the request's outcome on
// the server span of ctx (that otelhttp, otelgrpc or any instrumentation
// started), so that dashboards of the transport can tell replays from
// fresh responses, and records whether the store answered. st tells the
// expiry of the record replayed or written.
func Run[T any](ctx context.Context, t *Transport, in Input, fn func(context.Context) (T, error), extra ...guard.CallOption) (v T, out guard.Outcome, st *CallState, err error) {
	gctx, st := withCallState(ctx)
	call := t.call
	if len(extra) > 0 {
		call = append(append(make([]guard.CallOption, 0, len(call)+len(extra)), call...), extra...)
	}
	v, out, err = adapt.Execute(gctx, t.g, t.Scope, in, fn, call...)
	observe(ctx, Outcome(out, err))
	if !errors.Is(err, guard.ErrStore) {
		t.health.ok()
	}
	return v, out, st, err
}

// Unguarded runs fn as an unguarded call in the transport's scope, as
// guard.Do runs a call whose key selection is empty: for a disabled guard
// (IDEMGUARD_DISABLED) and for a request without a key that may go without
// one (WithKeyOptional). fn runs inside a call, as the function of any
// call does, so that guard.Step in it runs its function unguarded instead
// of failing with adapt.ErrNotInCall. What fn returns is returned as it
// is. An enabled guard counts the call and warns, at most once a minute
// per scope, that calls run unguarded; the server span of ctx gets the
// outcome the guard's span has (unguarded, or error when fn fails).
func Unguarded[T any](ctx context.Context, t *Transport, fn func(context.Context) (T, error)) (T, error) {
	// Do fails only on an empty scope, which New refuses, or with fn's
	// error.
	v, err := guard.Do(ctx, t.g, t.Scope, nil, fn, guard.WithRequireKey(false))
	if !t.g.Disabled() {
		observe(ctx, Outcome(guard.OutcomeUnguarded, err))
	}
	return v, err
}

// Refuse names the answer to a request whose guarded call failed before
// its handler ran, with the Retry-After, in seconds, of an answer that
// asks the client to come back (0 otherwise). It logs what an operator
// must know: a store failure (see storeFailed), and an error it cannot
// name (Internal), each with attrs.
func (t *Transport) Refuse(ctx context.Context, err error, attrs ...slog.Attr) (Refusal, int) {
	var busy *adapt.InProgressError
	switch {
	case errors.As(err, &busy):
		return InProgress, RetryAfter(busy.LeaseExpiresAt, t.g.ClockSkew(), t.g.Now())
	case errors.Is(err, guard.ErrPayloadMismatch):
		return KeyReused, 0
	case errors.Is(err, guard.ErrResultUnavailable):
		return ResponseUnavailable, 0
	case errors.Is(err, guard.ErrStore):
		t.storeFailed(ctx, err, attrs)
		return StoreUnavailable, 1
	case errors.Is(err, guard.ErrInvalidInput):
		return RequestUnkeyable, 0
	case ctx.Err() != nil:
		return Canceled, 1
	}
	t.Logger.LogAttrs(ctx, slog.LevelError, t.Pkg+": guarded request failed", append(attrs, slog.Any("error", err))...)
	return Internal, 0
}

// NotRecorded logs a response sent although its outcome was not recorded
// (the store failed until the lease ran out, or another caller took the
// key over): a retry with the same key may run the handler again.
func (t *Transport) NotRecorded(ctx context.Context, err error, attrs ...slog.Attr) {
	t.Logger.LogAttrs(ctx, slog.LevelError, t.Pkg+": the response was sent but not recorded; a retry with the same key may run the handler again",
		append(attrs, slog.Any("error", err))...)
}

// storeFailed logs a request refused because the store failed before its
// handler ran, with the cause, at level Warn; the first such failure after
// a success (or since the transport started) is logged at level Error
// with a message that says what it means, so that a store that cannot be
// reached says so clearly once, and every refusal still has its cause.
func (t *Transport) storeFailed(ctx context.Context, err error, attrs []slog.Attr) {
	attrs = append(attrs, slog.Any("error", err))
	if t.health.fail() {
		t.Logger.LogAttrs(ctx, slog.LevelError, t.Pkg+": the idempotency store failed; guarded requests are refused with "+t.Unavailable+" until it answers", attrs...)
		return
	}
	t.Logger.LogAttrs(ctx, slog.LevelWarn, t.Pkg+": request refused with "+t.Unavailable+": the idempotency store failed", attrs...)
}

// health tracks whether the store answered the transport's last request,
// so that storeFailed can tell the first failure from the ones that
// follow. The zero health is ready to use and safe for concurrent use.
type health struct{ failing atomic.Bool }

// ok records a request the store answered.
func (h *health) ok() {
	if h.failing.Load() {
		h.failing.Store(false)
	}
}

// fail records a failure and reports whether it is the first since the
// last success.
func (h *health) fail() bool { return !h.failing.Swap(true) }

// observe puts outcome on the server span of ctx.
func observe(ctx context.Context, outcome string) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(telemetry.OutcomeKey.String(outcome))
	}
}

// Outcome names a guarded request's outcome as the idemguard.outcome
// attribute does (see package telemetry), for the transport's server span.
func Outcome(out guard.Outcome, err error) string {
	switch {
	case errors.Is(err, guard.ErrInProgress):
		return telemetry.OutcomeInProgress
	case errors.Is(err, guard.ErrPayloadMismatch):
		return telemetry.OutcomePayloadMismatch
	case err != nil && (out == 0 || errors.Is(err, guard.ErrNotRecorded) || errors.Is(err, guard.ErrLeaseLost)):
		return telemetry.OutcomeError
	case out == guard.OutcomeExecuted || out == guard.OutcomeReleased:
		return telemetry.OutcomeExecuted
	case out == guard.OutcomeReplayed || out == guard.OutcomeShared:
		return telemetry.OutcomeReplayed
	case out == guard.OutcomeUnguarded && err == nil:
		// As the guard labels its span: an unguarded call that fails is
		// an error.
		return telemetry.OutcomeUnguarded
	}
	return telemetry.OutcomeError
}

// CallState is what the outcome hook learns about one guarded request.
type CallState struct {
	// ExpiresAt is the expiry of the record replayed or just recorded, if
	// any.
	ExpiresAt time.Time
}

type callStateKey struct{}

// withCallState returns a context for adapt.Execute whose outcome hook
// (set by the call options) fills the returned state.
func withCallState(ctx context.Context) (context.Context, *CallState) {
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
// with the transport's call options: the key is the hash of K's canonical
// JSON, so two requests share a record only when all of the selection is
// the same; F, the request's fingerprint, is the payload validation.
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
