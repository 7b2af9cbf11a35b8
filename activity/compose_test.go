package activity_test

import (
	"context"
	"testing"

	tactivity "go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"

	"github.com/idemguard/idemguard/activity"
	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/guard/guardtest"
	"github.com/idemguard/idemguard/internal/testing/temporaltest"
	"github.com/idemguard/idemguard/internal/testing/teststores"
)

// composeRequest is the composition suite's activity input: the caller's
// key and the payload.
type composeRequest struct {
	Key     string `json:"key"`
	Payload string `json:"payload"`
}

// composeOptions key the suite's calls and validate their payload, given
// to guard.New: the suite's defaults must reach the activity.
var composeOptions = []guard.Option{guard.WithKeyPath("key"), guard.WithPayloadValidation("payload")}

// runComposeActivity runs fn as the activity "Compose" in a test activity
// environment with the given interceptors, and returns its result.
func runComposeActivity(t *testing.T, fn any, interceptors []interceptor.WorkerInterceptor, in composeRequest) (string, error) {
	var s testsuite.WorkflowTestSuite
	s.SetLogger(temporaltest.Logger())
	env := s.NewTestActivityEnvironment()
	env.SetWorkerOptions(worker.Options{Interceptors: interceptors})
	env.RegisterActivityWithOptions(fn, tactivity.RegisterOptions{Name: "Compose"})
	v, err := env.ExecuteActivity("Compose", in)
	if err != nil {
		return "", temporaltest.GuardError(err)
	}
	var out string
	if err := v.Get(&out); err != nil {
		t.Fatalf("decoding the result: %v", err)
	}
	return out, nil
}

// A guarded activity joins the composition suite on every store, guarded
// by activity.Wrap and by the interceptor's policy: a guard.Step inside
// it, first call and replay, an error after the step and Temporal's retry,
// a payload reused after the step or the completion
// (IdempotencyPayloadMismatch), a duplicate while the first runs
// (IdempotencyInProgress, or the first's result after waiting), paused
// holders taken over (the zombie's IdempotencyLeaseLost), and the disabled
// guard's pass-through.
func TestCompositionActivity(t *testing.T) {
	for _, tc := range []struct {
		name        string
		interceptor bool
	}{
		{"activity.Wrap", false},
		{"activity.Interceptor", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			guardtest.RunComposition(t, guardtest.EntryPoint{
				Name:         tc.name,
				GuardOptions: composeOptions,
				Run: func(ctx context.Context, t *testing.T, g *guard.Guard, call guardtest.Call, effect guardtest.Effect, body guardtest.Body) (string, error) {
					fn := func(ctx context.Context, in composeRequest) (string, error) { return body(ctx, effect) }
					in := composeRequest{call.Key, call.Payload}
					if tc.interceptor {
						return runComposeActivity(t, fn, []interceptor.WorkerInterceptor{
							activity.Must(activity.Interceptor(g, activity.Policy{Activity: "Compose"})),
						}, in)
					}
					return runComposeActivity(t, activity.Must(activity.Wrap(g, fn)), nil, in)
				},
			}, guardtest.Stores(teststores.All()))
		})
	}
}
