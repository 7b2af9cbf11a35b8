package activity_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	tactivity "go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"

	"github.com/idemguard/idemguard/activity"
	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/temporaltest"
	"github.com/idemguard/idemguard/workflow"
)

// Under the interceptor, steps' results are theirs alone: an activity that
// returns no result still returns none after steps that did, however many
// of its steps run at once.
func TestInterceptedStepsKeepTheirResults(t *testing.T) {
	g := newGuard(t)
	var runs atomic.Int32
	notify := func(ctx context.Context, o Order) error {
		runs.Add(1)
		var wg sync.WaitGroup
		errs := make([]error, 4)
		for i, name := range []string{"sms", "email", "push", "letter"} {
			wg.Go(func() {
				_, errs[i] = guard.Step(ctx, name, func(context.Context) (Receipt, error) { return Receipt{ChargeID: name}, nil })
			})
		}
		wg.Wait()
		return errors.Join(errs...)
	}
	var s testsuite.WorkflowTestSuite
	s.SetLogger(temporaltest.Logger())
	for i := range 2 {
		env := s.NewTestActivityEnvironment()
		env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{
			activity.NewInterceptor(g, activity.Policy{Activity: "Notify"}),
		}})
		env.RegisterActivityWithOptions(notify, tactivity.RegisterOptions{Name: "Notify"})
		v, err := env.ExecuteActivity("Notify", Order{OrderID: "o-n"})
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if v != nil && v.HasValue() {
			var got any
			_ = v.Get(&got)
			t.Errorf("call %d: the activity returned %v; want no result", i, got)
		}
	}
	if runs.Load() != 1 {
		t.Errorf("the activity ran %d times in 2 calls, want 1", runs.Load())
	}
}

// guard.Step in an activity that is not guarded runs nothing and says why;
// with either of idemguard's interceptors on the worker, the error is
// non-retryable, so that Temporal does not retry a programming error.
func TestStepOutsideGuardedActivity(t *testing.T) {
	g := newGuard(t)
	var ran atomic.Int32
	unguarded := func(ctx context.Context, o Order) (Receipt, error) {
		_, err := guard.Step(ctx, "email", func(context.Context) (bool, error) { ran.Add(1); return true, nil })
		return Receipt{}, err
	}
	for _, tc := range []struct {
		name         string
		interceptors []interceptor.WorkerInterceptor
	}{
		{"no interceptor", nil},
		{"activity.NewInterceptor", []interceptor.WorkerInterceptor{activity.NewInterceptor(g)}},
		{"workflow.NewInterceptor", []interceptor.WorkerInterceptor{workflow.NewInterceptor()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := runActivity(t, func(env *testsuite.TestActivityEnvironment) {
				env.SetWorkerOptions(worker.Options{Interceptors: tc.interceptors})
			}, unguarded, Order{OrderID: "o-1"})
			if err == nil || !strings.Contains(err.Error(), guard.ErrNotInCall.Error()) {
				t.Fatalf("error %v, want one saying %q", err, guard.ErrNotInCall)
			}
			if tc.interceptors != nil {
				if ae := appError(t, err); ae.Type() != activity.ErrorTypeNotInCall || !ae.NonRetryable() {
					t.Errorf("type %q non-retryable %v; want %q, non-retryable", ae.Type(), ae.NonRetryable(), activity.ErrorTypeNotInCall)
				}
			}
		})
	}
	if ran.Load() != 0 {
		t.Errorf("the step ran %d times outside a guarded call, want 0", ran.Load())
	}
}
