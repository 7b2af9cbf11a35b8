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
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/internal/testing/temporaltest"
)

// invoice is an activity of two side effects, rendering and e-mailing an
// invoice, each a guard.Step (or, with plain set, run directly). The
// e-mail fails while failEmail is set.
type invoice struct {
	plain     bool
	rendered  atomic.Int32
	emailed   atomic.Int32 // attempts, failed ones included
	failEmail atomic.Bool
	// failFirst fails the e-mail of the activity's first attempt.
	failFirst bool

	mu   sync.Mutex
	docs []string // protected by mu: every rendered document
}

// step runs fn as the guard.Step called name, or directly when the
// invoice is plain.
func step[T any](ctx context.Context, plain bool, name string, fn func(context.Context) (T, error)) (T, error) {
	if plain {
		return fn(ctx)
	}
	return guard.Step(ctx, name, fn)
}

// Send renders the invoice (its "charge ID" is the rendered document, new
// on every rendering) and e-mails it.
func (v *invoice) Send(ctx context.Context, o Order) (Receipt, error) {
	doc, err := step(ctx, v.plain, "render", func(ctx context.Context) (string, error) {
		v.rendered.Add(1)
		doc := "inv-" + o.OrderID + "-" + randomID()
		v.mu.Lock()
		v.docs = append(v.docs, doc)
		v.mu.Unlock()
		return doc, nil
	})
	if err != nil {
		return Receipt{}, err
	}
	if _, err := step(ctx, v.plain, "email", func(ctx context.Context) (bool, error) {
		v.emailed.Add(1)
		if v.failEmail.Load() || v.failFirst && tactivity.GetInfo(ctx).Attempt == 1 {
			return false, errors.New("mail server unavailable")
		}
		return true, nil
	}); err != nil {
		return Receipt{}, err
	}
	return Receipt{ChargeID: doc, Amount: o.Amount}, nil
}

// firstDoc returns the first document rendered.
func (v *invoice) firstDoc() string {
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.docs) == 0 {
		return ""
	}
	return v.docs[0]
}

// stepCases are the ways the invoice activity runs in the step tests: with
// steps, guarded by Guard and by Interceptor, where the first step's
// side effect runs once; and without steps, where it runs on every attempt.
var stepCases = []struct {
	name         string
	plain        bool // no steps
	interceptor  bool // Interceptor, not Guard
	wantRendered int32
}{
	{"Guard", false, false, 1},
	{"Interceptor", false, true, 1},
	{"Guard without steps", true, false, 2},
}

// Guarded both ways, an activity whose second step failed replays its
// first step on the next attempt and runs only the second; without steps
// the first side effect runs again, which shows the check can fail.
func TestStepsResumeInActivity(t *testing.T) {
	order := Order{OrderID: "o-steps", Amount: 12}
	for _, tc := range stepCases {
		t.Run(tc.name, func(t *testing.T) {
			g := newGuard(t)
			v := &invoice{plain: tc.plain}
			var setup func(*testsuite.TestActivityEnvironment)
			fn := any(activity.Must(activity.Wrap(g, v.Send)))
			if tc.interceptor {
				fn = v.Send
				setup = func(env *testsuite.TestActivityEnvironment) {
					env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{
						activity.Must(activity.Interceptor(g, activity.Policy{Activity: "Charge"})),
					}})
				}
			}
			v.failEmail.Store(true)
			if _, err := runActivity(t, setup, fn, order); err == nil || !strings.Contains(err.Error(), "mail server unavailable") {
				t.Fatalf("first attempt: %v, want the e-mail's error", err)
			}
			v.failEmail.Store(false)
			r, err := runActivity(t, setup, fn, order)
			if err != nil {
				t.Fatalf("retry: %v", err)
			}
			if got := v.rendered.Load(); got != tc.wantRendered {
				t.Errorf("rendered %d times, want %d", got, tc.wantRendered)
			}
			if got := v.emailed.Load(); got != 2 {
				t.Errorf("e-mail tried %d times, want 2 (failed, then sent)", got)
			}
			if !strings.HasPrefix(r.ChargeID, "inv-o-steps-") {
				t.Errorf("result %+v, want the rendered invoice", r)
			}
			// The activity completed: a third call replays it whole.
			again, err := runActivity(t, setup, fn, order)
			if err != nil || again != r || v.emailed.Load() != 2 {
				t.Errorf("third call: %+v, %v, e-mails %d; want the replayed %+v and no new e-mail", again, err, v.emailed.Load(), r)
			}
		})
	}
}

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
			activity.Must(activity.Interceptor(g, activity.Policy{Activity: "Notify"})),
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
		{"activity.Interceptor", []interceptor.WorkerInterceptor{activity.Must(activity.Interceptor(g))}},
		{"activity.Interceptor, keys only", []interceptor.WorkerInterceptor{activity.Must(activity.Interceptor(nil))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := runActivity(t, func(env *testsuite.TestActivityEnvironment) {
				env.SetWorkerOptions(worker.Options{Interceptors: tc.interceptors})
			}, unguarded, Order{OrderID: "o-1"})
			if err == nil || !strings.Contains(err.Error(), adapt.ErrNotInCall.Error()) {
				t.Fatalf("error %v, want one saying %q", err, adapt.ErrNotInCall)
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
