package activity

import (
	"time"

	"go.temporal.io/sdk/converter"

	"github.com/idemguard/idemguard/guard"
)

// Option configures a guarded activity ([Wrap] and its siblings, a
// [Policy] of [Interceptor], or [DoBatch]). Guard options (the key path,
// TTL, lease, wait mode, payload validation, …) are not declared here: give
// them to guard.New as the defaults of every call, or to one activity with
// [WithGuardOptions].
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	executionScope bool
	dc             converter.DataConverter // nil = the SDK's default
	storeFailures  bool
	maxRetryDelay  time.Duration // 0 = until the holder's lease can have lapsed
	guardOpts      []guard.CallOption
	batchOpts      []guard.BatchOption // DoBatch only
}

func newConfig(opts []Option) *config {
	c := &config{}
	for _, o := range opts {
		if o != nil {
			o.apply(c)
		}
	}
	return c
}

// WithExecutionScope keys the activity by its workflow ID and activity ID
// instead of its input: every retry of one activity execution shares the
// key, and no other execution does. Workflow IDs are reused by later runs
// (workflow retries, continue-as-new, a workflow started again with the same
// ID); within the record's TTL those replay results recorded by earlier runs
// for the same activity ID. A key stamped by the workflow still wins.
func WithExecutionScope() Option {
	return optionFunc(func(c *config) { c.executionScope = true })
}

// WithDataConverter sets the data converter that encodes stored results:
// give the one passed to client.Options.DataConverter, so that its payload
// codecs (encryption, compression) apply to the results in the store too.
// Nil means the SDK's default converter. What reaches the workflow history
// is encoded by the worker's own data converter in either case.
func WithDataConverter(dc converter.DataConverter) Option {
	return optionFunc(func(c *config) { c.dc = dc })
}

// WithStoredFailures stores non-retryable Temporal application errors
// (temporal.NewNonRetryableApplicationError, such as a declined card) and
// errors marked with guard.Definite, and replays them to every later attempt
// with the same key: type, message, details and retryability are kept.
// Without it (the default), only errors marked with guard.Definite are
// stored; every other error releases the record so that a retry runs the
// activity again. guard.WithDefiniteErrors given with [WithGuardOptions]
// replaces it.
func WithStoredFailures() Option {
	return optionFunc(func(c *config) { c.storeFailures = true })
}

// WithMaxRetryDelay caps the next-retry delay given with
// [ErrorTypeInProgress]. By default the delay runs to just after the
// holder's lease can have lapsed (its end plus the guard's clock skew),
// when a retry is certain to replay or take over; a
// shorter cap replays sooner when the holder finishes early, at the cost
// of more attempts and store calls while it runs.
func WithMaxRetryDelay(d time.Duration) Option {
	return optionFunc(func(c *config) { c.maxRetryDelay = max(d, 0) })
}

// WithGuardOptions gives this activity guard options, as they are:
// guard.WithKeyPath, guard.WithPayloadValidation, guard.WithTTL,
// guard.WithLease, guard.WithWait, guard.WithRequireKey, … They override
// the defaults given to guard.New, which override the activity package's
// own (a lease of the heartbeat timeout); guard.WithCodec and
// adapt.WithErrorCodec given here replace the Temporal encodings of
// results and errors. guard.WithKey and adapt.WithClaimToken name one call
// and are refused (a workflow gives an activity its key with
// workflow.ContextWithKey).
func WithGuardOptions(opts ...guard.CallOption) Option {
	return optionFunc(func(c *config) { c.guardOpts = append(c.guardOpts, opts...) })
}

// WithBatchOptions adds batch options for [DoBatch]: guard.WithConcurrency
// and guard.WithItemKey. Only DoBatch takes them: [Wrap] and
// [Interceptor] refuse them, as they refuse any invalid option, by
// panicking when the worker is built. DoBatch sets adapt.WithResume,
// guard.WithStopOnError and adapt.WithItemDone itself.
func WithBatchOptions(opts ...guard.BatchOption) Option {
	return optionFunc(func(c *config) { c.batchOpts = append(c.batchOpts, opts...) })
}
