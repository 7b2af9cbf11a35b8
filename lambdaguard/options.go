package lambdaguard

import (
	"fmt"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/httpguard"
	"github.com/idemguard/idemguard/internal/adapt"
)

// FunctionNameEnv is the environment variable the Lambda runtime sets to
// the function's name: the default scope of a wrapper's keys.
const FunctionNameEnv = "AWS_LAMBDA_FUNCTION_NAME"

// Option configures a wrapper ([Wrap], [WrapSQS], [WrapAPIGateway], …).
// Guard options (the key path, payload validation, TTL, lease, wait mode)
// are not declared here: give them to guard.New as the defaults of every
// call, or to one wrapper with [WithGuardOptions].
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	scope      string
	guardOpts  []guard.CallOption
	batchOpts  []guard.BatchOption
	lambdaOpts []lambda.Option
	httpOpts   []httpguard.Option
	skipGroup  bool
}

// wrapper names the kind of wrapper options are given to, so that an
// option that has no effect on it is refused rather than ignored.
type wrapper uint8

const (
	handlerWrapper wrapper = iota
	batchWrapper
	sqsWrapper
	httpWrapper
)

// newConfig applies opts and settles the scope: [WithScope], else the
// function's name from the Lambda environment. An option that has no
// effect on kind is an error.
func newConfig(g *guard.Guard, opts []Option, kind wrapper) (*config, error) {
	if g == nil {
		return nil, fmt.Errorf("%w: nil guard", guard.ErrInvalidOption)
	}
	c := &config{}
	for _, o := range opts {
		if o != nil {
			o.apply(c)
		}
	}
	switch {
	case len(c.lambdaOpts) > 0 && kind != handlerWrapper:
		return nil, invalid("WithLambdaOptions applies to Wrap only")
	case len(c.httpOpts) > 0 && kind != httpWrapper:
		return nil, invalid("WithHTTPOptions applies to WrapAPIGateway, WrapHTTPAPI and WrapFunctionURL only")
	case len(c.batchOpts) > 0 && kind != batchWrapper && kind != sqsWrapper:
		return nil, invalid("WithBatchOptions applies to WrapSQS, WrapKinesis and WrapDynamoDBStream only")
	case c.skipGroup && kind != sqsWrapper:
		return nil, invalid("WithSkipGroupOnError applies to WrapSQS only")
	}
	if c.scope == "" {
		c.scope = os.Getenv(FunctionNameEnv)
	}
	if c.scope == "" {
		return nil, fmt.Errorf("%w: no scope: outside Lambda (no %s), name one with lambdaguard.WithScope", guard.ErrInvalidOption, FunctionNameEnv)
	}
	return c, nil
}

// check reports what the guard would report on every call for call, and a
// key or claim token among the user's options: they name one call, and
// would give every invocation one key or one claimant.
func (c *config) check(g *guard.Guard, call []guard.CallOption) error {
	probe := append(append([]guard.CallOption(nil), call...), adapt.Fixed(guard.WithKey("probe"), adapt.WithClaimToken("probe")))
	if _, err := adapt.Settings(g, probe...); err != nil {
		return fmt.Errorf("lambdaguard: %w", err)
	}
	return nil
}

// WithScope sets the scope of the wrapper's keys (default: the function's
// name, from the AWS_LAMBDA_FUNCTION_NAME environment variable the Lambda
// runtime sets). Two functions that share a table never share keys as
// long as their scopes differ; a function with several wrappers (a
// handler and a batch of its own, say) gives each its own.
func WithScope(scope string) Option {
	return optionFunc(func(c *config) { c.scope = scope })
}

// WithGuardOptions gives the wrapper's calls guard options, as they are:
// guard.WithKeyPath (for a handler, a JMESPath over the event, like
// Powertools' event_key_jmespath; for a batch, over one record),
// guard.WithPayloadValidation, guard.WithTTL, guard.WithLease,
// guard.WithWait, guard.WithRequireKey, guard.WithDefiniteErrors, … They
// override the defaults given to guard.New, which override the wrapper's
// own. guard.WithKey and adapt.WithClaimToken name one call and are
// refused, and so is guard.WithCodec for a handler, whose result is
// stored as the JSON the handler answered.
func WithGuardOptions(opts ...guard.CallOption) Option {
	return optionFunc(func(c *config) { c.guardOpts = append(c.guardOpts, opts...) })
}

// WithBatchOptions gives the batch wrappers ([WrapSQS], [WrapKinesis],
// [WrapDynamoDBStream]) batch options, such as guard.WithConcurrency for
// a standard SQS queue's records (default adapt.DefaultConcurrency).
// Ordered batches (a FIFO queue, a stream) run one record at a time
// whatever it says.
func WithBatchOptions(opts ...guard.BatchOption) Option {
	return optionFunc(func(c *config) { c.batchOpts = append(c.batchOpts, opts...) })
}

// WithLambdaOptions gives [Wrap] the aws-lambda-go handler options that
// shape how the event is decoded and the answer encoded
// (lambda.WithUseNumber, lambda.WithDisallowUnknownFields,
// lambda.WithSetEscapeHTML, lambda.WithSetIndent): the guarded handler
// decodes and encodes itself, so these must be given here, not to
// lambda.StartWithOptions (which keeps its own, such as
// lambda.WithEnableSIGTERM).
func WithLambdaOptions(opts ...lambda.Option) Option {
	return optionFunc(func(c *config) { c.lambdaOpts = append(c.lambdaOpts, opts...) })
}

// WithHTTPOptions gives the API Gateway and Function URL wrappers
// ([WrapAPIGateway], [WrapHTTPAPI], [WrapFunctionURL]) options of the
// HTTP middleware they run the request through: httpguard.WithStatusPolicy,
// httpguard.WithKeyHeader, httpguard.WithPrincipal,
// httpguard.WithMethods, …
func WithHTTPOptions(opts ...httpguard.Option) Option {
	return optionFunc(func(c *config) { c.httpOpts = append(c.httpOpts, opts...) })
}

// WithSkipGroupOnError makes [WrapSQS], on a FIFO queue, stop only the
// message group of a failed record (its later records are reported as
// failures without running) and go on with the other groups, as AWS
// Powertools' SqsFifoPartialProcessor does with skip_group_on_error. By
// default, as Powertools' default, processing stops at the first failure
// and every record after it is reported.
func WithSkipGroupOnError() Option {
	return optionFunc(func(c *config) { c.skipGroup = true })
}

func invalid(msg string) error {
	return fmt.Errorf("%w: lambdaguard: %s", guard.ErrInvalidOption, msg)
}
