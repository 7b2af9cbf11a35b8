package lambdaguard

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/leasecap"
)

// Wrap returns handler guarded by g, as a lambda.Handler to give
// lambda.Start:
//
//	lambda.Start(lambdaguard.Must(lambdaguard.Wrap(g, handleOrder,
//		lambdaguard.WithGuardOptions(guard.WithKeyPath("powertools_json(body).order_id")))))
//
// handler is any function lambda.Start accepts — func(), func(In),
// func(context.Context), func(context.Context, In), each returning
// nothing, an error, or (Out, error) — or a lambda.Handler. aws-lambda-go
// decodes the event and encodes the answer as it does without the guard
// (give its JSON options with [WithLambdaOptions]).
//
// Each invocation is one guarded call within the wrapper's scope
// ([WithScope]; the function's name by default), keyed by the event: by
// the whole event, or by what guard.WithKeyPath selects from it, a
// JMESPath expression over the event as it arrived (Powertools'
// event_key_jmespath, with powertools_json, powertools_base64 and
// powertools_base64_gzip). The first invocation with a key runs the
// handler and stores its answer, the JSON it returned, byte for byte; a
// later one replays it without running the handler, for the record's TTL
// (guard.WithTTL, default an hour).
//
// The claim holds for the invocation's remaining time, never past its
// deadline, so that the claim of an invocation that timed out (and whose
// execution environment was stopped) lapses at once, as Powertools'
// in-progress expiry does: a retry then runs the handler again, and
// replays the guard.Step calls that completed in the dead invocation. A
// duplicate that arrives while the first invocation runs gets
// [IdempotencyAlreadyInProgressError] (guard.WithWait makes it wait
// instead, up to its own deadline).
//
// A handler error releases the key, so that Lambda's retry runs the
// handler again, unless the error is definite (guard.Definite): it is
// stored, and replayed with the same errorType and errorMessage. The
// guard's own refusals are reported as the errors of this package, named
// as Powertools names them, and an answer the guard could not record
// because the invocation's claim was taken over as
// [IdempotencyLeaseLostError].
//
// With IDEMGUARD_DISABLED the handler runs unguarded, and guard.Step in
// it runs its function unguarded.
func Wrap(g *guard.Guard, handler any, opts ...Option) (lambda.Handler, error) {
	c, err := newConfig(g, opts, handlerWrapper)
	if err != nil {
		return nil, err
	}
	if err := validateHandler(handler); err != nil {
		return nil, fmt.Errorf("%w: lambdaguard: %w", guard.ErrInvalidOption, err)
	}
	call := make([]guard.CallOption, 0, len(c.guardOpts)+2)
	call = append(call, guard.WithDefaults(guard.WithErrorCodec(invokeErrors{})))
	call = append(call, c.guardOpts...)
	call = append(call, guard.Fixed(guard.WithCodec(rawJSON{})))
	if err := c.check(g, call); err != nil {
		return nil, err
	}
	return &guardedHandler{g: g, scope: c.scope, call: call, inner: lambda.NewHandlerWithOptions(handler, c.lambdaOpts...)}, nil
}

// guardedHandler is the handler [Wrap] returns.
type guardedHandler struct {
	g     *guard.Guard
	scope string
	call  []guard.CallOption
	inner lambda.Handler // aws-lambda-go's handler: decodes, calls, encodes
}

// Invoke runs one invocation with the event payload.
func (h *guardedHandler) Invoke(ctx context.Context, payload []byte) ([]byte, error) {
	out, err := guard.Do(leasecap.AtDeadline(ctx), h.g, h.scope, json.RawMessage(payload), func(ctx context.Context) ([]byte, error) {
		b, err := h.inner.Invoke(ctx, payload)
		if err != nil {
			return nil, err
		}
		// The runtime's handler hands back a pooled buffer's bytes.
		return bytes.Clone(b), nil
	}, h.call...)
	return out, lambdaError(err)
}

// rawJSON is the codec of a handler's answer: the bytes aws-lambda-go
// encoded, stored and replayed as they are (as the JSON text Powertools
// stores, when they are JSON).
type rawJSON struct{}

func (rawJSON) Marshal(v any) ([]byte, error) {
	b, ok := v.([]byte)
	if !ok {
		return nil, fmt.Errorf("lambdaguard: cannot store a %T", v)
	}
	return b, nil
}

func (rawJSON) Unmarshal(data []byte, v any) error {
	p, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("lambdaguard: cannot replay into a %T", v)
	}
	*p = bytes.Clone(data)
	return nil
}

var (
	contextType = reflect.TypeFor[context.Context]()
	errorIface  = reflect.TypeFor[error]()
	handlerType = reflect.TypeFor[lambda.Handler]()
)

// validateHandler checks handler against the rules lambda.Start documents,
// as aws-lambda-go checks them when it builds the handler (where a
// mistake only shows as an error at every invocation).
func validateHandler(handler any) error {
	if handler == nil {
		return errors.New("nil handler")
	}
	t := reflect.TypeOf(handler)
	if t.Implements(handlerType) {
		return nil
	}
	if t.Kind() != reflect.Func {
		return fmt.Errorf("handler is a %v, not a function", t)
	}
	switch t.NumIn() {
	case 0:
	case 1:
		if in := t.In(0); in.Kind() == reflect.Interface && in.NumMethod() > 0 && in != contextType {
			return fmt.Errorf("handler takes an interface, but it is not context.Context: %v", in)
		}
	case 2:
		if t.In(0) != contextType {
			return fmt.Errorf("handler takes two arguments, but the first is not context.Context: %v", t.In(0))
		}
	default:
		return fmt.Errorf("handler takes %d arguments; at most two (context.Context, the event)", t.NumIn())
	}
	switch t.NumOut() {
	case 0:
	case 1:
		if !t.Out(0).Implements(errorIface) {
			return fmt.Errorf("handler returns a single value, but it does not implement error: %v", t.Out(0))
		}
	case 2:
		if !t.Out(1).Implements(errorIface) {
			return fmt.Errorf("handler returns two values, but the second does not implement error: %v", t.Out(1))
		}
	default:
		return fmt.Errorf("handler returns %d values; at most two (the answer, an error)", t.NumOut())
	}
	return nil
}
