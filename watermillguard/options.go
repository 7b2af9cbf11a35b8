package watermillguard

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/idemguard/idemguard/guard"
)

// Defaults used when an option is not given.
const (
	// defaultScope is the guard scope of a message whose context names no
	// router handler (the middleware called outside a [message.Router]).
	// Inside a router, the scope is the handler's name.
	defaultScope = "watermill"
	// defaultTTL is how long a handled message is remembered: redeliveries
	// and publisher retries come within seconds or minutes, but a consumer
	// group reset or a replay from a dead-letter topic can come hours
	// later. It applies unless the guard or [WithGuardOptions] set a TTL.
	defaultTTL = 24 * time.Hour
	// defaultLease is the lease of a message's claim, unless the guard or
	// [WithGuardOptions] set one (guard.WithLease). The guard extends it
	// every third of a lease while the handler runs, so it does not bound
	// how long a handler may run; it bounds how long a message waits after
	// the consumer that held it died: defaultLease and the guard's clock
	// skew, 16 s with the defaults, where the guard's own default lease
	// (a minute) would stall it for a minute. Shorter would cost running
	// handlers their claims: an extension is made every 5 s and may take
	// until the lease end, so a store (or a process) that stalls for up to
	// 10 s still extends in time; with 10 s the margin would be 6.7 s,
	// which a loaded store under test has been seen to exceed.
	defaultLease = 15 * time.Second
)

// Option configures the middleware. The middleware's own options set
// where the key comes from and its scope; the guard's options go through
// [WithGuardOptions].
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// keySource says what a message's key is derived from.
type keySource uint8

const (
	keyUUID     keySource = iota // the message UUID
	keyMetadata                  // a metadata field
	keyPayload                   // the payload, read as JSON
)

type config struct {
	scope string // "": the router handler's name
	key   keySource
	field string // the metadata field, for keyMetadata
	call  []guard.CallOption
	log   *slog.Logger // nil: slog.Default()
	err   error
}

func (c *config) fail(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("watermillguard: "+format, args...)
	}
}

// WithScope sets the guard scope of the middleware's keys. By default it
// is the name of the router handler the message was delivered to, so that
// two handlers that consume the same message keep records of their own;
// a middleware added to the whole router with WithScope gives every
// handler one scope, and a message handled by one of them counts as
// handled for all. Set it on one handler's middleware
// ([message.Handler.AddMiddleware]) when the handler's name may change
// between deployments while its records must carry over.
func WithScope(scope string) Option {
	return optionFunc(func(c *config) {
		if scope == "" {
			c.fail("empty scope")
			return
		}
		c.scope = scope
	})
}

// WithKeyFromMetadata derives the key from the metadata field name
// instead of the message UUID: for publishers that give each delivery of
// one business event a fresh UUID but a stable identifier of their own
// (an event ID, an outbox row ID). A message without the field, or with
// it empty, fails with [guard.ErrKeyMissing] (a [PermanentError]), unless
// guard.WithRequireKey(false) is given to [WithGuardOptions], which runs
// the handler unguarded instead.
func WithKeyFromMetadata(name string) Option {
	return optionFunc(func(c *config) {
		if name == "" {
			c.fail("empty metadata field name")
			return
		}
		c.key, c.field = keyMetadata, name
	})
}

// WithKeyFromPayload derives the key from the message payload, read as
// JSON: from what the guard's key path selects (guard.WithKeyPath, given
// to [WithGuardOptions] or as a default to [guard.New]), or from the whole
// payload without one. Use it when duplicates carry different UUIDs and
// no identifying metadata, so that only their content tells them apart,
// e.g. guard.WithKeyPath("order_id"). A payload that is not JSON fails
// with [ErrPayloadNotJSON], and a payload whose selection is null or
// empty with [guard.ErrKeyMissing] (both [PermanentError]s); neither runs
// the handler.
func WithKeyFromPayload() Option {
	return optionFunc(func(c *config) { c.key, c.field = keyPayload, "" })
}

// WithGuardOptions passes options to every guarded call, as they are:
// guard.WithTTL, guard.WithLease, guard.WithWait(0) (return
// [guard.ErrInProgress] at once for a message in progress elsewhere, to be
// nacked, instead of waiting for it), guard.WithWait (wait for it for a
// budget of one's own), guard.WithPayloadValidation (over the payload read
// as JSON), guard.WithKeyPath (with [WithKeyFromPayload]),
// guard.WithDefiniteErrors, and the rest. They override the guard's
// defaults and the middleware's (a TTL of 24 hours, a lease of 15 s, a required
// key, a wait for a message in progress elsewhere until its holder's lease
// can have lapsed). guard.WithKey, adapt.WithClaimToken and
// guard.WithCodec are refused (guard.ErrInvalidOption): the middleware
// sets the key from the message, each delivery claims for itself, and the
// produced messages are stored in a format of its own.
func WithGuardOptions(opts ...guard.CallOption) Option {
	return optionFunc(func(c *config) { c.call = append(c.call, opts...) })
}

// WithLogger sets where the middleware logs a delivery that found its
// message in progress in another consumer (at info level, once per message
// key and holder's lease, however often the message is redelivered). The
// default is slog.Default().
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) { c.log = l })
}
