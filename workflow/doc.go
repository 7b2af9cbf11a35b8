// Package workflow is the workflow side of idemguard's Temporal integration:
// explicit keys that workflows send to guarded activities, and whole
// workflows guarded by a key from their input.
//
// # Keys from the workflow
//
// An activity guarded with idemguard's activity package keys on its input by
// default. A workflow can give it an explicit key instead with
// [ContextWithKey]; idemguard's worker interceptor (activity.Interceptor),
// registered on the workers, stamps the key into the activity's header and
// hands it to the guarded activity.
// [StepKey] derives a key from the workflow ID and a stable step name, which
// survives code changes that shift activity IDs:
//
//	ctx = workflow.ContextWithKey(ctx, workflow.StepKey(ctx, "charge"))
//	err := tworkflow.ExecuteActivity(ctx, ChargeCard, order).Get(ctx, &receipt)
//
// Keys must be deterministic (the interceptor runs again on replay): derive
// them from the workflow's input or info, never from time or randomness.
//
// # Guarded workflows
//
// [Wrap] wraps a workflow function so that its body runs at most once per
// key from its input; a second workflow with the same key, whatever its
// workflow ID, returns the stored result. It talks to the store only through
// local activities, so it stays deterministic under replay. Guard options
// (the key path, TTL, lease, wait mode, …) are the guard package's, given to
// guard.New or with [WithGuardOptions]:
//
//	guarded := workflow.MustWrap(g, OrderWorkflow, workflow.WithGuardOptions(guard.WithKeyPath("order_id")))
//	workflow.Register(w, OrderWorkflow, guarded)
//
// This package's names clash with the SDK's workflow package; import one of
// them under another name, for example tworkflow "go.temporal.io/sdk/workflow".
package workflow
