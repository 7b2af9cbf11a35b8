package workflow

import (
	"context"
	"encoding/json"

	"go.temporal.io/sdk/interceptor"
	tworkflow "go.temporal.io/sdk/workflow"

	"github.com/idemguard/idemguard/internal/temporalglue"
)

type keyCtxKey struct{}

type installedCtxKey struct{}

// WithKey returns a copy of ctx whose activities (and local activities) carry
// key as their explicit idempotency key: the interceptor from [NewInterceptor]
// stamps it into each activity's header, and the guarded activity keys on it
// (within its activity type's scope) instead of on its input. Use a key that
// is the same on every replay of the workflow: a value from the workflow's
// input, or [StepKey].
//
// WithKey panics if the workflow does not run under [NewInterceptor], because
// the key would be silently dropped and the activity keyed on its input.
func WithKey(ctx tworkflow.Context, key string) tworkflow.Context {
	if installed, _ := ctx.Value(installedCtxKey{}).(bool); !installed {
		panic("idemguard/workflow: WithKey needs workflow.NewInterceptor() in the worker's interceptors")
	}
	return tworkflow.WithValue(ctx, keyCtxKey{}, key)
}

// KeyFromContext returns the key set with [WithKey].
func KeyFromContext(ctx tworkflow.Context) (string, bool) {
	k, ok := ctx.Value(keyCtxKey{}).(string)
	return k, ok && k != ""
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
//	ctx = workflow.WithKey(ctx, workflow.StepKey(ctx, "charge"))
//	err := tworkflow.ExecuteActivity(ctx, ChargeCard, order).Get(ctx, &receipt)
func StepKey(ctx tworkflow.Context, step string) string {
	info := tworkflow.GetInfo(ctx)
	b, _ := json.Marshal([]string{info.Namespace, info.WorkflowExecution.ID, step})
	return string(b)
}

// NewInterceptor returns the worker interceptor that carries explicit keys
// from workflows to activities. On the workflow side it stamps the key set
// with [WithKey] into the header of every activity and local activity
// scheduled with that context; on the activity side it hands the stamped
// key to activities guarded with idemguard's activity.Guard. Register it on
// every worker that runs guarded workflows or activities:
//
//	worker.Options{Interceptors: []interceptor.WorkerInterceptor{workflow.NewInterceptor()}}
//
// (activity.NewInterceptor also hands keys on, so a worker that has it needs
// this one only for its workflows.) Like activity.NewInterceptor, it turns
// guard.ErrNotInCall returned by an unguarded activity (guard.Step outside
// a guarded call) into a non-retryable application error of type
// activity.ErrorTypeNotInCall, so that Temporal does not retry a
// programming error.
func NewInterceptor() interceptor.WorkerInterceptor {
	return &workerInterceptor{}
}

type workerInterceptor struct {
	interceptor.WorkerInterceptorBase
}

func (w *workerInterceptor) InterceptWorkflow(ctx tworkflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	i := &workflowInbound{}
	i.Next = next
	return i
}

func (w *workerInterceptor) InterceptActivity(ctx context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	a := &activityInbound{}
	a.Next = next
	return a
}

type workflowInbound struct {
	interceptor.WorkflowInboundInterceptorBase
}

func (i *workflowInbound) Init(outbound interceptor.WorkflowOutboundInterceptor) error {
	o := &workflowOutbound{}
	o.Next = outbound
	return i.Next.Init(o)
}

func (i *workflowInbound) ExecuteWorkflow(ctx tworkflow.Context, in *interceptor.ExecuteWorkflowInput) (any, error) {
	return i.Next.ExecuteWorkflow(tworkflow.WithValue(ctx, installedCtxKey{}, true), in)
}

func (i *workflowInbound) ExecuteUpdate(ctx tworkflow.Context, in *interceptor.UpdateInput) (any, error) {
	return i.Next.ExecuteUpdate(tworkflow.WithValue(ctx, installedCtxKey{}, true), in)
}

type workflowOutbound struct {
	interceptor.WorkflowOutboundInterceptorBase
}

func (o *workflowOutbound) ExecuteActivity(ctx tworkflow.Context, activityType string, args ...any) tworkflow.Future {
	if err := stamp(ctx); err != nil {
		return failed(ctx, err)
	}
	return o.Next.ExecuteActivity(ctx, activityType, args...)
}

func (o *workflowOutbound) ExecuteLocalActivity(ctx tworkflow.Context, activityType string, args ...any) tworkflow.Future {
	if err := stamp(ctx); err != nil {
		return failed(ctx, err)
	}
	return o.Next.ExecuteLocalActivity(ctx, activityType, args...)
}

// stamp writes the key of ctx, if any, into the header of the activity being
// scheduled with ctx.
func stamp(ctx tworkflow.Context) error {
	key, ok := KeyFromContext(ctx)
	if !ok {
		return nil
	}
	header := interceptor.WorkflowHeader(ctx)
	if header == nil {
		return nil
	}
	p, err := temporalglue.EncodeKeyHeader(key)
	if err != nil {
		return err
	}
	header[temporalglue.KeyHeader] = p
	return nil
}

func failed(ctx tworkflow.Context, err error) tworkflow.Future {
	f, s := tworkflow.NewFuture(ctx)
	s.SetError(err)
	return f
}

type activityInbound struct {
	interceptor.ActivityInboundInterceptorBase
}

func (a *activityInbound) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
	ctx, err := temporalglue.KeyHeaderToContext(ctx)
	if err != nil {
		return nil, err
	}
	v, err := a.Next.ExecuteActivity(ctx, in)
	return v, temporalglue.UnguardedError(err)
}
