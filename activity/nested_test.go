package activity_test

import (
	"context"
	"errors"
	"testing"

	commonpb "go.temporal.io/api/common/v1"
	tactivity "go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"

	"github.com/idemguard/idemguard/activity"
	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/testing/temporaltest"
)

// A guarded activity that calls another guarded activity's function
// directly does not claim its own key a second time: the inner call is
// guarded as a call of its own (its function's name as scope, its own
// input as key) and the outer activity completes, whether the outer key
// was stamped by the workflow, taken from the execution or from the input.
func TestNestedGuardedCall(t *testing.T) {
	g := newGuard(t)
	var outer ledger
	cards := &cardCharger{}
	chargeCard := activity.Must(activity.Wrap(g, cards.ChargeCard, activity.WithGuardOptions(guard.WithKeyPath("order_id"))))
	stamped, err := activity.EncodeKeyHeader("order-7/checkout")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		opts  []activity.Option
		setup func(*testsuite.TestActivityEnvironment)
	}{
		{"input key", []activity.Option{activity.WithGuardOptions(guard.WithKeyPath("order_id"))}, nil},
		{"execution scope", []activity.Option{activity.WithExecutionScope()}, nil},
		{"stamped key", nil, func(env *testsuite.TestActivityEnvironment) {
			env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{activity.Must(activity.Interceptor(g))}})
			env.SetHeader(&commonpb.Header{Fields: map[string]*commonpb.Payload{activity.KeyHeader: stamped}})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := "o-" + tc.name
			checkout := activity.Must(activity.Wrap(g, func(ctx context.Context, o Order) (Receipt, error) {
				outer.add(id)
				r, err := chargeCard(ctx, o)
				if err != nil {
					return Receipt{}, err
				}
				again, err := chargeCard(ctx, o) // the same inner call replays
				if err != nil || again != r {
					return Receipt{}, errors.Join(errors.New("the second inner call did not replay the first"), err)
				}
				return r, nil
			}, tc.opts...))
			o := Order{OrderID: id, Amount: 5}
			got, err := runActivity(t, tc.setup, checkout, o)
			if err != nil {
				t.Fatalf("outer activity: %v", err)
			}
			if cards.charges.count(id) != 1 || outer.count(id) != 1 {
				t.Errorf("inner ran %d times, outer %d; want 1 and 1", cards.charges.count(id), outer.count(id))
			}
			// The inner call's record is its own: calling the inner
			// function's activity directly with the same order replays it.
			direct, err := runActivityAs(t, "ChargeCard", nil, chargeCard, o)
			if err != nil || direct != got {
				t.Errorf("the inner activity run directly: %+v, %v; want the nested call's %+v", direct, err, got)
			}
		})
	}
}

// cardCharger's ChargeCard is an activity that other activities also call
// directly.
type cardCharger struct{ charges ledger }

func (c *cardCharger) ChargeCard(ctx context.Context, o Order) (Receipt, error) {
	c.charges.add(o.OrderID)
	return newReceipt(ctx, o), nil
}

// runActivityAs runs fn once as the activity type name in a test
// activity environment prepared by setup.
func runActivityAs(t *testing.T, name string, setup func(*testsuite.TestActivityEnvironment), fn any, args ...any) (Receipt, error) {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	s.SetLogger(temporaltest.Logger())
	env := s.NewTestActivityEnvironment()
	if setup != nil {
		setup(env)
	}
	env.RegisterActivityWithOptions(fn, tactivity.RegisterOptions{Name: name})
	v, err := env.ExecuteActivity(name, args...)
	var r Receipt
	if err == nil && v != nil && v.HasValue() {
		if derr := v.Get(&r); derr != nil {
			t.Fatalf("decoding the result: %v", derr)
		}
	}
	return r, err
}

// A batch item that calls a guarded function is the enclosing call for it:
// the guarded function is a call of its own, not a second claim of the
// item's key (both key on the invoice ID within the activity's scope).
func TestNestedGuardedCallInBatchItem(t *testing.T) {
	g := newGuard(t)
	var l sends
	send := activity.Must(activity.Wrap(g, sender(&l, ""), activity.WithGuardOptions(guard.WithKeyPath("id"))))
	sendInvoices := func(ctx context.Context, invs []Invoice) ([]Sent, error) {
		return activity.DoBatch(ctx, g, invs, send, activity.WithGuardOptions(guard.WithKeyPath("id")))
	}
	var s testsuite.WorkflowTestSuite
	s.SetLogger(temporaltest.Logger())
	env := s.NewTestActivityEnvironment()
	env.RegisterActivityWithOptions(sendInvoices, tactivity.RegisterOptions{Name: "SendInvoices"})
	v, err := env.ExecuteActivity("SendInvoices", invoices(3))
	if err != nil {
		t.Fatalf("batch: %v", err)
	}
	var got []Sent
	if err := v.Get(&got); err != nil || len(got) != 3 || l.total() != 3 {
		t.Errorf("batch results %+v (%v) after %d sends, want 3 results after 3 sends", got, err, l.total())
	}
}
