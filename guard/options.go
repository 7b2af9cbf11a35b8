package guard

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemguard/idemguard/store"
)

// Defaults used when an option is not given.
const (
	// DefaultTTL is how long a completed record is replayed.
	DefaultTTL = time.Hour
	// DefaultLease is the in-progress lease when the context has no
	// deadline and [WithLease] is not given. The lease is extended while the
	// function runs, so it bounds only how long duplicates wait after a
	// crash.
	DefaultLease = time.Minute
	// MinLease is the shortest lease the guard takes, whatever the context
	// deadline says.
	MinLease = time.Second
	// DefaultWaitInitial and DefaultWaitMax bound the backoff between polls
	// in [Wait] mode.
	DefaultWaitInitial = 20 * time.Millisecond
	DefaultWaitMax     = time.Second
)

// Mode says what a call does when another call holds the key.
type Mode uint8

const (
	// Reject returns [ErrInProgress] at once. It is the default, as in AWS
	// Powertools; it suits callers that retry with backoff themselves, such
	// as Temporal activities.
	Reject Mode = iota
	// Wait polls the store with backoff and jitter until the other call
	// completes (and replays its result), fails or lapses (and runs the
	// function), or the wait budget ends ([ErrInProgress]).
	Wait
)

// String returns "reject" or "wait".
func (m Mode) String() string {
	if m == Wait {
		return "wait"
	}
	return "reject"
}

// Option configures a [Guard] (in [New]) or one guarded function (in [Do],
// [Execute] and [Wrap]), where it overrides the guard's setting.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// Codec encodes results for the store and decodes them on replay. It must be
// safe for concurrent use.
type Codec interface {
	Marshal(v any) ([]byte, error)
	Unmarshal(data []byte, v any) error
}

// JSON is the default [Codec]: encoding/json's format and semantics. For the
// common types (structs without embedded fields, maps, slices, numbers,
// strings, time.Time) it encodes and decodes in one reflective pass of its
// own; for anything else, and wherever its answer could differ, it calls
// encoding/json. Member order and escaping in the stored text may differ
// from json.Marshal's; the decoded values do not.
var JSON Codec = jsonCodec{}

type jsonCodec struct{}

func (jsonCodec) Marshal(v any) ([]byte, error)      { return encodeJSON(v) }
func (jsonCodec) Unmarshal(data []byte, v any) error { return decodeJSON(data, v) }

// ErrorCodec encodes definite errors (see [WithDefiniteErrors]) for the store
// and decodes them on replay. It must be safe for concurrent use.
type ErrorCodec interface {
	EncodeError(err error) ([]byte, error)
	DecodeError(data []byte) error
}

// MessageErrors is the default [ErrorCodec]: it stores the error's message as
// {"message": "..."} and replays a [*ReplayedError].
var MessageErrors ErrorCodec = messageErrors{}

type messageErrors struct{}

type storedMessage struct {
	Message string `json:"message"`
}

func (messageErrors) EncodeError(err error) ([]byte, error) {
	return json.Marshal(storedMessage{err.Error()})
}

func (messageErrors) DecodeError(data []byte) error {
	var m storedMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return err
	}
	return &ReplayedError{Message: m.Message}
}

// Clock is the guard's time source. It must be safe for concurrent use.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// AfterFunc calls f in its own goroutine once d has passed, unless stop
	// is called first; stop reports whether it prevented the call.
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }
func (systemClock) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}

// ReplayHook is called when a call returns a stored outcome instead of
// running the function: from the store, the local cache, or a concurrent
// call in this process (shared). It runs on the caller's goroutine before
// the call returns.
type ReplayHook func(ctx context.Context, key string, rec *store.Record, outcome Outcome)

type config struct {
	keyPath        *expression // nil: the whole input
	validationPath *expression // nil: no payload validation
	explicitKey    any         // used instead of the input when hasKey
	hasKey         bool
	requireKey     bool
	ttl            time.Duration
	lease          time.Duration // 0: from the context deadline, else DefaultLease
	mode           Mode
	waitBudget     time.Duration
	waitInitial    time.Duration
	waitMax        time.Duration
	cacheSize      int
	codec          Codec
	errorCodec     ErrorCodec
	isDefinite     func(error) bool
	keepResult     func(any) bool
	clock          Clock
	leases         *leaseTimer // the guard's, on clock; nil for a per-call clock
	onReplay       ReplayHook
	claimToken     string               // fixed fencing token, for re-entrant claims
	rawKeyAttr     bool                 // record the key selection on spans
	spanAttrs      []attribute.KeyValue // added to the execute span
	tracerProvider trace.TracerProvider // guard-wide
	meterProvider  metric.MeterProvider // guard-wide
	logger         *slog.Logger         // guard-wide
	err            error                // the first invalid option
}

func defaultConfig() config {
	return config{
		ttl:         DefaultTTL,
		waitBudget:  30 * time.Second,
		waitInitial: DefaultWaitInitial,
		waitMax:     DefaultWaitMax,
		codec:       JSON,
		errorCodec:  MessageErrors,
		isDefinite:  IsDefinite,
		clock:       systemClock{},
	}
}

func (c *config) fail(err error) {
	if c.err == nil {
		c.err = err
	}
}

// WithKeyPath selects the part of the input the key is derived from, with a
// JMESPath expression over the input's JSON form (for example
// "order.id" or "powertools_json(body).order_id"). Without it the key is
// derived from the whole input.
//
// Numbers are canonicalised as IEEE-754 doubles, as RFC 8785 requires, so
// integers beyond ±2^53 lose precision and neighbouring ones share a key:
// select large IDs (snowflake IDs, for example) as strings. An expression that does not compile is
// reported by [New], [Wrap] or [Do] as an [*ExpressionError].
func WithKeyPath(expr string) Option {
	e, err := compile(expr)
	return optionFunc(func(c *config) {
		if err != nil {
			c.fail(err)
			return
		}
		c.keyPath = e
	})
}

// WithPayloadValidation stores a hash of the part of the input that expr
// selects with the record, and fails a later call with the same key whose
// selection hashes differently with [ErrPayloadMismatch]. Use "@" to
// validate the whole input.
func WithPayloadValidation(expr string) Option {
	e, err := compile(expr)
	return optionFunc(func(c *config) {
		if err != nil {
			c.fail(err)
			return
		}
		c.validationPath = e
	})
}

// WithKey derives the key from selection instead of from the input (the key
// path is not applied to it); payload validation still reads the input. It is
// meant for one call, for example a key a caller was handed explicitly.
func WithKey(selection any) Option {
	return optionFunc(func(c *config) { c.explicitKey, c.hasKey = selection, true })
}

// WithRequireKey makes a null or empty key selection an error
// ([ErrKeyMissing]) instead of running the function unguarded.
func WithRequireKey(require bool) Option {
	return optionFunc(func(c *config) { c.requireKey = require })
}

// WithTTL sets how long a completed record is replayed (default
// [DefaultTTL]).
func WithTTL(ttl time.Duration) Option {
	return optionFunc(func(c *config) {
		if ttl <= 0 {
			c.fail(invalidOption("TTL must be positive, got %v", ttl))
			return
		}
		c.ttl = ttl
	})
}

// WithLease sets the in-progress lease: how long a claim holds without being
// extended. By default it is the time left until the context's deadline
// (for a Temporal activity, the activity's deadline), or [DefaultLease]
// without one, and never less than [MinLease]. While the function runs the
// guard extends the lease before it lapses; if the lease is lost to another
// caller anyway, the function's context is cancelled with cause
// [ErrLeaseLost].
func WithLease(lease time.Duration) Option {
	return optionFunc(func(c *config) {
		if lease < 0 {
			c.fail(invalidOption("lease must not be negative, got %v", lease))
			return
		}
		c.lease = lease
	})
}

// WithReject selects [Reject] mode (the default).
func WithReject() Option {
	return optionFunc(func(c *config) { c.mode = Reject })
}

// WithWait selects [Wait] mode with a wait budget: a call that finds the key
// in progress polls for up to budget before it returns [ErrInProgress].
func WithWait(budget time.Duration) Option {
	return optionFunc(func(c *config) {
		if budget <= 0 {
			c.fail(invalidOption("wait budget must be positive, got %v", budget))
			return
		}
		c.mode, c.waitBudget = Wait, budget
	})
}

// WithWaitBackoff sets the first and the longest pause between polls in
// [Wait] mode (defaults [DefaultWaitInitial], [DefaultWaitMax]). Pauses grow
// exponentially with jitter and never run past the holder's lease end.
func WithWaitBackoff(initial, max time.Duration) Option {
	return optionFunc(func(c *config) {
		if initial <= 0 || max < initial {
			c.fail(invalidOption("wait backoff needs 0 < initial <= max, got %v, %v", initial, max))
			return
		}
		c.waitInitial, c.waitMax = initial, max
	})
}

// WithCache keeps up to size completed records in a local LRU cache that
// answers replays with no store call. It applies to the whole guard and is
// ignored per call. Records are checked for expiry and payload on every hit.
func WithCache(size int) Option {
	return optionFunc(func(c *config) {
		if size < 0 {
			c.fail(invalidOption("cache size must not be negative, got %d", size))
			return
		}
		c.cacheSize = size
	})
}

// WithCodec sets the codec for results (default [JSON]).
func WithCodec(codec Codec) Option {
	return optionFunc(func(c *config) {
		if codec == nil {
			c.fail(invalidOption("nil codec"))
			return
		}
		c.codec = codec
	})
}

// WithDefiniteErrors sets the predicate that picks definite errors: errors
// that are stored and replayed to every later call, instead of releasing the
// record so that a retry runs the function again. The default is
// [IsDefinite]. Use [WithErrorCodec] to choose how they are stored.
func WithDefiniteErrors(isDefinite func(error) bool) Option {
	return optionFunc(func(c *config) {
		if isDefinite == nil {
			isDefinite = func(error) bool { return false }
		}
		c.isDefinite = isDefinite
	})
}

// WithErrorCodec sets how definite errors are stored and replayed (default
// [MessageErrors]).
func WithErrorCodec(ec ErrorCodec) Option {
	return optionFunc(func(c *config) {
		if ec == nil {
			c.fail(invalidOption("nil error codec"))
			return
		}
		c.errorCodec = ec
	})
}

// WithResultFilter sets a predicate over successful results: a result for
// which keep returns false is returned to this caller but not stored, and
// the record is released so the next call runs the function again (like
// idempotender's validResponseJmespath).
func WithResultFilter(keep func(result any) bool) Option {
	return optionFunc(func(c *config) { c.keepResult = keep })
}

// WithClock sets the time source (default: the system clock). Tests use a
// fake clock to move through leases and expiry without sleeping.
func WithClock(clock Clock) Option {
	return optionFunc(func(c *config) {
		if clock == nil {
			c.fail(invalidOption("nil clock"))
			return
		}
		c.clock = clock
		c.leases = nil // the guard's lease timer runs on its own clock
	})
}

// WithReplayHook sets a hook called whenever a call replays a stored outcome
// (like AWS Powertools' responseHook, but observing only).
func WithReplayHook(hook ReplayHook) Option {
	return optionFunc(func(c *config) { c.onReplay = hook })
}

// WithTracerProvider sets the OpenTelemetry tracer provider (default: the
// global one). It applies to the whole guard and is ignored per call.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(c *config) {
		if tp != nil {
			c.tracerProvider = tp
		}
	})
}

// WithMeterProvider sets the OpenTelemetry meter provider (default: the
// global one). It applies to the whole guard and is ignored per call.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) {
		if mp != nil {
			c.meterProvider = mp
		}
	})
}

// WithLogger sets the logger for guard events: lease lost, completion write
// retried, result not stored, key missing. The default writes warnings and
// errors to slog.Default(). It applies to the whole guard.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) {
		if l != nil {
			c.logger = l
		}
	})
}

// WithKeySelectionAttribute records the canonical JSON the key was derived
// from on the idemguard.execute span (idemguard.key.selection). It is off by
// default because the selection can carry user data; the key hash is always
// recorded.
func WithKeySelectionAttribute(on bool) Option {
	return optionFunc(func(c *config) { c.rawKeyAttr = on })
}

// WithSpanAttributes adds attributes to the call's idemguard.execute span,
// for example the Temporal workflow ID and activity type.
func WithSpanAttributes(attrs ...attribute.KeyValue) Option {
	return optionFunc(func(c *config) { c.spanAttrs = append(c.spanAttrs[:len(c.spanAttrs):len(c.spanAttrs)], attrs...) })
}

// WithClaimToken makes the call claim with token instead of a random fencing
// token, and treats an in-progress record that already carries token as its
// own claim, held again. It is for a claimant that may repeat its claim after
// losing the answer, such as a Temporal workflow whose claiming local
// activity ran but whose workflow task was lost: the workflow derives the
// token from its run, and the repeated claim finds itself instead of waiting
// for its own lease to lapse. The token must be unique to the claimant; two
// claimants sharing one would both hold the key.
func WithClaimToken(token string) Option {
	return optionFunc(func(c *config) { c.claimToken = token })
}
