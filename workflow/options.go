package workflow

import (
	"time"

	"go.temporal.io/sdk/converter"
	tworkflow "go.temporal.io/sdk/workflow"

	"github.com/idemguard/idemguard/guard"
)

// Defaults of [Guard].
const (
	// DefaultLease is how long a guarded workflow's claim holds without
	// being extended. The workflow extends it by a local activity every
	// third of a lease while its body runs, so it bounds only how long a
	// duplicate waits after the holder was terminated without releasing.
	DefaultLease = time.Hour
	// DefaultMaxPollInterval is the longest pause between claims of a
	// duplicate that waits for the holder of its key.
	DefaultMaxPollInterval = time.Minute
	// minPollInterval is the first pause of a waiting duplicate.
	minPollInterval = time.Second
)

// Option configures a guarded workflow ([Guard]).
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	keyPath          string
	guardOpts        []guard.CallOption
	dc               converter.DataConverter
	lease            time.Duration
	rejectInProgress bool
	maxPoll          time.Duration
	la               tworkflow.LocalActivityOptions
}

func newConfig(opts []Option) *config {
	c := &config{
		lease:   DefaultLease,
		maxPoll: DefaultMaxPollInterval,
		la: tworkflow.LocalActivityOptions{
			StartToCloseTimeout:    30 * time.Second,
			ScheduleToCloseTimeout: 10 * time.Minute,
		},
	}
	for _, o := range opts {
		if o != nil {
			o.apply(c)
		}
	}
	return c
}

// WithKeyPath derives the key from the part of the workflow's input that
// the JMESPath expression expr selects (see guard.WithKeyPath). Without it
// the whole input is the key.
func WithKeyPath(expr string) Option {
	return optionFunc(func(c *config) { c.keyPath = expr })
}

// WithGuardOptions adds guard options for this workflow, overriding the
// guard's own: guard.WithPayloadValidation, guard.WithTTL,
// guard.WithRequireKey, … The claim's lease is set with [WithLease] and
// waiting with [WithRejectInProgress]: [Guard] refuses guard.WithLease,
// guard.WithWait and guard.WithReject here, by panicking when the worker
// is built, rather than override them silently.
func WithGuardOptions(opts ...guard.CallOption) Option {
	return optionFunc(func(c *config) { c.guardOpts = append(c.guardOpts, opts...) })
}

// WithDataConverter sets the data converter that encodes the stored result:
// give the one passed to client.Options.DataConverter, so that its payload
// codecs apply to stored results. Nil means the SDK's default.
func WithDataConverter(dc converter.DataConverter) Option {
	return optionFunc(func(c *config) { c.dc = dc })
}

// WithLease sets the claim's lease (default [DefaultLease]). The workflow
// extends it every third of a lease while its body runs; a shorter lease
// lets duplicates take over sooner after the holder was terminated, at the
// cost of more timers and local activities in the holder's history.
func WithLease(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d >= guard.MinLease {
			c.lease = d
		}
	})
}

// WithRejectInProgress makes a workflow whose key is held by another running
// workflow fail at once with an application error of type
// activity.ErrorTypeInProgress (retryable, with NextRetryDelay at the
// holder's lease end), instead of waiting for the holder and returning its
// result, which is the default.
func WithRejectInProgress() Option {
	return optionFunc(func(c *config) { c.rejectInProgress = true })
}

// WithMaxPollInterval sets the longest pause between claims of a workflow
// that waits for the holder of its key (default [DefaultMaxPollInterval]).
// Pauses start at a second and double, and never run past the holder's
// lease end.
func WithMaxPollInterval(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d >= minPollInterval {
			c.maxPoll = d
		}
	})
}

// WithLocalActivityOptions sets the options of the local activities that
// claim, extend, complete and release the key (default: 30 s per attempt,
// retried for up to 10 minutes).
func WithLocalActivityOptions(o tworkflow.LocalActivityOptions) Option {
	return optionFunc(func(c *config) { c.la = o })
}
