package httpguard

import (
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/transport"
)

// The headers' names, the IETF httpapi draft's and the ASP.NET idempotency
// middleware's, and the base of the problems' types.
const (
	defaultKeyHeader     = "Idempotency-Key"
	defaultStatusHeader  = "Idempotency-Key-Status"
	defaultExpiresHeader = "Idempotency-Key-Expires"
	expirySecondsHeader  = "Idempotency-Expiry-Seconds"
	defaultProblemBase   = "https://github.com/idemguard/idemguard/blob/main/docs/http.md#"
)

// Values of the status header.
const (
	statusExecuted = "executed" // the handler ran, and its response is stored for replays
	statusReplayed = "replayed" // the response is an earlier request's, replayed
	statusReleased = "released" // the handler ran, but its response was not stored: a retry runs again
)

// defaultMaxBody bounds the body the middleware reads by default.
const defaultMaxBody = 1 << 20

// Option configures the middleware.
type Option interface{ apply(*config) }

// optionFunc is an Option that is a function.
type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	transport.Config
	skip          func(*http.Request) bool
	keyHeader     string
	route         func(*http.Request) string
	principal     func(*http.Request) string
	fingerprint   func(*http.Request, []byte) string
	maxRequestTTL time.Duration // 0: the request header is ignored
	policy        func(status int) bool
	setCookie     bool
	maxBody       int64
	statusHeader  string
	expiresHeader string
	problemBase   string
}

func defaults() config {
	return config{
		Config:        transport.NewConfig("httpguard", transport.HTTPScope, "503", http.MethodPost, http.MethodPatch),
		keyHeader:     defaultKeyHeader,
		fingerprint:   DefaultFingerprint,
		policy:        successful,
		maxBody:       defaultMaxBody,
		statusHeader:  defaultStatusHeader,
		expiresHeader: defaultExpiresHeader,
		problemBase:   defaultProblemBase,
	}
}

// shared adapts an option the middleware shares with the gRPC interceptor.
func shared(o transport.Option) Option { return optionFunc(func(c *config) { o(&c.Config) }) }

// successful is the default status policy: 2xx and 3xx.
func successful(status int) bool { return status < 400 }

// retryLater are the statuses never stored, whatever the policy: they ask
// the client to come back later, and a stored one would be replayed, with
// its stale Retry-After, for the record's whole life.
func retryLater(status int) bool {
	return status == http.StatusRequestTimeout || status == http.StatusTooEarly || status == http.StatusTooManyRequests
}

// stores reports whether a response with status is stored.
func (c *config) stores(status int) bool { return !retryLater(status) && c.policy(status) }

// WithGuardOptions passes guard call options to every guarded request,
// such as guard.WithTTL (default 24 hours), guard.WithWait (default: wait
// up to 30 s for an in-flight duplicate), guard.WithWait(0) (answer a
// duplicate 409 at once), guard.WithLease or adapt.WithWaitBackoff. They
// win over the defaults given to guard.New, which win over the
// middleware's own. The middleware sets the key (path and requirement),
// the payload validation (see [WithFingerprint]), the codec, the definite
// errors (a response [WithStatusPolicy] does not store is an error that
// releases the key) and the outcome hook of its calls itself: those set
// on the guard give way, and those given here are refused
// (guard.ErrInvalidOption), as are guard.WithKey and adapt.WithClaimToken,
// which name one call.
func WithGuardOptions(opts ...guard.CallOption) Option {
	return shared(transport.GuardOptions(opts...))
}

// WithMethods sets the request methods the middleware guards (default POST
// and PATCH). Requests with other methods pass through untouched.
func WithMethods(methods ...string) Option { return shared(transport.Methods(upper, methods...)) }

// upper names an HTTP method as requests carry it.
func upper(method string) (string, error) { return strings.ToUpper(method), nil }

// WithSkip sets a predicate for requests the middleware passes through
// although their method is guarded (like Fiber's Next): a WebSocket
// upgrade, a health check.
func WithSkip(skip func(*http.Request) bool) Option {
	return optionFunc(func(c *config) { c.skip = skip })
}

// WithKeyHeader sets the request header that carries the key (default
// Idempotency-Key, as the IETF httpapi draft names it), for APIs that use X-Idempotency-Key or a name of
// their own.
func WithKeyHeader(name string) Option {
	return optionFunc(func(c *config) {
		transport.Set(&c.Config, &c.keyHeader, http.CanonicalHeaderKey(name), name != "", "empty key header name")
	})
}

// WithKeyLength bounds a key's length in bytes (default 1 to 256, the
// ASP.NET middleware's limit). Keys outside the bounds get 400.
func WithKeyLength(min, max int) Option { return shared(transport.KeyLength(min, max)) }

// WithKeyPattern makes keys that pattern does not match get 400. Anchor
// the pattern (^…$) to constrain the whole key, for example to UUIDs.
func WithKeyPattern(pattern *regexp.Regexp) Option { return shared(transport.KeyPattern(pattern)) }

// WithStrictKey accepts only the form the IETF draft prescribes, an RFC
// 8941 structured-field string in double quotes. By default a bare value
// (Idempotency-Key: 8e03978e-…, as Stripe's clients send it) is accepted
// too and means the same key as its quoted form.
func WithStrictKey() Option { return shared(transport.StrictKey()) }

// WithKeyOptional lets a request without a key through to the handler,
// unguarded, instead of answering 400: the handler runs as an unguarded
// call (as guard.Do runs one whose key selection is empty), so that
// guard.Step in it runs its function unguarded, and the guard counts it
// (outcome unguarded) and warns, at most once a minute, that requests run
// unguarded. A key that is present is still validated.
func WithKeyOptional() Option { return shared(transport.KeyOptional()) }

// WithRoute sets how a request's route is named in its key, for routers
// other than http.ServeMux: chi's RouteContext(r.Context()).RoutePattern(),
// gorilla's CurrentRoute(r).GetPathTemplate(), echo's c.Path(). The
// default is r.Pattern when the request was routed by a Go 1.22+ ServeMux
// before the middleware ran, the pattern the ServeMux would route it to when
// the middleware wraps the ServeMux itself, and else the URL path.
func WithRoute(route func(*http.Request) string) Option {
	return optionFunc(func(c *config) { transport.Set(&c.Config, &c.route, route, route != nil, "nil route function") })
}

// WithPrincipal sets how the authenticated caller of a request is named
// (a tenant, account or API-key ID, read from what the authentication
// middleware put in the request's context), and puts it in every key, so
// that the same Idempotency-Key sent by two callers names two records: one
// caller can never be replayed another's response, nor block or probe
// another's key. A request for which principal returns "" is refused with
// 403; install the authentication middleware before this one. Without
// this option, keys are scoped by the request's Authorization header (see
// [WithSharedKeys]).
func WithPrincipal(principal func(*http.Request) string) Option {
	return optionFunc(func(c *config) {
		transport.Set(&c.Config, &c.principal, principal, principal != nil, "nil principal function")
	})
}

// WithSharedKeys stops scoping keys by the caller's credentials, for
// public endpoints whose callers send none. By default, without
// [WithPrincipal], the SHA-256 of the request's Authorization header is
// part of every key, so that two callers with different credentials never
// share a record: the same key sent with another Authorization is another
// request. APIs that authenticate callers otherwise (a cookie, a client
// certificate, an API-key header) should name them with WithPrincipal.
func WithSharedKeys() Option { return shared(transport.SharedKeys()) }

// WithFingerprint sets how a request is fingerprinted (default
// [DefaultFingerprint]): a request whose key has a record written for
// another fingerprint gets 422, never the other request's response. body
// is the whole request body (see [WithMaxBodyBytes]). nil turns the
// fingerprint off, so that a key reused with another body replays the
// first response; the IETF draft makes the fingerprint optional, but
// without it a client's bug goes unnoticed.
func WithFingerprint(fingerprint func(r *http.Request, body []byte) string) Option {
	return optionFunc(func(c *config) { c.fingerprint = fingerprint })
}

// WithScope sets the guard scope of the middleware's keys (default
// "http"). The scope names the keys in the store and labels the guard's
// metrics; give each API sharing a store its own.
func WithScope(scope string) Option { return shared(transport.Scope(scope)) }

// WithRequestTTL lets clients set a request's record life with the
// Idempotency-Expiry-Seconds request header, a positive whole number of
// seconds; values above max are cut to max, and a malformed value gets
// 400. Without this option the header is ignored.
func WithRequestTTL(max time.Duration) Option {
	return optionFunc(func(c *config) {
		transport.Set(&c.Config, &c.maxRequestTTL, max, max >= time.Second, "the most a request may ask for must be at least a second, got %v", max)
	})
}

// WithStatusPolicy sets which responses are stored, by status code
// (default: 2xx and 3xx). A response that is not stored is served, and the
// key is released, so that the client's retry runs the handler again. 408,
// 425 and 429 are never stored, whatever the policy: they ask the client
// to come back later.
func WithStatusPolicy(store func(status int) bool) Option {
	return optionFunc(func(c *config) { transport.Set(&c.Config, &c.policy, store, store != nil, "nil status policy") })
}

// WithCacheErrors stores 4xx and 5xx responses too (but 408, 425 and
// 429), as the ASP.NET middleware's CacheErrorResponses does and as
// Stripe stores 500s: a client that retries a failed request gets the
// same failure instead of another attempt, until the key expires.
func WithCacheErrors() Option { return WithStatusPolicy(func(int) bool { return true }) }

// WithSetCookieReplay stores and replays Set-Cookie response headers.
// They are left out by default: a cookie is usually a session meant for
// the one response that set it.
func WithSetCookieReplay() Option { return optionFunc(func(c *config) { c.setCookie = true }) }

// WithMaxBodyBytes bounds the request body the middleware reads to
// fingerprint it (default 1 MiB). A larger body gets 413 before the
// handler runs and before any record is written.
func WithMaxBodyBytes(n int64) Option {
	return optionFunc(func(c *config) {
		transport.Set(&c.Config, &c.maxBody, n, n >= 0, "max body bytes must not be negative, got %d", n)
	})
}

// WithMaxResponseBytes bounds the response body stored for replays
// (default 256 KiB, which fits in a DynamoDB item even when it does not
// compress). A larger response is served in full, streamed to the client
// once it passes the bound, and recorded without its body, so the handler
// never runs twice for its key; a replay then gets 410 Gone (see
// docs/http.md, "response-unavailable").
func WithMaxResponseBytes(n int) Option { return shared(transport.MaxResponseBytes(n)) }

// WithStatusHeader renames the response header that says whether a
// response ran fresh ("executed"), is a stored one ("replayed"), or was
// not kept ("released"): default Idempotency-Key-Status. "" leaves it out.
func WithStatusHeader(name string) Option {
	return optionFunc(func(c *config) { c.statusHeader = http.CanonicalHeaderKey(name) })
}

// WithExpiresHeader renames the response header that says until when a
// stored response is replayed, an HTTP-date (default
// Idempotency-Key-Expires); "" leaves it out.
func WithExpiresHeader(name string) Option {
	return optionFunc(func(c *config) { c.expiresHeader = http.CanonicalHeaderKey(name) })
}

// WithProblemBase sets the URI prefix of the problems' "type" members
// (default the section of docs/http.md that describes each problem:
// https://github.com/idemguard/idemguard/blob/main/docs/http.md#), for APIs that document the problems on
// pages of their own: the type is the prefix followed by the problem's
// name, such as "key-missing".
func WithProblemBase(base string) Option {
	return optionFunc(func(c *config) { c.problemBase = base })
}

// WithLogger sets where the middleware logs what an operator must know: a
// request refused because the store failed (with the cause), a response
// served but not recorded (a store failure after the handler ran). The
// default is slog.Default().
func WithLogger(l *slog.Logger) Option { return shared(transport.Logger(l)) }
