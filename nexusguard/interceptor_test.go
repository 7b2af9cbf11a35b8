package nexusguard_test

import (
	"context"
	"errors"
	"testing"

	"github.com/nexus-rpc/sdk-go/nexus"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"

	"github.com/idemguard/idemguard/activity"
	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/nexusguard"
)

// handlerInbound stands in for the SDK's end of the chain: it starts the
// operation by calling start.
type handlerInbound struct {
	interceptor.NexusOperationInboundInterceptorBase
	start func(ctx context.Context, in interceptor.NexusStartOperationInput) (nexus.HandlerStartOperationResult[any], error)
}

func (h *handlerInbound) StartOperation(ctx context.Context, in interceptor.NexusStartOperationInput) (nexus.HandlerStartOperationResult[any], error) {
	return h.start(ctx, in)
}

// syncStart adapts a sync handler to the SDK's end of the chain, which
// hands the interceptors the handler's typed result.
func syncStart(h func(context.Context, Order, nexus.StartOperationOptions) (Receipt, error)) func(context.Context, interceptor.NexusStartOperationInput) (nexus.HandlerStartOperationResult[any], error) {
	return func(ctx context.Context, in interceptor.NexusStartOperationInput) (nexus.HandlerStartOperationResult[any], error) {
		r, err := h(ctx, in.Input.(Order), in.Options)
		if err != nil {
			return nil, err
		}
		return &nexus.HandlerStartOperationResultSync[Receipt]{Value: r}, nil
	}
}

// intercepted returns the start of the test operation through wi, as the
// SDK's Nexus middleware calls it.
func intercepted(wi interceptor.WorkerInterceptor, begin func(context.Context, interceptor.NexusStartOperationInput) (nexus.HandlerStartOperationResult[any], error)) func(ctx context.Context, o Order, id string) (nexus.HandlerStartOperationResult[any], error) {
	return func(ctx context.Context, o Order, id string) (nexus.HandlerStartOperationResult[any], error) {
		in := wi.InterceptNexusOperation(ctx, &handlerInbound{start: begin})
		return in.StartOperation(ctx, interceptor.NexusStartOperationInput{Input: o, Options: start(id)})
	}
}

// receiptOf decodes the result of an intercepted sync start: the handler's
// own on a first start, a converter.RawValue (which the worker encodes as
// it is) on a replay.
func receiptOf(t *testing.T, res nexus.HandlerStartOperationResult[any]) Receipt {
	t.Helper()
	switch r := res.(type) {
	case *nexus.HandlerStartOperationResultSync[Receipt]:
		return r.Value
	case *nexus.HandlerStartOperationResultSync[any]:
		raw, ok := r.Value.(converter.RawValue)
		if !ok {
			t.Fatalf("replayed value %T, want a converter.RawValue", r.Value)
		}
		var rc Receipt
		if err := converter.GetDefaultDataConverter().FromPayload(raw.Payload(), &rc); err != nil {
			t.Fatal(err)
		}
		return rc
	}
	t.Fatalf("result %T, want a sync result", res)
	return Receipt{}
}

// The worker interceptor guards the operations its nexusguard policies
// name, as Wrap does: a resent start replays, another input under the
// request ID is refused, an operation error is replayed as it was
// returned.
func TestInterceptor(t *testing.T) {
	var l ledger
	g := newGuard(t)
	wi := activity.Must(activity.Interceptor(nil, nexusguard.MustPolicy(g, service, operation)))
	startOp := intercepted(wi, syncStart(charge(&l)))
	ctx := handlerContext()

	first, err := startOp(ctx, Order{OrderID: "o-1", Amount: 7}, "req-1")
	if err != nil {
		t.Fatal(err)
	}
	resent, err := startOp(ctx, Order{OrderID: "o-1", Amount: 7}, "req-1")
	if err != nil {
		t.Fatal(err)
	}
	if a, b := receiptOf(t, first), receiptOf(t, resent); a != b {
		t.Fatalf("resent start = %+v, want the first's %+v", b, a)
	}
	_, err = startOp(ctx, Order{OrderID: "o-1", Amount: 8}, "req-1")
	cause(t, handlerError(t, err, nexus.HandlerErrorTypeBadRequest, false), activity.ErrorTypePayloadMismatch)
	if n := l.count("o-1"); n != 1 {
		t.Errorf("charged %d times, want 1", n)
	}

	declined := intercepted(wi, syncStart(func(context.Context, Order, nexus.StartOperationOptions) (Receipt, error) {
		l.add("declined")
		return Receipt{}, nexus.NewOperationFailedErrorf("declined: %w", errors.New("card expired"))
	}))
	var got [2]*nexus.OperationError
	for i := range got {
		_, err := declined(ctx, Order{OrderID: "o-2"}, "req-2")
		if got[i], _ = err.(*nexus.OperationError); got[i] == nil {
			t.Fatalf("start %d: %v (%T), want a *nexus.OperationError", i+1, err, err)
		}
	}
	if got[0].State != got[1].State || got[0].Message != got[1].Message || got[0].Cause.Error() != got[1].Cause.Error() {
		t.Errorf("operation errors %+v and %+v differ", got[0], got[1])
	}
	if n := l.count("declined"); n != 1 {
		t.Errorf("the declining handler ran %d times, want 1", n)
	}
}

// Operations without a policy pass through the interceptor unguarded;
// guard.Step in one of them is a non-retryable error, not an endless
// retry.
func TestInterceptorUnguarded(t *testing.T) {
	var l ledger
	wi := activity.Must(activity.Interceptor(nil, nexusguard.MustPolicy(newGuard(t), service, "other")))
	startOp := intercepted(wi, syncStart(charge(&l)))
	for range 2 {
		if _, err := startOp(handlerContext(), Order{OrderID: "o-1"}, "req-1"); err != nil {
			t.Fatal(err)
		}
	}
	if n := l.count("o-1"); n != 2 {
		t.Errorf("charged %d times, want 2 (unguarded)", n)
	}
	stepping := intercepted(wi, syncStart(func(ctx context.Context, o Order, _ nexus.StartOperationOptions) (Receipt, error) {
		return guard.Step(ctx, "charge", func(ctx context.Context) (Receipt, error) { return Receipt{}, nil })
	}))
	_, err := stepping(handlerContext(), Order{OrderID: "o-1"}, "req-1")
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || error(ae) != err || ae.Type() != activity.ErrorTypeNotInCall || !ae.NonRetryable() {
		t.Errorf("guard.Step in an unguarded operation = %v (%T), want a non-retryable %s", err, err, activity.ErrorTypeNotInCall)
	}
}

// Policy reports what cannot work; Interceptor refuses two policies
// for one operation and a policy naming an activity too.
func TestPolicy(t *testing.T) {
	g := newGuard(t)
	for _, c := range []struct {
		name               string
		g                  *guard.Guard
		service, operation string
		opts               []nexusguard.Option
	}{
		{"nil guard", nil, service, operation, nil},
		{"no service", g, "", operation, nil},
		{"no operation", g, service, "", nil},
		{"an invalid option", g, service, operation, []nexusguard.Option{nexusguard.WithGuardOptions(guard.WithTTL(-1))}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := nexusguard.Policy(c.g, c.service, c.operation, c.opts...); err == nil {
				t.Error("Policy succeeded")
			}
		})
	}
	p := nexusguard.MustPolicy(g, service, operation)
	for name, policies := range map[string][]activity.Policy{
		"two policies for one operation": {p, p},
		"an activity and an operation":   {{Activity: "Charge", Nexus: p.Nexus}},
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("Interceptor did not panic")
				}
			}()
			activity.Must(activity.Interceptor(g, policies...))
		})
	}
}

// An operation guarded both ways, its handler wrapped and the interceptor
// holding a policy for it, is guarded once, by the interceptor: the
// wrapped handler runs inside the interceptor's call instead of waiting
// for it.
func TestGuardedBothWays(t *testing.T) {
	var l ledger
	g := newGuard(t)
	wi := activity.Must(activity.Interceptor(nil, nexusguard.MustPolicy(g, service, operation)))
	startOp := intercepted(wi, syncStart(nexusguard.MustWrap(g, func(ctx context.Context, o Order, opts nexus.StartOperationOptions) (Receipt, error) {
		if _, err := guard.Step(ctx, "charge", func(ctx context.Context) (bool, error) {
			l.add("step " + o.OrderID)
			return true, nil
		}); err != nil {
			return Receipt{}, err
		}
		return charge(&l)(ctx, o, opts)
	})))
	var got [2]Receipt
	for i := range got {
		res, err := startOp(handlerContext(), Order{OrderID: "o-1"}, "req-1")
		if err != nil {
			t.Fatalf("start %d: %v", i+1, err)
		}
		got[i] = receiptOf(t, res)
	}
	if got[0] != got[1] || l.count("o-1") != 1 || l.count("step o-1") != 1 {
		t.Errorf("receipts %+v, charged %d times, stepped %d times; want one charge, replayed", got, l.count("o-1"), l.count("step o-1"))
	}
}
