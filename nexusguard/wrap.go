package nexusguard

import (
	"context"
	"errors"

	"github.com/nexus-rpc/sdk-go/nexus"
	"go.temporal.io/sdk/interceptor"

	"github.com/idemguard/idemguard/activity"
	"github.com/idemguard/idemguard/guard"
)

// Wrap returns a handler for nexus.NewSyncOperation, with handler's
// signature, that runs handler once per start request and replays its
// outcome to every start the caller resends with the same request ID (see
// the package documentation for keys, errors and steps). It reports a nil
// guard or handler, or an invalid option, as an error.
func Wrap[I, O any](g *guard.Guard, handler func(context.Context, I, nexus.StartOperationOptions) (O, error), opts ...Option) (func(context.Context, I, nexus.StartOperationOptions) (O, error), error) {
	if handler == nil {
		return nil, errors.New("idemguard/nexusguard: nil handler")
	}
	op, err := newOperation(g, opts)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, in I, options nexus.StartOperationOptions) (O, error) {
		o, v, ran, err := start(ctx, op, in, options, decodeAs[O], func(ctx context.Context) (O, any, error) {
			o, err := handler(ctx, in, options)
			return o, o, err
		})
		if err != nil || ran {
			return o, err
		}
		return valueAs[O](v)
	}, nil
}

// MustWrap is [Wrap] that panics where Wrap returns an error, so that the
// mistake shows when the worker starts:
//
//	nexus.NewSyncOperation("charge", nexusguard.MustWrap(g, charge))
func MustWrap[I, O any](g *guard.Guard, handler func(context.Context, I, nexus.StartOperationOptions) (O, error), opts ...Option) func(context.Context, I, nexus.StartOperationOptions) (O, error) {
	h, err := Wrap(g, handler, opts...)
	if err != nil {
		panic(err)
	}
	return h
}

// WrapOperation returns op with its starts guarded: a synchronous start's
// value, an asynchronous start's token and the links its handler attached
// (a workflow-run operation's link to its workflow) are recorded and
// replayed to a resent start. Use it for workflow-run operations
// (temporalnexus.NewWorkflowRunOperation) whose start handler does a side
// effect before it starts the workflow: see the package documentation.
// Cancel and the rest of op are op's own. It reports a nil guard or
// operation, or an invalid option, as an error.
func WrapOperation[I, O any](g *guard.Guard, op nexus.Operation[I, O], opts ...Option) (nexus.Operation[I, O], error) {
	if op == nil {
		return nil, errors.New("idemguard/nexusguard: nil operation")
	}
	o, err := newOperation(g, opts)
	if err != nil {
		return nil, err
	}
	return &guardedOperation[I, O]{Operation: op, op: o}, nil
}

// MustWrapOperation is [WrapOperation] that panics where WrapOperation
// returns an error.
func MustWrapOperation[I, O any](g *guard.Guard, op nexus.Operation[I, O], opts ...Option) nexus.Operation[I, O] {
	w, err := WrapOperation(g, op, opts...)
	if err != nil {
		panic(err)
	}
	return w
}

// guardedOperation is an operation whose starts are guarded.
type guardedOperation[I, O any] struct {
	nexus.Operation[I, O]
	op *operation
}

func (w *guardedOperation[I, O]) Start(ctx context.Context, in I, options nexus.StartOperationOptions) (nexus.HandlerStartOperationResult[O], error) {
	res, v, ran, err := start(ctx, w.op, in, options, decodeAs[O], func(ctx context.Context) (nexus.HandlerStartOperationResult[O], any, error) {
		r, err := w.Operation.Start(ctx, in, options)
		return r, valueOf(r), err
	})
	if err != nil || ran {
		return res, err
	}
	if a, ok := v.(*nexus.HandlerStartOperationResultAsync); ok {
		return a, nil
	}
	o, err := valueAs[O](v)
	if err != nil {
		return nil, err
	}
	return &nexus.HandlerStartOperationResultSync[O]{Value: o}, nil
}

// Policy returns the policy with which activity.Interceptor, idemguard's
// one worker interceptor, guards the starts of the Nexus operation named
// operation of service, as [WrapOperation] would, without changing the
// operation's code or registration:
//
//	w := worker.New(c, "payments", worker.Options{Interceptors: []interceptor.WorkerInterceptor{
//		activity.Must(activity.Interceptor(g, nexusguard.MustPolicy(g, "payments", "charge"))),
//	}})
//
// The interceptor does not know the operation's output type: a replayed
// synchronous value reaches the worker as a converter.RawValue, which it
// sends as it is. An operation guarded both ways, by the interceptor and
// by [Wrap] or [WrapOperation], is guarded once, by the interceptor. It
// reports a nil guard, an empty name or an invalid
// option as an error.
func Policy(g *guard.Guard, service, operation string, opts ...Option) (activity.Policy, error) {
	if service == "" || operation == "" {
		return activity.Policy{}, errors.New("idemguard/nexusguard: Policy needs a service and an operation name")
	}
	o, err := newOperation(g, opts)
	if err != nil {
		return activity.Policy{}, err
	}
	return activity.Policy{Nexus: &policy{op: o, service: service, operation: operation}}, nil
}

// MustPolicy is [Policy] that panics where Policy returns an error.
func MustPolicy(g *guard.Guard, service, operation string, opts ...Option) activity.Policy {
	p, err := Policy(g, service, operation, opts...)
	if err != nil {
		panic(err)
	}
	return p
}

// policy is the activity.NexusOperation of a Policy.
type policy struct {
	op                 *operation
	service, operation string
}

func (p *policy) NexusOperation() (service, operation string) { return p.service, p.operation }

func (p *policy) StartNexusOperation(ctx context.Context, in interceptor.NexusStartOperationInput, next interceptor.NexusOperationInboundInterceptor) (nexus.HandlerStartOperationResult[any], error) {
	res, v, ran, err := start(ctx, p.op, in.Input, in.Options, decodeRaw, func(ctx context.Context) (nexus.HandlerStartOperationResult[any], any, error) {
		r, err := next.StartOperation(context.WithValue(ctx, interceptedKey{p.service, p.operation}, in.Options.RequestID), in)
		return r, valueOf(r), err
	})
	if err != nil || ran {
		return res, err
	}
	if a, ok := v.(*nexus.HandlerStartOperationResultAsync); ok {
		return a, nil
	}
	return &nexus.HandlerStartOperationResultSync[any]{Value: v}, nil
}

var _ activity.NexusOperation = (*policy)(nil)
