package activity

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"slices"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	tactivity "go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/worker"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/internal/telemetry"
)

// Wrap returns an activity function with fn's signature that runs fn at
// most once per idempotency key (see the package documentation for keys,
// leases, results and errors) and otherwise returns the result recorded by
// the call that ran it. Register it under fn's activity type name with
// [Register].
//
// Called directly from inside another guarded activity, rather than
// scheduled by a workflow, the returned function is a guarded call of its
// own: its scope is fn's name ([Name]) and its key its own input, never the
// enclosing activity's key, so the same charge made from two activities (or
// scheduled on its own) runs once.
//
// Wrap reports an invalid option (a JMESPath expression that does not
// compile, for example) or a nil guard as an error; [Must] panics
// instead, as worker.RegisterActivity panics on an invalid function, so
// that the mistake shows when the worker starts.
func Wrap[In, Out any](g *guard.Guard, fn func(context.Context, In) (Out, error), opts ...Option) (func(context.Context, In) (Out, error), error) {
	r, err := newRunner(g, fn, opts)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, in In) (Out, error) {
		return run(ctx, r, in, true, func(ctx context.Context) (Out, error) { return fn(ctx, in) })
	}, nil
}

// WrapNoInput is [Wrap] for an activity without input. Unless the workflow
// stamps a key, it is keyed by execution scope ([WithExecutionScope]).
func WrapNoInput[Out any](g *guard.Guard, fn func(context.Context) (Out, error), opts ...Option) (func(context.Context) (Out, error), error) {
	r, err := newRunner(g, fn, opts)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) (Out, error) {
		return run(ctx, r, nil, false, fn)
	}, nil
}

// WrapNoResult is [Wrap] for an activity that returns only an error.
func WrapNoResult[In any](g *guard.Guard, fn func(context.Context, In) error, opts ...Option) (func(context.Context, In) error, error) {
	r, err := newRunner(g, fn, opts)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, in In) error {
		_, err := run(ctx, r, in, true, func(ctx context.Context) (struct{}, error) { return struct{}{}, fn(ctx, in) })
		return err
	}, nil
}

// WrapNoInputNoResult is [Wrap] for an activity without input that returns
// only an error. Unless the workflow stamps a key, it is keyed by execution
// scope ([WithExecutionScope]).
func WrapNoInputNoResult(g *guard.Guard, fn func(context.Context) error, opts ...Option) (func(context.Context) error, error) {
	r, err := newRunner(g, fn, opts)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		_, err := run(ctx, r, nil, false, func(ctx context.Context) (struct{}, error) { return struct{}{}, fn(ctx) })
		return err
	}, nil
}

// must returns v, and panics if err is not nil.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// Register registers guarded, the result of [Wrap] or a sibling, with r under
// the activity type name Temporal derives from original ([Name]), so that
// workflows keep scheduling it as workflow.ExecuteActivity(ctx, original, …).
// To register under another name, use r.RegisterActivityWithOptions with
// that name: the key's scope is the registered name.
func Register(r worker.ActivityRegistry, original, guarded any) {
	r.RegisterActivityWithOptions(guarded, tactivity.RegisterOptions{Name: Name(original)})
}

// Name returns the activity (or workflow) type name Temporal derives from
// the function fn by reflection: the function's name without its package,
// or a method's name without its receiver. Given a string, it returns the
// string.
func Name(fn any) string {
	if s, ok := fn.(string); ok {
		return s
	}
	full := runtime.FuncForPC(reflect.ValueOf(fn).Pointer()).Name()
	short := full[strings.LastIndexByte(full, '.')+1:]
	return strings.TrimSuffix(short, "-fm")
}

// runner holds what a guarded function needs on every call.
type runner struct {
	g    *guard.Guard
	cfg  *config
	name string // fn's name: the scope outside an activity, and of nested calls
}

func newRunner(g *guard.Guard, fn any, opts []Option) (*runner, error) {
	if g == nil {
		return nil, errors.New("idemguard/activity: nil guard")
	}
	cfg := newConfig(opts)
	err := cfg.validate(g)
	if err == nil && len(cfg.batchOpts) > 0 {
		err = fmt.Errorf("%w: WithBatchOptions applies to DoBatch only", guard.ErrInvalidOption)
	}
	if err != nil {
		return nil, fmt.Errorf("idemguard/activity: guarding %s: %w", Name(fn), err)
	}
	return &runner{g: g, cfg: cfg, name: Name(fn)}, nil
}

// validate reports invalid options, as the guard would on every call, and
// a key or a claim token, which name one call: given for every call of the
// activity they would give every call one key, or one claimant.
func (c *config) validate(g *guard.Guard) error {
	_, err := adapt.Settings(g, append(slices.Clip(c.guardOpts), adapt.Fixed(guard.WithKey("probe"), adapt.WithClaimToken("probe")))...)
	return err
}

// call is what one activity call passes to the guard.
type call struct {
	scope string
	opts  []guard.CallOption
}

// prepare computes the scope and guard options of a call running with ctx,
// whose results codec encodes. A nested call (one made from inside another
// guarded call) is scoped by the function's name, not by the activity
// type. The key option (an explicit key) is added by keyOption.
func (r *runner) prepare(ctx context.Context, codec guard.Codec, nested bool) call {
	c := r.cfg
	cl := call{scope: r.name}
	if tactivity.IsActivity(ctx) {
		info := tactivity.GetInfo(ctx)
		if !nested {
			cl.scope = info.ActivityType.Name
		}
		cl.opts = append(cl.opts, adapt.WithSpanAttributes(spanAttributes(info)...))
		if info.HeartbeatTimeout > 0 {
			// The adapter's default: what guard.New or the activity's
			// options say wins.
			cl.opts = append(cl.opts, adapt.WithDefaults(guard.WithLease(info.HeartbeatTimeout)))
		}
	}
	cl.opts = append(cl.opts, guard.WithCodec(codec), adapt.WithErrorCodec(newFailureCodec(activityConverter(ctx, c.dc))))
	if c.storeFailures {
		cl.opts = append(cl.opts, guard.WithDefiniteErrors(isStoredFailure))
	}
	cl.opts = append(cl.opts, c.guardOpts...)
	return cl
}

// keyOption returns the explicit key of a call, if it has one: the key the
// workflow stamped, or the execution scope. A nested call keys on its own
// input, or by execution scope within its own scope.
func (r *runner) keyOption(ctx context.Context, hasInput, nested bool) (guard.CallOption, bool) {
	if k, ok := explicitKey(ctx); ok && !nested {
		return guard.WithKey(k), true
	}
	if (r.cfg.executionScope || !hasInput) && tactivity.IsActivity(ctx) {
		return guard.WithKey(executionSelection(tactivity.GetInfo(ctx))), true
	}
	return nil, false
}

// executionSelection is the key selection of execution scope.
func executionSelection(info tactivity.Info) map[string]string {
	if info.WorkflowExecution.ID == "" {
		// A standalone activity: its run ID identifies the execution.
		return map[string]string{"activity_id": info.ActivityID, "activity_run_id": info.ActivityRunID}
	}
	return map[string]string{"workflow_id": info.WorkflowExecution.ID, "activity_id": info.ActivityID}
}

// run is the guarded call behind every activity shape.
func run[Out any](ctx context.Context, r *runner, input any, hasInput bool, fn func(context.Context) (Out, error)) (Out, error) {
	codec := PayloadCodec{DataConverter: activityConverter(ctx, r.cfg.dc)}
	outer := callFromContext(ctx)
	if outer != nil && outer.intercepted && outer.takeOver() {
		// The interceptor guards the running activity; if this is its
		// function, guarded both ways, and keys as the interceptor did, a
		// second claim of that key would find the first one in progress.
		cl := r.prepare(ctx, codec, false)
		if opt, ok := r.keyOption(ctx, hasInput, false); ok {
			cl.opts = append(cl.opts, opt)
		}
		if key, _, err := r.g.Key(cl.scope, input, cl.opts...); err == nil && key == outer.key {
			return fn(ctx)
		}
	}
	nested := outer != nil
	cl := r.prepare(ctx, codec, nested)
	if opt, ok := r.keyOption(ctx, hasInput, nested); ok {
		cl.opts = append(cl.opts, opt)
	}
	v, err := guard.Do(heartbeatWhileWaiting(ctx), r.g, cl.scope, input, func(ctx context.Context) (Out, error) {
		return fn(withCall(ctx, false))
	}, cl.opts...)
	return v, temporalError(err, r.cfg.maxRetryDelay, r.g.ClockSkew())
}

// spanAttributes are the Temporal attributes of the call's
// idemguard.execute span.
func spanAttributes(info tactivity.Info) []attribute.KeyValue {
	attrs := []attribute.KeyValue{
		telemetry.TemporalActivityTypeKey.String(info.ActivityType.Name),
		telemetry.TemporalActivityIDKey.String(info.ActivityID),
		telemetry.TemporalAttemptKey.Int(int(info.Attempt)),
	}
	if info.WorkflowExecution.ID != "" {
		attrs = append(attrs,
			telemetry.TemporalWorkflowIDKey.String(info.WorkflowExecution.ID),
			telemetry.TemporalRunIDKey.String(info.WorkflowExecution.RunID))
	}
	if info.WorkflowType != nil {
		attrs = append(attrs, telemetry.TemporalWorkflowTypeKey.String(info.WorkflowType.Name))
	}
	return attrs
}

// Must returns v, and panics if err is not nil: the panicking form of
// every constructor of the package, for a worker's main, where an invalid
// option should stop the worker when it starts.
//
//	w.RegisterActivity(activity.Must(activity.Wrap(g, ChargeCard)))
//	worker.Options{Interceptors: []interceptor.WorkerInterceptor{
//		activity.Must(activity.Interceptor(g, policies...)),
//	}}
func Must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
