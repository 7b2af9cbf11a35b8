package nexusguard

import (
	"context"
	"errors"
	"slices"

	"github.com/nexus-rpc/sdk-go/nexus"
	"go.opentelemetry.io/otel/attribute"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporalnexus"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
)

// Attributes of the guard's idemguard.execute span.
const (
	serviceKey   = attribute.Key("temporal.nexus.service")
	operationKey = attribute.Key("temporal.nexus.operation")
	requestIDKey = attribute.Key("temporal.nexus.request_id")
)

// operation is what every start of one guarded operation needs.
type operation struct {
	g          *guard.Guard
	dc         converter.DataConverter // nil: the SDK's default
	keyOnInput bool                    // a key path is set: the input keys, not the request ID
	call       []guard.CallOption      // the package's defaults and the user's options, checked
}

// newOperation checks the options of a guarded operation.
func newOperation(g *guard.Guard, opts []Option) (*operation, error) {
	if g == nil {
		return nil, errors.New("idemguard/nexusguard: nil guard")
	}
	var c config
	for _, o := range opts {
		if o != nil {
			o.apply(&c)
		}
	}
	// The package's defaults give way to the guard's and to the user's.
	call := []guard.CallOption{adapt.WithDefaults(
		guard.WithRequireKey(true),
		guard.WithPayloadValidation("@"),
		guard.WithDefiniteErrors(isDefinite),
	)}
	call = append(call, c.guardOpts...)
	// A key or a claim token would name every start of the operation; the
	// codecs are the package's: the user's are refused.
	probe := append(slices.Clip(call), adapt.Fixed(guard.WithKey("probe"), adapt.WithClaimToken("probe"),
		guard.WithCodec(adapt.JSON), adapt.WithErrorCodec(adapt.MessageErrors)))
	s, err := adapt.Settings(g, probe...)
	if err != nil {
		return nil, err
	}
	return &operation{g: g, dc: c.dc, keyOnInput: s.KeyPath != "", call: slices.Clip(call)}, nil
}

// errNoHandlerContext is the error of a guarded start called without a
// Nexus handler context, which names the operation its key is scoped by.
func errNoHandlerContext() error {
	return &nexus.HandlerError{
		Type:          nexus.HandlerErrorTypeInternal,
		Message:       "idemguard: a guarded Nexus start needs the handler context the Nexus machinery gives it",
		RetryBehavior: nexus.HandlerErrorRetryBehaviorNonRetryable,
	}
}

// interceptedKey marks the context of a start the worker interceptor
// guards, with its request ID.
type interceptedKey struct{ service, operation string }

// start runs one start request of o, for input with options, guarded:
// begin starts the operation and returns its result and what is recorded
// of it (see valueOf). It returns begin's result when this call ran begin
// (ran), else the recorded value as a replay decodes it (decode) or a
// concurrent start in this process shared it. The error is the one the
// Nexus machinery should get (see nexusError).
func start[R any](ctx context.Context, o *operation, input any, options nexus.StartOperationOptions, decode decoder, begin func(context.Context) (R, any, error)) (res R, v any, ran bool, err error) {
	if !nexus.IsHandlerContext(ctx) {
		return res, nil, false, errNoHandlerContext()
	}
	info := nexus.ExtractHandlerInfo(ctx)
	if id, ok := ctx.Value(interceptedKey{info.Service, info.Operation}).(string); ok && id == options.RequestID {
		// Guarded both ways: the interceptor guards this start already,
		// and a second claim would find its own claim in progress.
		r, v, err := begin(ctx)
		return r, v, true, err
	}
	dc := o.converter(ctx, info)
	st := &startState{requestID: options.RequestID}
	opts := make([]guard.CallOption, 0, len(o.call)+3)
	opts = append(opts, o.call...)
	opts = append(opts,
		adapt.Fixed(guard.WithCodec(startCodec{dc: dc, decode: decode, st: st}), adapt.WithErrorCodec(newErrorCodec(dc))),
		adapt.WithSpanAttributes(serviceKey.String(info.Service), operationKey.String(info.Operation), requestIDKey.String(options.RequestID)))
	if !o.keyOnInput {
		opts = append(opts, guard.WithKey(options.RequestID))
	}
	v, out, err := adapt.Execute(ctx, o.g, info.Service+"/"+info.Operation, input, func(ctx context.Context) (any, error) {
		r, val, err := begin(ctx)
		res = r
		if err == nil {
			st.links = nexus.HandlerLinks(ctx)
		}
		return val, err
	}, opts...)
	if err != nil {
		return res, nil, false, nexusError(err, out, o.g.ClockSkew())
	}
	if out != guard.OutcomeReplayed && out != guard.OutcomeShared {
		return res, v, true, nil
	}
	if _, async := v.(*nexus.HandlerStartOperationResultAsync); async && o.keyOnInput {
		// The callback that reports the workflow's outcome is the
		// operation's that started it: another operation would wait for
		// ever.
		switch {
		case out == guard.OutcomeShared:
			return res, nil, false, startedElsewhere(true)
		case st.recordedBy != options.RequestID:
			return res, nil, false, startedElsewhere(false)
		}
	}
	if len(st.links) > 0 {
		nexus.AddHandlerLinks(ctx, st.links...)
	}
	return res, v, false, nil
}

// converter returns the data converter of o's records as the worker
// applies its own to the operation's payloads: with the operation's
// serialization context, and bound to ctx if it is context-aware.
func (o *operation) converter(ctx context.Context, info nexus.HandlerInfo) converter.DataConverter {
	dc := o.dc
	if dc == nil {
		dc = converter.GetDefaultDataConverter()
	}
	sc := converter.NexusSerializationContext{Service: info.Service, Operation: info.Operation}
	if temporalnexus.IsNexusOperation(ctx) {
		sc.Endpoint = temporalnexus.GetOperationInfo(ctx).Endpoint
	}
	dc = converter.WithDataConverterSerializationContext(dc, sc)
	if ca, ok := dc.(converter.ContextAware); ok {
		return ca.WithContext(ctx)
	}
	return dc
}
