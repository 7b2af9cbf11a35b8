package activity_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"

	"github.com/idemguard/idemguard/activity"
	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/workflow"
)

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
