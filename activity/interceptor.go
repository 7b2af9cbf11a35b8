package activity

import (
	"context"

	commonpb "go.temporal.io/api/common/v1"
	tactivity "go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/interceptor"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/temporalglue"
)

// Policy says how [NewInterceptor] guards one activity type.
type Policy struct {
	// Activity is the activity type name, as registered (see [Name]).
	Activity string
	// Options configure the guard for this activity type.
	Options []Option
}

// NewInterceptor returns a worker interceptor that guards the activity types
// named by policies with g, as [Guard] would, without changing the
// activities' code or registration. Its key input is the activity's
// argument (several arguments are keyed as a JSON array of them; none, by
// execution scope); the result is stored and replayed as the
// *commonpb.Payloads the worker sends. Register it in
// worker.Options.Interceptors (or client.Options.Interceptors, not both).
//
// For every activity, guarded or not, it also passes a key the workflow
// stamped into the activity's header on to activities guarded with [Guard]
// (see [ContextWithExplicitKey]), and turns guard.ErrNotInCall returned by
// an activity it does not guard (guard.Step in an unguarded activity) into
// a non-retryable error of type [ErrorTypeNotInCall];
// workflow.NewInterceptor does the same.
//
// An activity guarded both ways is guarded once, by the interceptor.
// NewInterceptor panics on invalid options, an empty activity name or two
// policies for one activity type.
func NewInterceptor(g *guard.Guard, policies ...Policy) interceptor.WorkerInterceptor {
	wi := &workerInterceptor{policies: make(map[string]*runner, len(policies))}
	for _, p := range policies {
		if p.Activity == "" {
			panic("idemguard/activity: NewInterceptor: policy without an activity name")
		}
		if _, dup := wi.policies[p.Activity]; dup {
			panic("idemguard/activity: NewInterceptor: two policies for activity " + p.Activity)
		}
		wi.policies[p.Activity] = newRunner(g, p.Activity, p.Options)
	}
	return wi
}

type workerInterceptor struct {
	interceptor.WorkerInterceptorBase
	policies map[string]*runner // by activity type; read-only after NewInterceptor
}

func (w *workerInterceptor) InterceptActivity(ctx context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	a := &activityInbound{policies: w.policies}
	a.Next = next
	return a
}

type activityInbound struct {
	interceptor.ActivityInboundInterceptorBase
	policies map[string]*runner
}

func (a *activityInbound) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
	ctx, err := temporalglue.KeyHeaderToContext(ctx)
	if err != nil {
		return nil, err
	}
	r, ok := a.policies[tactivity.GetInfo(ctx).ActivityType.Name]
	if !ok {
		v, err := a.Next.ExecuteActivity(ctx, in)
		return v, temporalglue.UnguardedError(err)
	}
	var input any
	switch len(in.Args) {
	case 0:
	case 1:
		input = in.Args[0]
	default:
		input = in.Args
	}
	dc := temporalglue.ActivityConverter(ctx, r.cfg.dc)
	cl := r.prepare(ctx, interceptorCodec{PayloadCodec{DataConverter: dc}})
	if opt, ok := r.keyOption(ctx, len(in.Args) > 0); ok {
		cl.opts = append(cl.opts, opt)
	}
	ctx = withGuardedByInterceptor(ctx)
	v, err := guard.Do(ctx, r.g, cl.scope, input, func(ctx context.Context) (interceptedResult, error) {
		v, err := a.Next.ExecuteActivity(ctx, in)
		if err != nil || v == nil {
			return interceptedResult{}, err
		}
		// Encode the result here, once: the worker sends the payloads that
		// were stored, not a second encoding.
		if p, ok := v.(*commonpb.Payloads); ok {
			return interceptedResult{payloads: p}, nil
		}
		p, err := dc.ToPayloads(v)
		if err != nil {
			// The side effect happened: let the codec fail on it again,
			// so that the guard records the call without a result.
			return interceptedResult{raw: v}, nil
		}
		return interceptedResult{payloads: p}, nil
	}, cl.opts...)
	switch {
	case err != nil:
		return nil, temporalglue.TemporalError(err, r.cfg.maxRetryDelay)
	case v.payloads != nil && len(v.payloads.Payloads) > 0:
		return v.payloads, nil
	}
	return v.raw, nil
}
