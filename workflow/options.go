package workflow

import (
	"time"

	"go.temporal.io/sdk/converter"
	tworkflow "go.temporal.io/sdk/workflow"

	"github.com/idemguard/idemguard/guard"
)

// Defaults of [Wrap], applied with adapt.WithDefaults: a lease, mode or
// backoff given to guard.New, or with [WithGuardOptions], wins.
const (
	// defaultLease is how long a guarded workflow's claim holds without
	// being extended. The workflow extends it by a local activity every
	// third of a lease while its body runs, so it bounds only how long a
	// duplicate waits after the holder was terminated without releasing.
	defaultLease = time.Hour
	// defaultPollInitial and defaultPollMax bound the pauses, on workflow
	// timers, between the wait slices (waitSlice) of a duplicate that waits
	// for the holder of its key. Each slice with its pause is a marker, a
	// timer and a workflow task in its history (6 events), so a duplicate
	// that waits an hour adds about 330 events once the pauses have grown
	// to a minute, as many as when it polled at these pauses without
	// slices. It learns of a completion at once while a slice runs (with
	// the default workflow task timeout, slices of 5 s: two thirds of its
	// first half minute, about an eighth of the next two minutes, 5 s in
	// every 65 after that), and otherwise at its next claim, at most a
	// minute late. Shorter pauses would cover more of a long wait at the
	// cost of a longer history; a longer workflow task timeout gives
	// longer slices at no cost in events.
	defaultPollInitial = time.Second
	defaultPollMax     = time.Minute
	// defaultWorkflowTaskTimeout is the server's workflow task timeout
	// when a workflow is started without one.
	defaultWorkflowTaskTimeout = 10 * time.Second
	// forever is the wait budget of a duplicate by default: as long as the
	// holder holds the key (the workflow's own timeouts bound it).
	forever = time.Duration(1<<63 - 1)
)

// Option configures a guarded workflow ([Wrap]). Guard options (the key
// path, TTL, lease, wait mode, payload validation, result filter, codec, …)
// are not declared here: give them to guard.New as the defaults of every
// call, or to one workflow with [WithGuardOptions].
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	guardOpts []guard.CallOption
	dc        converter.DataConverter
	la        tworkflow.LocalActivityOptions
}

func newConfig(opts []Option) *config {
	c := &config{
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

// WithGuardOptions gives this workflow guard options, as they are:
// guard.WithKeyPath, guard.WithPayloadValidation, guard.WithTTL,
// guard.WithLease, guard.WithWait(0) or guard.WithWait,
// guard.WithRequireKey, guard.WithResultFilter, guard.WithDefiniteErrors,
// guard.WithOutcomeHook, guard.WithCodec, … They override the defaults
// given to guard.New, which override the workflow guard's own
// (a lease of 1 h; waiting for the holder for as long as it holds the key,
// in wait slices separated by workflow timers from a second up to a minute
// long: see [Wrap]), and they apply to
// every step of the claim: claiming, extending, completing and replaying.
// guard.WithKey names one call and is refused (the caller gives a run its
// key with [ContextWithKey]).
func WithGuardOptions(opts ...guard.CallOption) Option {
	return optionFunc(func(c *config) { c.guardOpts = append(c.guardOpts, opts...) })
}

// WithDataConverter sets the data converter that encodes the stored result:
// give the one passed to client.Options.DataConverter, so that its payload
// codecs apply to stored results. Nil means the SDK's default.
func WithDataConverter(dc converter.DataConverter) Option {
	return optionFunc(func(c *config) { c.dc = dc })
}

// WithLocalActivityOptions sets the options of the local activities that
// claim, extend, complete and release the key (default: 30 s per attempt,
// retried for up to 10 minutes).
func WithLocalActivityOptions(o tworkflow.LocalActivityOptions) Option {
	return optionFunc(func(c *config) { c.la = o })
}
