package nexusguard

import (
	"go.temporal.io/sdk/converter"

	"github.com/idemguard/idemguard/guard"
)

// Option configures a guarded Nexus operation ([Wrap], [WrapOperation],
// [Policy]). Guard options (a key path, payload validation, TTL, lease,
// wait mode, …) are not declared here: give them to guard.New as the
// defaults of every call, or to one operation with [WithGuardOptions].
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	dc        converter.DataConverter // nil = the SDK's default
	guardOpts []guard.CallOption
}

// WithGuardOptions gives this operation guard options, as they are:
// guard.WithKeyPath (key on the input instead of the request ID),
// guard.WithPayloadValidation, guard.WithTTL, guard.WithLease,
// guard.WithWait, guard.WithDefiniteErrors, guard.WithResultFilter, … They
// override the defaults given to guard.New, which override the package's
// own (a required key, payload validation of the whole input, operation
// errors definite). guard.WithKey and adapt.WithClaimToken name one call,
// and guard.WithCodec and adapt.WithErrorCodec are the package's own: they
// are refused.
func WithGuardOptions(opts ...guard.CallOption) Option {
	return optionFunc(func(c *config) { c.guardOpts = append(c.guardOpts, opts...) })
}

// WithDataConverter sets the data converter that encodes stored results
// and the details of stored operation errors: give the one passed to
// client.Options.DataConverter, so that its payload codecs (encryption,
// compression) apply to what the store holds too. Nil means the SDK's
// default converter. What reaches the caller is encoded by the worker's
// own data converter in either case.
func WithDataConverter(dc converter.DataConverter) Option {
	return optionFunc(func(c *config) { c.dc = dc })
}
