package guard

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemguard/idemguard/internal/guardhook"
	"github.com/idemguard/idemguard/internal/keyformat"
	"github.com/idemguard/idemguard/store"
)

// Option configures a [Guard] in [New]: [WithCache], [WithClockSkew],
// [WithKeySecret], [WithTracerProvider], [WithMeterProvider] and
// [WithLogger] apply to the whole guard, and a [SharedOption] sets the
// default for its calls. Options have one type per scope, so that one
// passed where it has no effect does not compile.
type Option interface{ applyGuard(*settings) }

// CallOption configures one guarded call ([Do], [Wrap], [DoTx], [WrapTx],
// [Step]). Every [SharedOption] is one; [WithKey], which names one call's
// key, is a CallOption alone: given to [New] or [DoBatch] it does not
// compile.
type CallOption interface{ applyCall(*config) }

// BatchOption configures a batch run by [DoBatch]: every [SharedOption],
// and [WithConcurrency], [WithItemKey] and [WithStopOnError].
type BatchOption interface{ applyBatch(*batchConfig) }

// SharedOption is a call option that may be given wherever calls are
// configured: to a call, to [New] as the default of every call of the
// guard, and to [DoBatch] for every item of the batch.
type SharedOption interface {
	Option
	CallOption
	BatchOption
}

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
func (o callOption) applyGuard(s *settings)    { o.applyCall(&s.calls) }
func (o callOption) applyBatch(b *batchConfig) { o.applyCall(&b.calls) }

// oneCall is a [CallOption] that names one call, and so is neither a
// guard's default nor a batch's.
type oneCall struct{ o callOption }

func (o oneCall) applyCall(c *config) { o.o.applyCall(c) }

// settingOf returns the settings o sets.
func settingOf(o CallOption) setting {
	switch o := o.(type) {
	case callOption:
		return o.set
	case oneCall:
		return o.o.set
	}
	return 0
}

// setting names what a call option sets, so that [withDefaults] can tell
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

func opt(set setting, f func(*config)) SharedOption { return callOption{set, f} }

// callOnly returns a [CallOption] of one call that sets set with f.
func callOnly(set setting, f func(*config)) CallOption { return oneCall{callOption{set, f}} }

// settingNames name the options behind each setting, for messages.
var settingNames = [...]string{
	"WithKeyPath", "WithPayloadValidation", "WithKey", "WithRequireKey", "WithTTL",
	"WithLease", "WithWait", "WithWaitBackoff", "WithCodec", "WithErrorCodec",
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

// fixed applies opts and makes every other call option that sets the same
// settings, before it or after it in the call's options, an
// [ErrInvalidOption]: an adapter fixes what its calls need (the HTTP
// middleware its key path and codec, say), so that a user's option for it
// is reported instead of ignored. Defaults given to [New] give way to it
// silently, as they give way to any call option.
func fixed(opts ...CallOption) CallOption {
	var mask setting
	for _, o := range opts {
		mask |= settingOf(o)
	}
	return callOnly(0, func(c *config) {
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

// withDefaults applies opts only to the settings that neither [New] nor an
// earlier option of the call set: the defaults an adapter (an HTTP
// middleware, a gRPC interceptor, a consumer) prefers for its calls, which
// give way to what the user configured on the guard. For example
// withDefaults(WithTTL(24*time.Hour)) gives a call a TTL of 24 hours unless
// the guard was built with a TTL of its own.
func withDefaults(opts ...CallOption) CallOption {
	return callOnly(0, func(c *config) {
		for _, o := range opts {
			if c.set&settingOf(o) != 0 {
				continue
			}
			o.applyCall(c)
		}
	})
}

// settings are a guard's own settings and its call defaults.
type settings struct {
	calls          config
	cacheSize      int
	cacheAge       time.Duration
	clock          timeSource
	skew           time.Duration
	secret         []byte
	previous       [][]byte
	tracerProvider trace.TracerProvider
	meterProvider  metric.MeterProvider
	logger         *slog.Logger
	disabled       bool // killswitch.Disable, the suites' IDEMGUARD_DISABLED
	firstInvalid
}

// invalid keeps the first invalid option of a scope.
type firstInvalid struct{ err error }

// fail records err unless an earlier option failed (or err is nil).
func (v *firstInvalid) fail(err error) {
	if v.err == nil {
		v.err = err
	}
}

// check records an invalid option, described by format and args, unless
// ok, and returns ok.
func (v *firstInvalid) check(ok bool, format string, args ...any) bool {
	if !ok {
		v.fail(invalidOption(format, args...))
	}
	return ok
}

// config holds the settings of one call.
type config struct {
	keyPath        *keyformat.Expression // nil: the whole input
	validationPath *keyformat.Expression // nil: no payload validation
	explicitKey    any                   // used instead of the input when hasKey
	hasKey         bool
	requireKey     bool
	ttl            time.Duration
	lease          time.Duration // 0: from the context deadline, else guardhook.DefaultLease
	mode           guardhook.Mode
	waitBudget     time.Duration
	waitInitial    time.Duration
	waitMax        time.Duration
	codec          Codec
	errorCodec     guardhook.ErrorCodec
	isDefinite     func(error) bool
	keepResult     func(any) bool
	onOutcome      outcomeHook
	report         *Outcome             // where an adapter's call stores its outcome (guardhook.ReportOutcome)
	claimToken     string               // fixed fencing token, for re-entrant claims
	rawKeyAttr     bool                 // record the key selection on spans
	spanAttrs      []attribute.KeyValue // added to the execute span
	set            setting              // what options set, for withDefaults
	callSet        setting              // what the call's own options set (not New's)
	fixed          setting              // what fixed options fixed
	firstInvalid
}

func defaultSettings() settings {
	return settings{
		calls: config{
			ttl:         guardhook.DefaultTTL,
			waitBudget:  guardhook.DefaultWaitBudget,
			waitInitial: guardhook.DefaultWaitInitial,
			waitMax:     guardhook.DefaultWaitMax,
			codec:       guardhook.JSONCodec{},
			errorCodec:  guardhook.MessageErrors,
			isDefinite:  guardhook.IsDefinite,
		},
		clock: systemClock{},
		skew:  guardhook.DefaultClockSkew,
	}
}

// Codec encodes results for the store and decodes them on replay. It must be
// safe for concurrent use.
type Codec interface {
	Marshal(v any) ([]byte, error)
	Unmarshal(data []byte, v any) error
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }
func (systemClock) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}

// outcomeHook is called with a call's record whenever the call's outcome
// is in the store: when the call replays a stored outcome instead of
// running the function (outcome [OutcomeReplayed], from the store or the
// local cache, or [OutcomeShared], from a concurrent call in this process),
// and when the call ran the function and recorded its outcome
// ([OutcomeExecuted]; not when the key was released). It runs on the
// caller's goroutine before the call returns; rec must not be modified.
type outcomeHook func(ctx context.Context, key string, rec *store.Record, outcome Outcome)

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

// withClock sets the time source (default: the system clock). Tests use a
// fake clock to move through leases and expiry without sleeping.
func withClock(clock timeSource) Option {
	return guardOption(func(s *settings) {
		if s.check(clock != nil, "nil clock") {
			s.clock = clock
		}
	})
}

// WithClockSkew sets the most a claimant's clock may run ahead of a
// holder's (default one second). Each guard compares its own clock
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
// same way, and so are the items a resumed batch replays.
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
// reported as [ErrInvalidOption], its message naming the expression and
// the parser's complaint.
func WithKeyPath(expr string) SharedOption {
	e, err := compile(expr)
	return opt(setKeyPath, func(c *config) { c.fail(err); c.keyPath = e })
}

// WithPayloadValidation stores a hash of the part of the input that expr
// selects with the record, and fails a later call with the same key whose
// selection hashes differently with [ErrPayloadMismatch]. Use "@" to
// validate the whole input.
func WithPayloadValidation(expr string) SharedOption {
	e, err := compile(expr)
	return opt(setValidation, func(c *config) { c.fail(err); c.validationPath = e })
}

// WithKey derives the key from selection instead of from the input (the key
// path is not applied to it); payload validation still reads the input. It
// names one call, for example with a key a caller was handed explicitly,
// so it is a [CallOption] alone: given to [New] or [DoBatch] (where
// [WithItemKey] is its form) it does not compile.
func WithKey(selection any) CallOption {
	return callOnly(setKey, func(c *config) { c.explicitKey, c.hasKey = selection, true })
}

// WithRequireKey makes a null or empty key selection an error
// ([ErrKeyMissing]) instead of running the function unguarded. A
// transactional call ([DoTx], [WrapTx]) requires a key unless
// the call, or the defaults given to [New], say WithRequireKey(false);
// other calls run unguarded unless told WithRequireKey(true).
func WithRequireKey(require bool) SharedOption {
	return opt(setRequireKey, func(c *config) { c.requireKey = require })
}

// WithTTL sets how long a completed record is replayed (default one
// hour).
func WithTTL(ttl time.Duration) SharedOption {
	return opt(setTTL, func(c *config) {
		if c.check(ttl > 0, "TTL must be positive, got %v", ttl) {
			c.ttl = ttl
		}
	})
}

// WithLease sets the in-progress lease: how long a claim holds without being
// extended. By default it is the time left until the context's deadline
// (for a Temporal activity, the activity's deadline), or a minute
// without one, and never less than a second. While the function runs the
// guard extends the lease before it lapses. If an extension finds the claim
// taken over, or the lease end passes without a successful extension, the
// function's context is cancelled with cause [ErrLeaseLost].
func WithLease(lease time.Duration) SharedOption {
	return opt(setLease, func(c *config) {
		if c.check(lease >= 0, "lease must not be negative, got %v", lease) {
			c.lease = lease
		}
	})
}

// WithWait sets how long a call that finds the key in progress waits
// for the other call before it returns [ErrInProgress]: until the other
// call completes (and its result is replayed), fails or lapses (and the
// function runs), or budget ends. Duplicates of a key in one process share
// one wait, told of the completion by a store that pushes it
// ([store.Watcher]) and reading the record otherwise.
//
// WithWait(0), the default, does not wait: the call returns
// [ErrInProgress] at once, as in AWS Powertools, which suits callers that
// retry with backoff themselves, such as Temporal activities; given to a
// call, it overrides a guard's default wait (as an HTTP request's
// Prefer: wait=0 does).
func WithWait(budget time.Duration) SharedOption {
	return opt(setMode, func(c *config) {
		if !c.check(budget >= 0, "wait budget must not be negative, got %v", budget) {
			return
		}
		if budget == 0 {
			c.mode = guardhook.Reject
			return
		}
		c.mode, c.waitBudget = guardhook.Wait, budget
	})
}

// withWaitBackoff sets the first and the longest pause between polls of a
// waiting call ([WithWait]; defaults 20ms and a second), on a store that
// does not push completions ([store.Watcher]): each pause is about as long
// as the call has been seen running, within these bounds (a random part of
// up to a quarter taken off, never above the longest), and never runs past
// the holder's lease end. The duplicates of a key waiting in one process
// share the polls.
func withWaitBackoff(initial, max time.Duration) SharedOption {
	return opt(setWaitBackoff, func(c *config) {
		if c.check(initial > 0 && max >= initial, "wait backoff needs 0 < initial <= max, got %v, %v", initial, max) {
			c.waitInitial, c.waitMax = initial, max
		}
	})
}

// WithCodec sets the codec for results (default: encoding/json's Marshal
// and Unmarshal, so a replay returns exactly what encoding/json's round
// trip of the result gives, for every type).
func WithCodec(codec Codec) SharedOption {
	return opt(setCodec, func(c *config) {
		if c.check(codec != nil, "nil codec") {
			c.codec = codec
		}
	})
}

// WithDefiniteErrors sets the predicate that picks definite errors: errors
// that are stored and replayed to every later call, instead of releasing the
// record so that a retry runs the function again. The default is
// errors marked with [Definite] (and such errors replayed); nil stores
// none. Their message is stored, and replayed as an error of that text.
func WithDefiniteErrors(isDefinite func(error) bool) SharedOption {
	return opt(setDefinite, func(c *config) {
		if isDefinite == nil {
			isDefinite = func(error) bool { return false }
		}
		c.isDefinite = isDefinite
	})
}

// withErrorCodec sets how definite errors are stored and replayed (default
// guardhook.MessageErrors).
func withErrorCodec(ec guardhook.ErrorCodec) SharedOption {
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
func WithResultFilter(keep func(result any) bool) SharedOption {
	return opt(setResultFilter, func(c *config) { c.keepResult = keep })
}

// WithOutcomeHook sets a hook called with the record of every call whose
// outcome is in the store: replayed, shared or just recorded (see
// [Outcome]): hook gets the context, the key, the record (which it must
// not modify) and the outcome, on the caller's goroutine before the call
// returns). Like AWS Powertools' responseHook, but observing only;
// an HTTP layer uses it to announce the record's expiry.
func WithOutcomeHook(hook func(ctx context.Context, key string, rec *store.Record, outcome Outcome)) SharedOption {
	return opt(setOutcomeHook, func(c *config) { c.onOutcome = hook })
}

// withKeySelectionAttribute records the canonical JSON the key was derived
// from on the idemguard.execute span (idemguard.key.selection). It is off by
// default because the selection can carry user data; the key hash is always
// recorded.
func withKeySelectionAttribute(on bool) SharedOption {
	return opt(setSelectionAttr, func(c *config) { c.rawKeyAttr = on })
}

// withSpanAttributes adds attributes to the call's idemguard.execute span,
// for example the Temporal workflow ID and activity type.
func withSpanAttributes(attrs ...attribute.KeyValue) SharedOption {
	return opt(setSpanAttrs, func(c *config) { c.spanAttrs = append(c.spanAttrs[:len(c.spanAttrs):len(c.spanAttrs)], attrs...) })
}

// withClaimToken makes the call claim with token instead of a random fencing
// token. A claimant that repeats its claim after losing the answer, such as
// a Temporal workflow whose claiming local activity ran but whose workflow
// task was lost, then finds its own claim (any claim finds a live record
// under its own token to be its own) instead of waiting for its own lease
// to lapse. The token must be unique to the claimant; two claimants sharing
// one would both hold the key. It names one call.
func withClaimToken(token string) CallOption {
	return callOnly(setClaimToken, func(c *config) { c.claimToken = token })
}

// compile compiles a JMESPath expression given to an option; an
// expression that does not compile is an invalid option.
func compile(expr string) (*keyformat.Expression, error) {
	e, err := keyformat.Compile(expr)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOption, err)
	}
	return e, nil
}

// batchConfig holds a batch's call settings and batch options.
type batchConfig struct {
	calls       config
	concurrency int
	itemKey     func(any) any // nil: keys come from the inputs
	itemKeyType reflect.Type  // the input type itemKey takes
	stopOnError bool
	resume      int
	onItem      func(index int, outcome Outcome, err error)
	firstInvalid
}
