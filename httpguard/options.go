package httpguard

import (
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/idemguard/idemguard/internal/idemkey"
)

// Defaults used when an option is not given.
const (
	// DefaultKeyHeader is the request header that carries the key, as the
	// IETF httpapi draft names it.
	DefaultKeyHeader = "Idempotency-Key"
	// DefaultStatusHeader is the response header that says whether the
	// response ran fresh ("executed"), is a stored one ("replayed"), or was
	// not kept ("released").
	DefaultStatusHeader = "Idempotency-Key-Status"
	// DefaultExpiresHeader is the response header that says until when a
	// stored response is replayed (an HTTP-date).
	DefaultExpiresHeader = "Idempotency-Key-Expires"
	// ExpirySecondsHeader is the request header a client may set to ask
	// for a shorter or longer record life, in seconds, when
	// [WithRequestTTL] allows it.
	ExpirySecondsHeader = "Idempotency-Expiry-Seconds"
	// DefaultScope is the guard scope of the middleware's keys.
	DefaultScope = "http"
	// DefaultTTL is how long a stored response is replayed: Stripe keeps
	// keys for at least 24 hours.
	DefaultTTL = 24 * time.Hour
	// DefaultMaxBodyBytes bounds the request body read to fingerprint it.
	DefaultMaxBodyBytes = 1 << 20
	// DefaultMaxResponseBytes bounds the response body stored for replays.
	// 256 KiB fits in a DynamoDB item (400 KB) even when it does not
	// compress.
	DefaultMaxResponseBytes = 256 << 10
	// DefaultProblemBase is prefixed to each problem's name to make its
	// RFC 9457 "type": the section of docs/http.md that describes it.
	DefaultProblemBase = "https://github.com/idemguard/idemguard/blob/main/docs/http.md#"
)

// Values of the status header.
const (
	StatusExecuted = "executed" // the handler ran, and its response is stored for replays
	StatusReplayed = "replayed" // the response is an earlier request's, replayed
	StatusReleased = "released" // the handler ran, but its response was not stored: a retry runs again
)

// Option configures the middleware.
type Option func(*config)

// StatusPolicy decides from a response's status code whether the response
// is stored and replayed (true) or the key is released so that the
// client's retry runs the handler again (false).
type StatusPolicy func(status int) bool

// StoreBelow500 stores every response but 5xx: the default. A 4xx is the
// answer to the request as sent (the IETF draft: a completed duplicate
// gets the original result, success or error); a 5xx says the server
// failed, and the client's retry deserves another attempt.
func StoreBelow500(status int) bool { return status < 500 }

// StoreAll stores every response, 5xx included, as Stripe does.
func StoreAll(int) bool { return true }

type config struct {
	idemkey.Settings
	methods       map[string]bool
	skip          func(*http.Request) bool
	keyHeader     string
	route         func(*http.Request) string
	principal     func(*http.Request) string
	fingerprint   func(*http.Request, []byte) string
	maxRequestTTL time.Duration // 0: the request header is ignored
	policy        StatusPolicy
	setCookie     bool
	maxBody       int64
	statusHeader  string
	expiresHeader string
	problemBase   string
}

func defaults() config {
	return config{
		Settings:      idemkey.NewSettings("httpguard", DefaultScope, DefaultTTL, DefaultMaxResponseBytes),
		methods:       map[string]bool{http.MethodPost: true, http.MethodPatch: true},
		keyHeader:     DefaultKeyHeader,
		fingerprint:   DefaultFingerprint,
		policy:        StoreBelow500,
		maxBody:       DefaultMaxBodyBytes,
		statusHeader:  DefaultStatusHeader,
		expiresHeader: DefaultExpiresHeader,
		problemBase:   DefaultProblemBase,
	}
}

// WithMethods sets the request methods the middleware guards (default POST
// and PATCH). Requests with other methods pass through untouched.
func WithMethods(methods ...string) Option {
	return func(c *config) {
		if len(methods) == 0 {
			c.Fail("WithMethods needs at least one method")
			return
		}
		c.methods = make(map[string]bool, len(methods))
		for _, m := range methods {
			c.methods[strings.ToUpper(m)] = true
		}
	}
}

// WithSkip sets a predicate for requests the middleware passes through
// although their method is guarded (like Fiber's Next): a WebSocket
// upgrade, a health check.
func WithSkip(skip func(*http.Request) bool) Option {
	return func(c *config) { c.skip = skip }
}

// WithKeyHeader sets the request header that carries the key (default
// [DefaultKeyHeader]), for APIs that use X-Idempotency-Key or a name of
// their own.
func WithKeyHeader(name string) Option {
	return func(c *config) {
		if name == "" {
			c.Fail("empty key header name")
			return
		}
		c.keyHeader = http.CanonicalHeaderKey(name)
	}
}

// WithKeyLength bounds a key's length in bytes (default 1 to 255, Stripe's
// limit). Keys outside the bounds get 400.
func WithKeyLength(min, max int) Option {
	return func(c *config) { c.SetKeyLength(min, max) }
}

// WithKeyPattern makes keys that pattern does not match get 400. Anchor
// the pattern (^…$) to constrain the whole key, for example to UUIDs.
func WithKeyPattern(pattern *regexp.Regexp) Option {
	return func(c *config) { c.SetKeyPattern(pattern) }
}

// WithStrictKey accepts only the form the IETF draft prescribes, an RFC
// 8941 structured-field string in double quotes. By default a bare value
// (Idempotency-Key: 8e03978e-…, as Stripe's clients send it) is accepted
// too and means the same key as its quoted form.
func WithStrictKey() Option {
	return func(c *config) { c.Rules.Strict = true }
}

// WithKeyOptional lets a request without a key through to the handler,
// unguarded, instead of answering 400. A key that is present is still
// validated.
func WithKeyOptional() Option {
	return func(c *config) { c.KeyOptional = true }
}

// WithRoute sets how a request's route is named in its key, for routers
// other than http.ServeMux: chi's RouteContext(r.Context()).RoutePattern(),
// gorilla's CurrentRoute(r).GetPathTemplate(), echo's c.Path(). The
// default is r.Pattern when the request was routed by a Go 1.22+ ServeMux
// before the middleware ran, the pattern the ServeMux would route it to when
// the middleware wraps the ServeMux itself, and else the URL path.
func WithRoute(route func(*http.Request) string) Option {
	return func(c *config) {
		if route == nil {
			c.Fail("nil route function")
			return
		}
		c.route = route
	}
}

// WithPrincipal sets how the authenticated caller of a request is named
// (a tenant, account or API-key ID, read from what the authentication
// middleware put in the request's context), and puts it in every key, so
// that the same Idempotency-Key sent by two callers names two records: one
// caller can never be replayed another's response, nor block or probe
// another's key. A request for which principal returns "" is refused with
// 403; install the authentication middleware before this one.
func WithPrincipal(principal func(*http.Request) string) Option {
	return func(c *config) {
		if principal == nil {
			c.Fail("nil principal function")
			return
		}
		c.principal = principal
	}
}

// WithFingerprint sets how a request is fingerprinted (default
// [DefaultFingerprint]): a request whose key has a record written for
// another fingerprint gets 422, never the other request's response. body
// is the whole request body (see [WithMaxBodyBytes]). nil turns the
// fingerprint off, so that a key reused with another body replays the
// first response; the IETF draft makes the fingerprint optional, but
// without it a client's bug goes unnoticed.
func WithFingerprint(fingerprint func(r *http.Request, body []byte) string) Option {
	return func(c *config) { c.fingerprint = fingerprint }
}

// WithScope sets the guard scope of the middleware's keys (default
// [DefaultScope]). The scope names the keys in the store and labels the
// guard's metrics; give each API sharing a store its own.
func WithScope(scope string) Option {
	return func(c *config) { c.SetScope(scope) }
}

// WithTTL sets how long a stored response is replayed (default
// [DefaultTTL]); after it the key runs afresh. It applies instead of the
// guard's default TTL.
func WithTTL(ttl time.Duration) Option {
	return func(c *config) { c.SetTTL(ttl) }
}

// WithRequestTTL lets clients set a request's record life with the
// [ExpirySecondsHeader] request header, a positive whole number of
// seconds; values above max are cut to max, and a malformed value gets
// 400. Without this option the header is ignored.
func WithRequestTTL(max time.Duration) Option {
	return func(c *config) {
		if max < time.Second {
			c.Fail("the most a request may ask for must be at least a second, got %v", max)
			return
		}
		c.maxRequestTTL = max
	}
}

// WithLease sets the in-progress lease of a request's claim (default: the
// guard's; see guard.WithLease). The guard extends the lease while the
// handler runs, so the lease is not a time limit on the handler: it is how
// long a key stays blocked after a server dies mid-request, and so the
// Retry-After a duplicate gets in reject mode. A few seconds suits most
// APIs.
func WithLease(lease time.Duration) Option {
	return func(c *config) { c.SetLease(lease) }
}

// WithWait makes a duplicate that arrives while the first request runs
// wait up to budget for the first one's response and answer with it,
// instead of getting 409 at once (the default, reject mode). A duplicate
// still waiting when the budget ends gets 409.
func WithWait(budget time.Duration) Option {
	return func(c *config) { c.SetWait(budget) }
}

// WithStatusPolicy sets which responses are stored, by status code
// (default [StoreBelow500]). A response the policy refuses is served and
// the key released, so the client's retry runs the handler again.
func WithStatusPolicy(policy StatusPolicy) Option {
	return func(c *config) {
		if policy == nil {
			c.Fail("nil status policy")
			return
		}
		c.policy = policy
	}
}

// WithCacheErrorResponses stores 5xx responses too ([StoreAll]), like the
// CacheErrorResponses switch of ASP.NET idempotency middleware and like
// Stripe's API: a retry then gets the same 500 instead of another attempt.
func WithCacheErrorResponses() Option {
	return WithStatusPolicy(StoreAll)
}

// WithSetCookieReplay stores and replays Set-Cookie response headers.
// They are left out by default: a cookie is usually a session meant for
// the one response that set it.
func WithSetCookieReplay() Option {
	return func(c *config) { c.setCookie = true }
}

// WithMaxBodyBytes bounds the request body the middleware reads to
// fingerprint it (default [DefaultMaxBodyBytes]). A larger body gets 413
// before the handler runs and before any record is written.
func WithMaxBodyBytes(n int64) Option {
	return func(c *config) {
		if n < 0 {
			c.Fail("max body bytes must not be negative, got %d", n)
			return
		}
		c.maxBody = n
	}
}

// WithMaxResponseBytes bounds the response body stored for replays
// (default [DefaultMaxResponseBytes]). A larger response is served in
// full, streamed to the client once it passes the bound, and recorded
// without its body, so the handler never runs twice for its key; a replay
// then gets 410 Gone (see docs/http.md, "response-unavailable").
func WithMaxResponseBytes(n int) Option {
	return func(c *config) { c.SetMaxResponse(n) }
}

// WithStatusHeader renames the response header that says whether a
// response is fresh or replayed (default [DefaultStatusHeader]); "" leaves
// it out.
func WithStatusHeader(name string) Option {
	return func(c *config) { c.statusHeader = http.CanonicalHeaderKey(name) }
}

// WithExpiresHeader renames the response header that says until when a
// stored response is replayed (default [DefaultExpiresHeader]); "" leaves
// it out.
func WithExpiresHeader(name string) Option {
	return func(c *config) { c.expiresHeader = http.CanonicalHeaderKey(name) }
}

// WithProblemBase sets the URI prefix of the problems' "type" members
// (default [DefaultProblemBase]), for APIs that document the problems on
// pages of their own: the type is the prefix followed by the problem's
// name, such as "key-missing".
func WithProblemBase(base string) Option {
	return func(c *config) { c.problemBase = base }
}

// WithLogger sets where the middleware logs what an operator must know: a
// response served but not recorded (a store failure after the handler
// ran). The default is slog.Default().
func WithLogger(l *slog.Logger) Option {
	return func(c *config) { c.Logger = l }
}
