package nexusguard_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nexus-rpc/sdk-go/nexus"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"

	"github.com/idemguard/idemguard/activity"
	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/guard/guardtest"
	"github.com/idemguard/idemguard/internal/testing/temporaltest"
	"github.com/idemguard/idemguard/internal/testing/teststores"
	"github.com/idemguard/idemguard/nexusguard"
)

// composeInput is the composition suite's operation input: its payload.
// The key is the request ID, the suite's key.
type composeInput struct {
	Payload string `json:"payload"`
}

// A guarded Nexus operation joins the composition suite on every store,
// through the wrapper and through the worker interceptor: a guard.Step
// inside its handler, first start and resent start, an error after the
// step and the caller's retry, another input under the request ID after
// the step or the completion (BAD_REQUEST), a duplicate while the first
// runs (UNAVAILABLE, or the first's result after waiting), paused holders
// taken over (the zombie's INTERNAL, its lease lost), and the disabled
// guard's pass-through. The suite's guards carry no option of this entry
// point: the request ID keys, and payload validation of the whole input
// is the adapter's default.
func TestCompositionNexus(t *testing.T) {
	for _, tc := range []struct {
		name        string
		interceptor bool
	}{
		{"nexusguard.Wrap", false},
		{"activity.Interceptor", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			guardtest.RunComposition(t, guardtest.EntryPoint{
				Name: tc.name,
				Run: func(ctx context.Context, t *testing.T, g *guard.Guard, call guardtest.Call, effect guardtest.Effect, body guardtest.Body) (string, error) {
					handler := func(ctx context.Context, _ composeInput, _ nexus.StartOperationOptions) (string, error) {
						return body(ctx, effect)
					}
					ctx = nexus.WithHandlerContext(ctx, nexus.HandlerInfo{Service: service, Operation: operation, Header: nexus.Header{}})
					in := composeInput{call.Payload}
					if !tc.interceptor {
						v, err := nexusguard.MustWrap(g, handler)(ctx, in, start(call.Key))
						if err != nil {
							return "", composeError(err)
						}
						return v, nil
					}
					wi := activity.Must(activity.Interceptor(nil, nexusguard.MustPolicy(g, service, operation)))
					res, err := wi.InterceptNexusOperation(ctx, &handlerInbound{start: func(ctx context.Context, in interceptor.NexusStartOperationInput) (nexus.HandlerStartOperationResult[any], error) {
						v, err := handler(ctx, in.Input.(composeInput), in.Options)
						if err != nil {
							return nil, err
						}
						return &nexus.HandlerStartOperationResultSync[string]{Value: v}, nil
					}}).StartOperation(ctx, interceptor.NexusStartOperationInput{Input: in, Options: start(call.Key)})
					if err != nil {
						return "", composeError(err)
					}
					return resultString(t, res), nil
				},
			}, guardtest.Stores(teststores.All()))
		})
	}
}

// composeError returns the error of a start, wrapping the guard error its
// handler error stands for, as a caller tells them apart: the Temporal
// application error type in the handler error's cause chain, which the
// Nexus SDK keeps (a caller workflow gets the handler error, and its
// cause, inside the operation's error), read by temporaltest.GuardError,
// and it must agree with the handler error's type and retry behaviour; a
// cause that disagrees stands for nothing. Where the cause is lost (a
// handler error without an application error in its chain) the type alone
// is not enough, and nothing is mapped: UNAVAILABLE is also a store that
// failed, BAD_REQUEST also a missing key or an input that cannot be keyed,
// and a retryable INTERNAL also any plain error of the handler's.
func composeError(err error) error {
	var he *nexus.HandlerError
	if !errors.As(err, &he) {
		return err
	}
	mapped := temporaltest.GuardError(he.Cause) // nil when the cause is lost
	for _, want := range []struct {
		sentinel error
		typ      nexus.HandlerErrorType
		retry    bool
	}{
		{guard.ErrInProgress, nexus.HandlerErrorTypeUnavailable, true},
		{guard.ErrPayloadMismatch, nexus.HandlerErrorTypeBadRequest, false},
		{guard.ErrLeaseLost, nexus.HandlerErrorTypeInternal, true},
	} {
		if errors.Is(mapped, want.sentinel) && he.Type == want.typ && he.Retryable() == want.retry {
			return fmt.Errorf("%w: %w", err, want.sentinel)
		}
	}
	return err
}

// resultString is the string an intercepted sync start returned, the
// handler's own or a replayed converter.RawValue.
func resultString(t *testing.T, res nexus.HandlerStartOperationResult[any]) string {
	t.Helper()
	switch r := res.(type) {
	case *nexus.HandlerStartOperationResultSync[string]:
		return r.Value
	case *nexus.HandlerStartOperationResultSync[any]:
		switch v := r.Value.(type) {
		case string:
			return v // shared with a concurrent start in this process
		case converter.RawValue:
			var s string
			if err := converter.GetDefaultDataConverter().FromPayload(v.Payload(), &s); err != nil {
				t.Fatal(err)
			}
			return s
		}
	}
	t.Fatalf("result %T, want a sync string", res)
	return ""
}
