package workflow_test

import (
	"context"
	"testing"
	"time"

	tactivity "go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	tworkflow "go.temporal.io/sdk/workflow"

	"github.com/idemguard/idemguard/activity"
	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/guard/guardtest"
	"github.com/idemguard/idemguard/internal/testing/temporaltest"
	"github.com/idemguard/idemguard/internal/testing/teststores"
	"github.com/idemguard/idemguard/workflow"
)

// composeRequest is the composition suite's workflow input: the caller's
// key and the payload.
type composeRequest struct {
	Key     string `json:"key"`
	Payload string `json:"payload"`
}

// A guarded workflow joins the composition suite on every store, on the dev
// server: the workflow (workflow.Wrap) runs one guarded activity
// (activity.Wrap) whose function has a guard.Step inside. A second
// workflow with the key replays the first one's result without running
// its body; after an error the workflow's claim is released and the next
// workflow replays the step; a key reused with another payload is refused
// at the step, and one reused after the completion is refused; a second
// workflow while the first runs fails in progress, or waits for its
// result; a paused holder's workflow and activity are taken over, and a
// zombie holder's completions are fenced out; a disabled guard passes
// every workflow through. The suite's options, given to guard.New, must
// reach both adapters.
func TestCompositionWorkflow(t *testing.T) {
	c := temporaltest.Client(t, client.Options{})
	guardtest.RunComposition(t, guardtest.EntryPoint{
		Name:         "workflow.Wrap",
		GuardOptions: []guard.Option{guard.WithKeyPath("key"), guard.WithPayloadValidation("payload")},
		Run: func(ctx context.Context, t *testing.T, g *guard.Guard, call guardtest.Call, effect guardtest.Effect, body guardtest.Body) (string, error) {
			step := func(ctx context.Context, in composeRequest) (string, error) { return body(ctx, effect) }
			wf := func(ctx tworkflow.Context, in composeRequest) (string, error) {
				actx := tworkflow.WithActivityOptions(ctx, tworkflow.ActivityOptions{
					StartToCloseTimeout: time.Minute,
					RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 1},
				})
				var out string
				err := tworkflow.ExecuteActivity(actx, "ComposeStep", in).Get(ctx, &out)
				return out, err
			}
			tq := temporaltest.Name(t, "compose")
			temporaltest.Worker(t, c, tq, worker.Options{Interceptors: []interceptor.WorkerInterceptor{activity.Must(activity.Interceptor(nil))}}, func(r worker.Registry) {
				r.RegisterWorkflowWithOptions(workflow.MustWrap(g, wf), tworkflow.RegisterOptions{Name: "Compose"})
				r.RegisterActivityWithOptions(activity.Must(activity.Wrap(g, step)), tactivity.RegisterOptions{Name: "ComposeStep"})
			})
			var out string
			err := temporaltest.Run(t, c, tq, temporaltest.Name(t, "wf"), 90*time.Second, &out, "Compose", composeRequest{call.Key, call.Payload})
			return out, temporaltest.GuardError(err)
		},
	}, guardtest.Stores(teststores.All()))
}
