package transport

import (
	"fmt"
	"log/slog"
	"regexp"
	"time"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
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

// Config holds what the options both transports have set. Each option
// is implemented once, below; each package's option of the same name is
// a one-line forwarder to it, and the package documents what the option
// means on its wire. The first invalid value is kept in Err.
type Config struct {
	Pkg string // "httpguard" or "grpcguard", for messages
	// Unavailable is the answer to a request refused while the store
	// fails ("503", "Unavailable"), for the logs.
	Unavailable string
	Rules       Rules
	// Methods are the methods guarded; nil guards every method.
	Methods     map[string]bool
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

// NewConfig returns the shared defaults for package pkg, whose keys are in
// scope, which answers unavailable while the store fails, and which guards
// methods (none: every method).
func NewConfig(pkg, scope, unavailable string, methods ...string) Config {
	c := Config{Pkg: pkg, Unavailable: unavailable, Rules: DefaultRules, Scope: scope, MaxResponse: DefaultMaxResponse}
	if len(methods) > 0 {
		c.Methods = make(map[string]bool, len(methods))
		for _, m := range methods {
			c.Methods[m] = true
		}
	}
	return c
}

// Option sets one of the shared options.
type Option func(*Config)

// Fail records an invalid option, unless one was recorded already.
func (c *Config) Fail(format string, args ...any) {
	if c.Err == nil {
		c.Err = fmt.Errorf(c.Pkg+": "+format, args...)
	}
}

// Set sets *dst to v if ok, and otherwise records the invalid option
// described by msg: the check of an option that must not be nil, empty or
// out of range.
func Set[T any](c *Config, dst *T, v T, ok bool, msg string, args ...any) {
	if !ok {
		c.Fail(msg, args...)
		return
	}
	*dst = v
}

// Guards reports whether the transport guards method.
func (c *Config) Guards(method string) bool { return c.Methods == nil || c.Methods[method] }

// GuardOptions adds the user's guard call options.
func GuardOptions(opts ...guard.CallOption) Option {
	return func(c *Config) { c.Guard = append(c.Guard, opts...) }
}

// Methods guards only methods, each as name returns it (an error refuses
// the option).
func Methods(name func(string) (string, error), methods ...string) Option {
	return func(c *Config) {
		if len(methods) == 0 {
			c.Fail("WithMethods needs at least one method")
			return
		}
		set := make(map[string]bool, len(methods))
		for _, m := range methods {
			n, err := name(m)
			if err != nil {
				c.Fail("%v", err)
				return
			}
			set[n] = true
		}
		c.Methods = set
	}
}

// KeyLength bounds keys' length; New checks the bounds.
func KeyLength(min, max int) Option {
	return func(c *Config) { c.Rules.MinLength, c.Rules.MaxLength = min, max }
}

// KeyPattern sets the format keys must match.
func KeyPattern(p *regexp.Regexp) Option { return func(c *Config) { c.Rules.Pattern = p } }

// StrictKey accepts only quoted keys.
func StrictKey() Option { return func(c *Config) { c.Rules.Strict = true } }

// KeyOptional runs requests without a key as unguarded calls.
func KeyOptional() Option { return func(c *Config) { c.KeyOptional = true } }

// SharedKeys stops scoping keys by the caller's credentials.
func SharedKeys() Option { return func(c *Config) { c.SharedKeys = true } }

// Scope sets the guard scope.
func Scope(scope string) Option {
	return func(c *Config) { Set(c, &c.Scope, scope, scope != "", "empty scope") }
}

// MaxResponseBytes bounds stored responses.
func MaxResponseBytes(n int) Option {
	return func(c *Config) {
		Set(c, &c.MaxResponse, n, n >= 0, "max response bytes must not be negative, got %d", n)
	}
}

// Logger sets the logger (nil: slog.Default()).
func Logger(l *slog.Logger) Option { return func(c *Config) { c.Logger = l } }

// callOptions checks the configuration and returns the guard call options
// of every guarded request, in the order that makes each win where it
// should:
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
func (c *Config) callOptions(g *guard.Guard, fingerprint bool, own []guard.CallOption) ([]guard.CallOption, time.Duration, error) {
	if g == nil {
		return nil, 0, fmt.Errorf("%s: nil guard", c.Pkg)
	}
	if c.Err != nil {
		return nil, 0, c.Err
	}
	if err := c.Rules.Check(); err != nil {
		return nil, 0, fmt.Errorf("%s: %w", c.Pkg, err)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if err := g.CheckScope(c.Scope); err != nil {
		return nil, 0, fmt.Errorf("%s: WithScope: %w", c.Pkg, err)
	}
	if len(c.Guard) > 0 {
		if _, err := guard.New(g.Store(), toOptions(c.Guard)...); err != nil {
			return nil, 0, fmt.Errorf("%s: WithGuardOptions: %w", c.Pkg, err)
		}
	}
	// What the transport needs of its calls is fixed: the same option
	// given through WithGuardOptions is reported, not ignored.
	fixed := []guard.CallOption{guard.WithKeyPath(keyPath), guard.WithRequireKey(true), guard.WithOutcomeHook(recorded)}
	if fingerprint {
		fixed = append(fixed, guard.WithPayloadValidation(fingerprintPath))
	}
	call := make([]guard.CallOption, 0, 2+len(c.Guard))
	call = append(call, adapt.WithDefaults(guard.WithTTL(DefaultTTL), guard.WithWait(DefaultWait)))
	call = append(call, c.Guard...)
	call = append(call, adapt.Fixed(append(fixed, own...)...))
	s, err := adapt.Settings(g, call...)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", c.Pkg, err)
	}
	return call, s.TTL, nil
}

func toOptions(opts []guard.CallOption) []guard.Option {
	out := make([]guard.Option, len(opts))
	for i, o := range opts {
		out[i] = adapt.Lift(o)
	}
	return out
}
