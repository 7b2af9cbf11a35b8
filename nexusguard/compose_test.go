package nexusguard_test

import (
	"context"
	"testing"

	"github.com/nexus-rpc/sdk-go/nexus"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"

	"github.com/idemguard/idemguard/activity"
	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/guard/guardtest"
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
// the step, and a paused holder taken over. The suite's guards carry no
// option of this entry point: the request ID keys, and payload validation
// of the whole input is the adapter's default.
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
						return nexusguard.MustWrap(g, handler)(ctx, in, start(call.Key))
					}
					wi := activity.MustInterceptor(nil, nexusguard.MustPolicy(g, service, operation))
					res, err := wi.InterceptNexusOperation(ctx, &handlerInbound{start: func(ctx context.Context, in interceptor.NexusStartOperationInput) (nexus.HandlerStartOperationResult[any], error) {
						v, err := handler(ctx, in.Input.(composeInput), in.Options)
						if err != nil {
							return nil, err
						}
						return &nexus.HandlerStartOperationResultSync[string]{Value: v}, nil
					}}).StartOperation(ctx, interceptor.NexusStartOperationInput{Input: in, Options: start(call.Key)})
					if err != nil {
						return "", err
					}
					return resultString(t, res), nil
				},
			}, guardtest.Stores(teststores.All()))
		})
	}
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
