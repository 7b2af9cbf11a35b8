package guard

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
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
	// DefaultClockSkew is how far a claimant's clock may run ahead of a
	// holder's before the claimant could take over a live claim (see
	// [WithClockSkew]). Hosts synchronised by NTP or Amazon Time Sync agree
	// to within milliseconds; a second leaves a wide margin and costs a
	// second's more wait after a real crash.
	DefaultClockSkew = time.Second
	// DefaultWaitBudget is how long a call waits for another holder in
	// [Wait] mode when [WithWait] is given no budget of its own.
	DefaultWaitBudget = 30 * time.Second
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
	// Wait waits until the other call completes (and replays its result),
	// fails or lapses (and runs the function), or the wait budget ends
	// ([ErrInProgress]): told of the outcome by a store that pushes it
	// ([store.Watcher]), else polling the record ([WithWaitBackoff]). The
	// duplicates of a key in one process share one wait; a duplicate in
	// the same guard waits for the running call without a store call.
	Wait
)

// String returns "reject" or "wait".
func (m Mode) String() string {
	if m == Wait {
		return "wait"
	}
	return "reject"
}

// Option configures a [Guard] in [New]: [WithCache], [WithClock],
// [WithClockSkew], [WithKeySecret], [WithTracerProvider],
// [WithMeterProvider] and [WithLogger] apply to the whole guard, and a
// [CallOption] sets the default for its calls. Options have one type per
// scope, so that one passed where it has no effect does not compile.
type Option interface{ applyGuard(*settings) }

// CallOption configures guarded calls ([Do], [Execute], [Wrap], [DoTx],
// [Step], the claim API). Every CallOption is also an [Option], setting
// the default for every call of the guard, and a [BatchOption], applying
// to every item of a batch. [WithKey] and [WithClaimToken] name one call:
// [New] refuses them with [ErrInvalidOption], and [DoBatch] refuses WithKey.
type CallOption interface {
	Option
	BatchOption
	applyCall(*config)
}

// BatchOption configures a batch run by [DoBatch]: every [CallOption], and
// [WithConcurrency], [WithItemKey], [WithStopOnError], [WithResume] and
// [WithItemDone].
type BatchOption interface{ applyBatch(*batchConfig) }

// guardOption is an [Option] for the whole guard.
type guardOption func(*settings)

func (f guardOption) applyGuard(s *settings) { f(s) }

// callOption is a [CallOption] that sets the settings named by set.
type callOption struct {
	set setting
	f   func(*config)
}

func (o callOption) applyCall(c *config) {
	if c.fixed&o.set != 0 {
		c.fail(invalidOption("%s sets what the adapter sets itself for its calls", o.set))
		return
	}
	c.set |= o.set
	c.callSet |= o.set
	o.f(c)
}
func (o callOption) applyGuard(s *settings)    { o.applyCall(&s.call) }
func (o callOption) applyBatch(b *batchConfig) { o.applyCall(&b.call) }

// setting names what a call option sets, so that [WithDefaults] can tell
// which settings were given.
type setting uint32

const (
	setKeyPath setting = 1 << iota
	setValidation
	setKey
	setRequireKey
	setTTL
	setLease
	setMode
	setWaitBackoff
	setCodec
	setErrorCodec
	setDefinite
	setResultFilter
	setOutcomeHook
	setClaimToken
	setSelectionAttr
	setSpanAttrs
)

func opt(set setting, f func(*config)) CallOption { return callOption{set, f} }

// settingNames name the options behind each setting, for messages.
var settingNames = [...]string{
	"WithKeyPath", "WithPayloadValidation", "WithKey", "WithRequireKey", "WithTTL",
	"WithLease", "WithReject or WithWait", "WithWaitBackoff", "WithCodec", "WithErrorCodec",
	"WithDefiniteErrors", "WithResultFilter", "WithOutcomeHook", "WithClaimToken",
	"WithKeySelectionAttribute", "WithSpanAttributes",
}

// String names the options that set s.
func (s setting) String() string {
	var names []string
	for i, n := range settingNames {
		if s&(1<<i) != 0 {
			names = append(names, n)
		}
	}
	return strings.Join(names, ", ")
}

// Fixed applies opts and makes every other call option that sets the same
// settings, before it or after it in the call's options, an
// [ErrInvalidOption]: an adapter fixes what its calls need (the HTTP
// middleware its key path and codec, say), so that a user's option for it
// is reported instead of ignored. Defaults given to [New] give way to it
// silently, as they give way to any call option.
func Fixed(opts ...CallOption) CallOption {
	var mask setting
	for _, o := range opts {
		if co, ok := o.(callOption); ok {
			mask |= co.set
		}
	}
	return opt(0, func(c *config) {
		if given := c.callSet & mask; given != 0 {
			c.fail(invalidOption("%s sets what the adapter sets itself for its calls", given))
			return
		}
		for _, o := range opts {
			o.applyCall(c)
		}
		c.fixed |= mask
	})
}

// WithDefaults applies opts only to the settings that neither [New] nor an
// earlier option of the call set: the defaults an adapter (an HTTP
// middleware, a gRPC interceptor, a consumer) prefers for its calls, which
// give way to what the user configured on the guard. For example
// WithDefaults(WithTTL(24*time.Hour)) gives a call a TTL of 24 hours unless
// the guard was built with a TTL of its own.
func WithDefaults(opts ...CallOption) CallOption {
	return opt(0, func(c *config) {
		for _, o := range opts {
			if co, ok := o.(callOption); ok && c.set&co.set != 0 {
				continue
			}
			o.applyCall(c)
		}
	})
}

// settings are a guard's own settings and its call defaults.
type settings struct {
	call           config
	cacheSize      int
	cacheAge       time.Duration
	clock          Clock
	skew           time.Duration
	secret         []byte
	previous       [][]byte
	tracerProvider trace.TracerProvider
	meterProvider  metric.MeterProvider
	logger         *slog.Logger
	disabled       bool // killswitch.Disable, the suites' IDEMGUARD_DISABLED
	invalid
}

// invalid keeps the first invalid option of a scope.
type invalid struct{ err error }

// fail records err unless an earlier option failed (or err is nil).
func (v *invalid) fail(err error) {
	if v.err == nil {
		v.err = err
	}
}

// check records an invalid option, described by format and args, unless
// ok, and returns ok.
func (v *invalid) check(ok bool, format string, args ...any) bool {
	if !ok {
		v.fail(invalidOption(format, args...))
	}
	return ok
}

// config holds the settings of one call.
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
	codec          Codec
	errorCodec     ErrorCodec
	isDefinite     func(error) bool
	keepResult     func(any) bool
	onOutcome      OutcomeHook
	claimToken     string               // fixed fencing token, for re-entrant claims
	rawKeyAttr     bool                 // record the key selection on spans
	spanAttrs      []attribute.KeyValue // added to the execute span
	set            setting              // what options set, for WithDefaults
	callSet        setting              // what the call's own options set (not New's)
	fixed          setting              // what Fixed options fixed
	invalid
}

func defaultSettings() settings {
	return settings{
		call: config{
			ttl:         DefaultTTL,
			waitBudget:  DefaultWaitBudget,
			waitInitial: DefaultWaitInitial,
			waitMax:     DefaultWaitMax,
			codec:       JSON,
			errorCodec:  MessageErrors,
			isDefinite:  IsDefinite,
		},
		clock: systemClock{},
		skew:  DefaultClockSkew,
	}
}

// Codec encodes results for the store and decodes them on replay. It must be
// safe for concurrent use.
type Codec interface {
	Marshal(v any) ([]byte, error)
	Unmarshal(data []byte, v any) error
}

// JSON is the default [Codec]: encoding/json's Marshal and Unmarshal, so a
// replay returns exactly what encoding/json's round trip of the result
// gives, for every type. Plug in a faster codec with [WithCodec].
var JSON Codec = jsonCodec{}

type jsonCodec struct{}

func (jsonCodec) Marshal(v any) ([]byte, error)      { return json.Marshal(v) }
func (jsonCodec) Unmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }

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

// OutcomeHook is called with a call's record whenever the call's outcome
// is in the store: when the call replays a stored outcome instead of
// running the function (outcome [OutcomeReplayed], from the store or the
// local cache, or [OutcomeShared], from a concurrent call in this process),
// and when the call ran the function and recorded its outcome
// ([OutcomeExecuted]; not when the key was released). It runs on the
// caller's goroutine before the call returns; rec must not be modified.
type OutcomeHook func(ctx context.Context, key string, rec *store.Record, outcome Outcome)

// Guard-wide options.

// WithCache keeps up to size completed records in a local LRU cache that
// answers replays with no store call, each for at most maxAge after it was
// read from the store (and never past its expiry). Records are checked for
// expiry and payload on every hit.
//
// The cache is the only way a record can be replayed after it left the
// store: a record an operator deleted (idemguard release --force, to make a
// wrong result run again) goes on being replayed by every process that
// cached it for up to maxAge. maxAge bounds that window; zero keeps records
// until they expire, so that deleting one takes effect only after a
// restart of every process that cached it.
func WithCache(size int, maxAge time.Duration) Option {
	return guardOption(func(s *settings) {
		if s.check(size >= 0, "cache size must not be negative, got %d", size) &&
			s.check(maxAge >= 0, "cache age must not be negative, got %v", maxAge) {
			s.cacheSize, s.cacheAge = size, maxAge
		}
	})
}

// WithClock sets the time source (default: the system clock). Tests use a
// fake clock to move through leases and expiry without sleeping.
func WithClock(clock Clock) Option {
	return guardOption(func(s *settings) {
		if s.check(clock != nil, "nil clock") {
			s.clock = clock
		}
	})
}

// WithClockSkew sets the most a claimant's clock may run ahead of a
// holder's (default [DefaultClockSkew]). Each guard compares its own clock
// with the lease end the holder wrote; the guard takes over a lapsed lease
// only once it has lapsed by more than d on its own clock, while the holder
// stops (its function's context ends) as soon as the lease end passes on
// the holder's clock. So as long as clocks differ by less than d, two calls
// never run the function at once. A larger d costs a longer wait after a
// real crash. Beyond it, fencing still keeps a zombie from overwriting the
// new holder's record, but the function may run twice.
func WithClockSkew(d time.Duration) Option {
	return guardOption(func(s *settings) {
		if s.check(d >= 0, "clock skew must not be negative, got %v", d) {
			s.skew = d
		}
	})
}

// WithKeySecret makes the hashes in keys and payload hashes HMAC-SHA-256
// under secret instead of plain SHA-256, so that a low-entropy selection
// (an order number, an e-mail address) cannot be recovered from the store,
// traces, metrics or logs by hashing candidates.
//
// Changing the secret changes every key. To rotate it without running a
// call twice, give the secrets that were in use as previous, newest first:
// the guard claims under secret, and before it runs the function it looks
// the key up under each previous secret (one read per previous secret, on
// a fresh claim only): a completed record there is replayed (and copied
// under the new key), a claim in progress there makes the call wait or
// give way as it would for its own key. Steps ([Step]) are looked up the
// same way, and so are the items a resumed batch ([WithResume]) replays.
// Roll it out in two steps, so that no two processes ever claim
// one call under different keys without seeing each other:
//
//  1. deploy WithKeySecret(old, new) everywhere: every process still claims
//     under the old secret, and looks under the new one;
//  2. once every process runs step 1, deploy WithKeySecret(new, old): every
//     process claims under the new secret, and looks under the old one;
//  3. after the longest TTL has passed, drop old: WithKeySecret(new).
//
// A process at step 1 and one at step 2 each claim under its own key, then
// look under the other's; whichever looks second sees the other's claim, so
// at most one of them runs the function.
func WithKeySecret(secret []byte, previous ...[]byte) Option {
	return guardOption(func(s *settings) {
		if !s.check(len(secret) > 0, "empty key secret") {
			return
		}
		s.secret = append([]byte(nil), secret...)
		s.previous = nil
		for _, p := range previous {
			if !s.check(len(p) > 0, "empty previous key secret") {
				return
			}
			s.previous = append(s.previous, append([]byte(nil), p...))
		}
	})
}

// WithTracerProvider sets the OpenTelemetry tracer provider (default: the
// global one).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return guardOption(func(s *settings) { s.tracerProvider = tp })
}

// WithMeterProvider sets the OpenTelemetry meter provider (default: the
// global one).
func WithMeterProvider(mp metric.MeterProvider) Option {
	return guardOption(func(s *settings) { s.meterProvider = mp })
}

// WithLogger sets the logger for guard events: lease lost, completion write
// retried, result not stored, key missing. The default writes warnings and
// errors to slog.Default().
func WithLogger(l *slog.Logger) Option {
	return guardOption(func(s *settings) { s.logger = l })
}

// Call options.

// WithKeyPath selects the part of the input the key is derived from, with a
// JMESPath expression over the input's JSON form (for example
// "order.id" or "powertools_json(body).order_id"). Without it the key is
// derived from the whole input.
//
// Numbers are canonicalised as IEEE-754 doubles, as RFC 8785 requires, so
// integers beyond ±2^53 lose precision and neighbouring ones share a key:
// select large IDs (snowflake IDs, for example) as strings. Strings in the
// selection must be valid UTF-8. An expression that does not compile is
// reported as an [*ExpressionError].
func WithKeyPath(expr string) CallOption {
	e, err := compile(expr)
	return opt(setKeyPath, func(c *config) { c.fail(err); c.keyPath = e })
}

// WithPayloadValidation stores a hash of the part of the input that expr
// selects with the record, and fails a later call with the same key whose
// selection hashes differently with [ErrPayloadMismatch]. Use "@" to
// validate the whole input.
func WithPayloadValidation(expr string) CallOption {
	e, err := compile(expr)
	return opt(setValidation, func(c *config) { c.fail(err); c.validationPath = e })
}

// WithKey derives the key from selection instead of from the input (the key
// path is not applied to it); payload validation still reads the input. It
// names one call, for example with a key a caller was handed explicitly:
// [New] and [DoBatch] refuse it.
func WithKey(selection any) CallOption {
	return opt(setKey, func(c *config) { c.explicitKey, c.hasKey = selection, true })
}

// WithRequireKey makes a null or empty key selection an error
// ([ErrKeyMissing]) instead of running the function unguarded. A
// transactional call ([DoTx], [ExecuteTx], [WrapTx]) requires a key unless
// the call, or the defaults given to [New], say WithRequireKey(false);
// other calls run unguarded unless told WithRequireKey(true).
func WithRequireKey(require bool) CallOption {
	return opt(setRequireKey, func(c *config) { c.requireKey = require })
}

// WithTTL sets how long a completed record is replayed (default
// [DefaultTTL]).
func WithTTL(ttl time.Duration) CallOption {
	return opt(setTTL, func(c *config) {
		if c.check(ttl > 0, "TTL must be positive, got %v", ttl) {
			c.ttl = ttl
		}
	})
}

// WithLease sets the in-progress lease: how long a claim holds without being
// extended. By default it is the time left until the context's deadline
// (for a Temporal activity, the activity's deadline), or [DefaultLease]
// without one, and never less than [MinLease]. While the function runs the
// guard extends the lease before it lapses. If an extension finds the claim
// taken over, or the lease end passes without a successful extension, the
// function's context is cancelled with cause [ErrLeaseLost].
func WithLease(lease time.Duration) CallOption {
	return opt(setLease, func(c *config) {
		if c.check(lease >= 0, "lease must not be negative, got %v", lease) {
			c.lease = lease
		}
	})
}

// WithReject selects [Reject] mode (the default).
func WithReject() CallOption {
	return opt(setMode, func(c *config) { c.mode = Reject })
}

// WithWait selects [Wait] mode with a wait budget: a call that finds the key
// in progress waits for up to budget before it returns [ErrInProgress].
func WithWait(budget time.Duration) CallOption {
	return opt(setMode, func(c *config) {
		if c.check(budget > 0, "wait budget must be positive, got %v", budget) {
			c.mode, c.waitBudget = Wait, budget
		}
	})
}

// WithWaitBackoff sets the first and the longest pause between polls in
// [Wait] mode (defaults [DefaultWaitInitial], [DefaultWaitMax]), on a store
// that does not push completions ([store.Watcher]): each pause is about as
// long as the call has been seen running, within these bounds (a random part
// of up to a quarter taken off, never above the longest), and never runs
// past the holder's lease end. The duplicates of a key waiting in one
// process share the polls.
func WithWaitBackoff(initial, max time.Duration) CallOption {
	return opt(setWaitBackoff, func(c *config) {
		if c.check(initial > 0 && max >= initial, "wait backoff needs 0 < initial <= max, got %v, %v", initial, max) {
			c.waitInitial, c.waitMax = initial, max
		}
	})
}

// WithCodec sets the codec for results (default [JSON]).
func WithCodec(codec Codec) CallOption {
	return opt(setCodec, func(c *config) {
		if c.check(codec != nil, "nil codec") {
			c.codec = codec
		}
	})
}

// WithDefiniteErrors sets the predicate that picks definite errors: errors
// that are stored and replayed to every later call, instead of releasing the
// record so that a retry runs the function again. The default is
// [IsDefinite]; nil stores none. Use [WithErrorCodec] to choose how they
// are stored.
func WithDefiniteErrors(isDefinite func(error) bool) CallOption {
	return opt(setDefinite, func(c *config) {
		if isDefinite == nil {
			isDefinite = func(error) bool { return false }
		}
		c.isDefinite = isDefinite
	})
}

// WithErrorCodec sets how definite errors are stored and replayed (default
// [MessageErrors]).
func WithErrorCodec(ec ErrorCodec) CallOption {
	return opt(setErrorCodec, func(c *config) {
		if c.check(ec != nil, "nil error codec") {
			c.errorCodec = ec
		}
	})
}

// WithResultFilter sets a predicate over successful results: a result for
// which keep returns false is returned to this caller but not stored, and
// the record is released so the next call runs the function again (like
// idempotender's validResponseJmespath), with every [Step] of the call.
// Given to a step, it releases that step alone: the call's transaction
// and its other steps are the call's.
func WithResultFilter(keep func(result any) bool) CallOption {
	return opt(setResultFilter, func(c *config) { c.keepResult = keep })
}

// WithOutcomeHook sets a hook called with the record of every call whose
// outcome is in the store: replayed, shared or just recorded (see
// [OutcomeHook]). Like AWS Powertools' responseHook, but observing only;
// an HTTP layer uses it to announce the record's expiry.
func WithOutcomeHook(hook OutcomeHook) CallOption {
	return opt(setOutcomeHook, func(c *config) { c.onOutcome = hook })
}

// WithKeySelectionAttribute records the canonical JSON the key was derived
// from on the idemguard.execute span (idemguard.key.selection). It is off by
// default because the selection can carry user data; the key hash is always
// recorded.
func WithKeySelectionAttribute(on bool) CallOption {
	return opt(setSelectionAttr, func(c *config) { c.rawKeyAttr = on })
}

// WithSpanAttributes adds attributes to the call's idemguard.execute span,
// for example the Temporal workflow ID and activity type.
func WithSpanAttributes(attrs ...attribute.KeyValue) CallOption {
	return opt(setSpanAttrs, func(c *config) { c.spanAttrs = append(c.spanAttrs[:len(c.spanAttrs):len(c.spanAttrs)], attrs...) })
}

// WithClaimToken makes the call claim with token instead of a random fencing
// token. A claimant that repeats its claim after losing the answer, such as
// a Temporal workflow whose claiming local activity ran but whose workflow
// task was lost, then finds its own claim (any claim finds a live record
// under its own token to be its own) instead of waiting for its own lease
// to lapse. The token must be unique to the claimant; two claimants sharing
// one would both hold the key. It names one call: [New] refuses it.
func WithClaimToken(token string) CallOption {
	return opt(setClaimToken, func(c *config) { c.claimToken = token })
}
