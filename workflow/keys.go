package workflow

import (
	"encoding/json"

	tworkflow "go.temporal.io/sdk/workflow"

	"github.com/idemguard/idemguard/internal/wfkey"
)

// ContextWithKey returns a copy of ctx whose activities (and local
// activities) carry key as their explicit idempotency key: the worker
// interceptor (activity.Interceptor) stamps it into each activity's
// header, and the guarded activity keys on it (within its activity type's
// scope) instead of on its input. Use a key that is the same on every
// replay of the workflow: a value from the workflow's input, or [StepKey].
//
// ContextWithKey panics if the workflow does not run under
// activity.Interceptor, because the key would be silently dropped and
// the activity keyed on its input.
func ContextWithKey(ctx tworkflow.Context, key string) tworkflow.Context {
	if !wfkey.Installed(ctx) {
		panic("idemguard/workflow: ContextWithKey needs activity.Interceptor in the worker's interceptors")
	}
	return wfkey.With(ctx, key)
}

// StepKey returns a deterministic key for a step of the running workflow:
// derived from the namespace, the workflow ID and step, a stable name the
// code gives the step ("charge", or "charge-" + item ID inside a loop). It
// does not depend on the order in which activities are scheduled, so,
// unlike activity IDs, it stays the same when a new version of the workflow
// inserts an activity before the step. Runs that share a workflow ID (a
// retried or continued-as-new workflow, or one started again with the same
// ID) share step keys, and so replay each other's step results.
//
//	ctx = workflow.ContextWithKey(ctx, workflow.StepKey(ctx, "charge"))
//	err := tworkflow.ExecuteActivity(ctx, ChargeCard, order).Get(ctx, &receipt)
func StepKey(ctx tworkflow.Context, step string) string {
	info := tworkflow.GetInfo(ctx)
	b, _ := json.Marshal([]string{info.Namespace, info.WorkflowExecution.ID, step})
	return string(b)
}
