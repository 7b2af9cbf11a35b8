package idemkey

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"time"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/store"
)

// Settings are the options the HTTP middleware and the gRPC interceptor
// share. Each package's Option functions set them through the methods
// below, which check the values; the first invalid one is kept in Err.
type Settings struct {
	Pkg         string // "httpguard" or "grpcguard", for messages
	Rules       Rules
	KeyOptional bool
	Scope       string
	TTL         time.Duration
	Lease       time.Duration // 0: the guard's
	Wait        time.Duration // 0: reject mode
	MaxResponse int
	Logger      *slog.Logger
	Err         error
}

// NewSettings returns the shared defaults for package pkg.
func NewSettings(pkg, scope string, ttl time.Duration, maxResponse int) Settings {
	return Settings{Pkg: pkg, Rules: DefaultRules, Scope: scope, TTL: ttl, MaxResponse: maxResponse}
}

// Fail records an invalid option, unless one was recorded already.
func (s *Settings) Fail(format string, args ...any) {
	if s.Err == nil {
		s.Err = fmt.Errorf(s.Pkg+": "+format, args...)
	}
}

// positive records an error unless d > 0.
func (s *Settings) positive(what string, d time.Duration) bool {
	if d <= 0 {
		s.Fail("%s must be positive, got %v", what, d)
		return false
	}
	return true
}

// SetKeyLength bounds keys' length; Finish checks the bounds.
func (s *Settings) SetKeyLength(min, max int) { s.Rules.MinLength, s.Rules.MaxLength = min, max }

// SetKeyPattern sets the format keys must match.
func (s *Settings) SetKeyPattern(p *regexp.Regexp) { s.Rules.Pattern = p }

// SetScope sets the guard scope.
func (s *Settings) SetScope(scope string) {
	if scope == "" {
		s.Fail("empty scope")
		return
	}
	s.Scope = scope
}

// SetTTL sets how long stored responses are replayed.
func (s *Settings) SetTTL(d time.Duration) {
	if s.positive("TTL", d) {
		s.TTL = d
	}
}

// SetLease sets the in-progress lease.
func (s *Settings) SetLease(d time.Duration) {
	if s.positive("lease", d) {
		s.Lease = d
	}
}

// SetWait selects wait mode with a budget.
func (s *Settings) SetWait(d time.Duration) {
	if s.positive("wait budget", d) {
		s.Wait = d
	}
}

// SetMaxResponse bounds stored responses.
func (s *Settings) SetMaxResponse(n int) {
	if n < 0 {
		s.Fail("max response bytes must not be negative, got %d", n)
		return
	}
	s.MaxResponse = n
}

// Finish checks the settings and returns the guard call options every
// guarded request gets: the key from the input's "k" member (required),
// the payload validation of its "f" member when fingerprint, the TTL, the
// mode, the lease, the replay hook that fills a [CallState], and extra.
// It checks them against g.
func (s *Settings) Finish(g *guard.Guard, fingerprint bool, extra ...guard.CallOption) ([]guard.CallOption, error) {
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
	call := []guard.CallOption{
		guard.WithKeyPath("k"),
		guard.WithRequireKey(true),
		guard.WithTTL(s.TTL),
		guard.WithOutcomeHook(replayed),
		guard.WithReject(),
	}
	if fingerprint {
		call = append(call, guard.WithPayloadValidation("f"))
	}
	if s.Lease > 0 {
		call = append(call, guard.WithLease(s.Lease))
	}
	if s.Wait > 0 {
		call = append(call, guard.WithWait(s.Wait))
	}
	call = append(call, extra...)
	if _, err := g.Settings(call...); err != nil {
		return nil, fmt.Errorf("%s: %w", s.Pkg, err)
	}
	return call, nil
}

// CallState is what the replay hook learns about one guarded request.
type CallState struct {
	// ExpiresAt is the expiry of the record replayed, if any.
	ExpiresAt time.Time
}

type callStateKey struct{}

// WithCallState returns a context for guard.Execute whose replay hook (set
// by [Settings.Finish]) fills the returned state.
func WithCallState(ctx context.Context) (context.Context, *CallState) {
	st := &CallState{}
	return context.WithValue(ctx, callStateKey{}, st), st
}

func replayed(ctx context.Context, _ string, rec *store.Record, _ guard.Outcome) {
	if st, ok := ctx.Value(callStateKey{}).(*CallState); ok && rec != nil {
		st.ExpiresAt = rec.ExpiresAt
	}
}

// Input is what the guard derives a request's key and fingerprint from,
// with the call options [Settings.Finish] returns: the key is the hash of
// K's canonical JSON, so two requests share a record only when the client's
// key, the method, the route and the principal are all the same; F, the
// request's fingerprint, is the payload validation.
type Input struct {
	K Selection `json:"k"`
	F string    `json:"f,omitempty"`
}

// Selection is the part of [Input] the key is derived from.
type Selection struct {
	Key       string `json:"key"`
	Method    string `json:"method"`          // HTTP method, or gRPC full method name
	Route     string `json:"route,omitempty"` // HTTP only
	Principal string `json:"principal,omitempty"`
}
