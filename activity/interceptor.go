package activity

import (
	"context"
	"errors"

	"github.com/nexus-rpc/sdk-go/nexus"
	tactivity "go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/interceptor"
	tworkflow "go.temporal.io/sdk/workflow"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/temporalerr"
	"github.com/idemguard/idemguard/internal/wfkey"
)

// Package nexusguard maps guard errors for Nexus callers through the
// activity mapping: one table for both.
func init() { temporalerr.FromGuard = temporalError }

// Policy says how [Interceptor] guards one activity type, or one Nexus
// operation.
type Policy struct {
	// Activity is the activity type name, as registered (see [Name]).
	Activity string
	// Options configure the guard for this activity type.
	Options []Option
	// Nexus, given instead of Activity and Options, guards the starts of
	// a Nexus operation. Package nexusguard makes such policies
	// (nexusguard.Policy).
	Nexus NexusOperation
}

// NexusOperation guards the starts of one Nexus operation for
// [Interceptor]. Package nexusguard implements it: nexusguard.Policy
// returns a [Policy] that holds one.
type NexusOperation interface {
	// NexusOperation returns the names of the service and of the
	// operation whose starts it guards.
	NexusOperation() (service, operation string)
	// StartNexusOperation starts the operation through next, guarded.
	StartNexusOperation(ctx context.Context, in interceptor.NexusStartOperationInput, next interceptor.NexusOperationInboundInterceptor) (nexus.HandlerStartOperationResult[any], error)
}

// Interceptor returns idemguard's worker interceptor. Register it in
// worker.Options.Interceptors (or client.Options.Interceptors, not both) of
// every worker that runs workflows setting keys, guarded activities or
// guarded Nexus operations. It does four things:
//
//   - On the workflow side, it stamps the key a workflow set with
//     workflow.ContextWithKey into the header of each activity (and local
//     activity) scheduled with that context, and hands a guarded workflow
//     (workflow.Wrap) the claim of the run that continued as new into it.
//   - On the activity side, it hands the stamped key to the guarded
//     activity, which keys on it instead of its input, and turns
//     adapt.ErrNotInCall returned by an activity it does not guard
//     (guard.Step in an unguarded activity) into a non-retryable error of
//     type [ErrorTypeNotInCall].
//   - It guards the activity types named by policies with g, as [Wrap]
//     would, without changing the activities' code or registration. Its key
//     input is the activity's argument (several arguments are keyed as a
//     JSON array of them; none, by execution scope). Results are stored
//     with the data converter of [WithDataConverter] and replayed through
//     the worker's own data converter, so that its payload codecs apply to
//     what reaches the history as they do when the activity runs.
//   - It guards the starts of the Nexus operations named by policies made
//     by package nexusguard, each with the guard its policy was made
//     with, and turns adapt.ErrNotInCall returned by a Nexus operation it
//     does not guard into the same non-retryable error.
//
// With no activity policies it only hands keys on, and g may be nil. An
// activity guarded both ways is guarded once, by the interceptor.
// Interceptor reports as an error invalid options, an empty activity
// name, two policies for one activity type or Nexus operation, a policy
// naming both an activity and a Nexus operation, or activity policies
// without a guard; [Must] panics instead.
func Interceptor(g *guard.Guard, policies ...Policy) (interceptor.WorkerInterceptor, error) {
	wi := &workerInterceptor{policies: make(map[string]*runner, len(policies))}
	for _, p := range policies {
		if p.Nexus != nil {
			if err := wi.addNexus(p); err != nil {
				return nil, err
			}
			continue
		}
		if p.Activity == "" {
			return nil, errors.New("idemguard/activity: Interceptor: policy without an activity name")
		}
		if _, dup := wi.policies[p.Activity]; dup {
			return nil, errors.New("idemguard/activity: Interceptor: two policies for activity " + p.Activity)
		}
		r, err := newRunner(g, p.Activity, p.Options)
		if err != nil {
			return nil, err
		}
		wi.policies[p.Activity] = r
	}
	return wi, nil
}

type workerInterceptor struct {
	interceptor.WorkerInterceptorBase
	policies map[string]*runner // by activity type; read-only after Interceptor
	nexus    map[nexusName]NexusOperation
}

// nexusName names a Nexus operation: its service and its name.
type nexusName struct{ service, operation string }

// addNexus adds p, a Nexus operation's policy.
func (w *workerInterceptor) addNexus(p Policy) error {
	service, operation := p.Nexus.NexusOperation()
	n := nexusName{service, operation}
	switch _, dup := w.nexus[n]; {
	case p.Activity != "" || len(p.Options) > 0:
		return errors.New("idemguard/activity: Interceptor: a policy names both activity " + p.Activity + " and Nexus operation " + service + "/" + operation)
	case service == "" || operation == "":
		return errors.New("idemguard/activity: Interceptor: Nexus policy without a service or operation name")
	case dup:
		return errors.New("idemguard/activity: Interceptor: two policies for Nexus operation " + service + "/" + operation)
	}
	if w.nexus == nil {
		w.nexus = make(map[nexusName]NexusOperation)
	}
	w.nexus[n] = p.Nexus
	return nil
}

func (w *workerInterceptor) InterceptNexusOperation(ctx context.Context, next interceptor.NexusOperationInboundInterceptor) interceptor.NexusOperationInboundInterceptor {
	n := &nexusInbound{ops: w.nexus}
	n.Next = next
	return n
}

type nexusInbound struct {
	interceptor.NexusOperationInboundInterceptorBase
	ops map[nexusName]NexusOperation
}

func (n *nexusInbound) StartOperation(ctx context.Context, in interceptor.NexusStartOperationInput) (nexus.HandlerStartOperationResult[any], error) {
	if nexus.IsHandlerContext(ctx) {
		info := nexus.ExtractHandlerInfo(ctx)
		if op, ok := n.ops[nexusName{info.Service, info.Operation}]; ok {
			return op.StartNexusOperation(ctx, in, n.Next)
		}
	}
	res, err := n.Next.StartOperation(ctx, in)
	return res, unguardedError(err)
}

func (w *workerInterceptor) InterceptActivity(ctx context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	a := &activityInbound{policies: w.policies}
	a.Next = next
	return a
}

func (w *workerInterceptor) InterceptWorkflow(ctx tworkflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	i := &workflowInbound{}
	i.Next = next
	return i
}

type activityInbound struct {
	interceptor.ActivityInboundInterceptorBase
	policies map[string]*runner
}

func (a *activityInbound) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
	ctx, err := keyHeaderToContext(ctx)
	if err != nil {
		return nil, err
	}
	r, ok := a.policies[tactivity.GetInfo(ctx).ActivityType.Name]
	if !ok {
		v, err := a.Next.ExecuteActivity(ctx, in)
		return v, unguardedError(err)
	}
	var input any
	switch len(in.Args) {
	case 0:
	case 1:
		input = in.Args[0]
	default:
		input = in.Args
	}
	cl := r.prepare(ctx, interceptorCodec{PayloadCodec{DataConverter: activityConverter(ctx, r.cfg.dc)}}, false)
	if opt, ok := r.keyOption(ctx, len(in.Args) > 0, false); ok {
		cl.opts = append(cl.opts, opt)
	}
	// The result goes back to the worker as the activity returned it, to
	// be encoded by the worker's data converter; a replay goes back as a
	// converter.RawValue, which the worker encodes the same way.
	v, err := guard.Do(heartbeatWhileWaiting(ctx), r.g, cl.scope, input, func(ctx context.Context) (any, error) {
		return a.Next.ExecuteActivity(withCall(ctx, true), in)
	}, cl.opts...)
	if err != nil {
		return nil, temporalError(err, r.cfg.maxRetryDelay, r.g.ClockSkew())
	}
	return v, nil
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
	if p := interceptor.WorkflowHeader(ctx)[wfkey.ClaimHeader]; p != nil {
		// A guarded workflow's claim, handed over by the run that
		// continued as new into this one; the workflow function cannot
		// read the header itself.
		ctx = wfkey.WithHandover(ctx, p)
	}
	return i.Next.ExecuteWorkflow(wfkey.Install(ctx), in)
}

func (i *workflowInbound) ExecuteUpdate(ctx tworkflow.Context, in *interceptor.UpdateInput) (any, error) {
	return i.Next.ExecuteUpdate(wfkey.Install(ctx), in)
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

// stamp writes the key set on ctx, if any, into the header of the activity
// being scheduled with ctx.
func stamp(ctx tworkflow.Context) error {
	key, ok := wfkey.From(ctx)
	if !ok {
		return nil
	}
	header := interceptor.WorkflowHeader(ctx)
	if header == nil {
		return nil
	}
	p, err := encodeKeyHeader(key)
	if err != nil {
		return err
	}
	header[keyHeader] = p
	return nil
}

func failed(ctx tworkflow.Context, err error) tworkflow.Future {
	f, s := tworkflow.NewFuture(ctx)
	s.SetError(err)
	return f
}
