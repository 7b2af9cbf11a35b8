package activity_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	tactivity "go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"

	"github.com/idemguard/idemguard/activity"
	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/internal/testing/temporaltest"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/memory"
)

// Acceptance 7: each guard error comes out as the documented Temporal error
// type and retryability, unwrapped.
func TestTemporalError(t *testing.T) {
	lease := time.Now().Add(3 * time.Second)
	for _, tc := range []struct {
		name      string
		err       error
		wantType  string
		retryable bool
		delay     [2]time.Duration // bounds of NextRetryDelay, if set
	}{
		// The holder's lease end, plus adapt.DefaultClockSkew, plus a margin.
		{"in progress", &adapt.InProgressError{Key: "k", LeaseExpiresAt: lease}, activity.ErrorTypeInProgress, true, [2]time.Duration{3900 * time.Millisecond, 4300 * time.Millisecond}},
		{"in progress, lease lapsed", &adapt.InProgressError{Key: "k", LeaseExpiresAt: time.Now().Add(-time.Minute)}, activity.ErrorTypeInProgress, true, [2]time.Duration{100 * time.Millisecond, 100 * time.Millisecond}},
		{"payload mismatch", &adapt.MismatchError{Key: "k", Existing: &store.Record{Status: store.StatusCompleted}}, activity.ErrorTypePayloadMismatch, false, [2]time.Duration{}},
		{"key missing", fmt.Errorf("%w (scope s)", guard.ErrKeyMissing), activity.ErrorTypeKeyMissing, false, [2]time.Duration{}},
		{"result unavailable", fmt.Errorf("%w (key k)", guard.ErrResultUnavailable), activity.ErrorTypeResultUnavailable, false, [2]time.Duration{}},
		{"invalid input", fmt.Errorf("%w: not JSON", guard.ErrInvalidInput), activity.ErrorTypeInvalidInput, false, [2]time.Duration{}},
		{"invalid option", fmt.Errorf("%w: nil codec", guard.ErrInvalidOption), activity.ErrorTypeInvalidOption, false, [2]time.Duration{}},
		{"step outside a call", adapt.ErrNotInCall, activity.ErrorTypeNotInCall, false, [2]time.Duration{}},
		{"lease lost", fmt.Errorf("%w (key k)", guard.ErrLeaseLost), activity.ErrorTypeLeaseLost, true, [2]time.Duration{}},
		{"lease lost, then a non-retryable error", fmt.Errorf("%w: %w", guard.ErrLeaseLost, temporal.NewNonRetryableApplicationError("card declined", "CardDeclined", nil)), activity.ErrorTypeLeaseLost, true, [2]time.Duration{}},
		{"not recorded", errors.Join(guard.ErrNotRecorded, &adapt.StoreError{Op: "complete", Key: "k", Err: errors.New("timeout")}), activity.ErrorTypeNotRecorded, true, [2]time.Duration{}},
		{"store throttled", &adapt.StoreError{Op: "acquire", Key: "k", Err: fmt.Errorf("slow down: %w", store.ErrThrottled)}, activity.ErrorTypeStoreThrottled, true, [2]time.Duration{}},
		{"store", &adapt.StoreError{Op: "acquire", Key: "k", Err: errors.New("connection refused")}, activity.ErrorTypeStore, true, [2]time.Duration{}},
		{"refused by its own condition", &adapt.RefusedError{Key: "k", Err: &store.OpError{Store: "dynamodb", Op: "Tx.Commit", Err: errors.New("ConditionalCheckFailed"), Refused: true}}, activity.ErrorTypeRefused, false, [2]time.Duration{}},
		{"definite", guard.Definite(errors.New("card declined")), activity.ErrorTypeDefinite, false, [2]time.Duration{}},
		{"definite application error", guard.Definite(temporal.NewNonRetryableApplicationError("card declined", "CardDeclined", nil)), "CardDeclined", false, [2]time.Duration{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := activity.TemporalError(tc.err)
			ae, ok := got.(*temporal.ApplicationError)
			if !ok {
				t.Fatalf("TemporalError(%v) = %T, want a top-level *temporal.ApplicationError", tc.err, got)
			}
			if ae.Type() != tc.wantType || ae.NonRetryable() == tc.retryable {
				t.Errorf("type %q, retryable %v; want %q, %v", ae.Type(), !ae.NonRetryable(), tc.wantType, tc.retryable)
			}
			if d := ae.NextRetryDelay(); d < tc.delay[0] || d > tc.delay[1] {
				t.Errorf("NextRetryDelay %v, want in [%v, %v]", d, tc.delay[0], tc.delay[1])
			}
		})
	}

	own := errors.New("the activity's own error")
	app := temporal.NewApplicationError("own", "Own")
	for _, err := range []error{nil, own, app, tactivity.ErrResultPending, context.Canceled, fmt.Errorf("acquire: %w", context.DeadlineExceeded)} {
		if got := activity.TemporalError(err); got != err {
			t.Errorf("TemporalError(%v) = %v, want it untouched", err, got)
		}
	}
}

// runActivity registers guarded as activity "Charge" in a fresh test
// activity environment configured by setup, runs it with args and returns
// the result and error.
func runActivity(t *testing.T, setup func(*testsuite.TestActivityEnvironment), guarded any, args ...any) (Receipt, error) {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	s.SetLogger(temporaltest.Logger())
	env := s.NewTestActivityEnvironment()
	if setup != nil {
		setup(env)
	}
	env.RegisterActivityWithOptions(guarded, tactivity.RegisterOptions{Name: "Charge"})
	v, err := env.ExecuteActivity("Charge", args...)
	var r Receipt
	if err == nil && v != nil && v.HasValue() {
		if derr := v.Get(&r); derr != nil {
			t.Fatalf("decoding the result: %v", derr)
		}
	}
	return r, err
}

// Acceptance 7 through the guard: each condition, produced for real, reaches
// Temporal as the documented error.
func TestGuardErrorsReachTemporal(t *testing.T) {
	ctx := context.Background()
	order := Order{OrderID: "o-1", Amount: 10}
	var runs atomic.Int32
	charge := func(ctx context.Context, o Order) (Receipt, error) {
		runs.Add(1)
		return newReceipt(ctx, o), nil
	}

	t.Run("in progress", func(t *testing.T) {
		g := newGuard(t)
		cl, _, err := adapt.Obtain(ctx, g, "Charge", order, guard.WithLease(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		runs.Store(0)
		_, err = runActivity(t, nil, activity.Must(activity.Wrap(g, charge)), order)
		ae := appError(t, err)
		if ae.Type() != activity.ErrorTypeInProgress || ae.NonRetryable() {
			t.Errorf("type %q non-retryable %v, want %q retryable", ae.Type(), ae.NonRetryable(), activity.ErrorTypeInProgress)
		}
		// Computed before now: it reaches at least from now to the lapse.
		if d, lapse := ae.NextRetryDelay(), time.Until(cl.LeaseExpiresAt.Add(g.ClockSkew())); d < lapse || d > 7*time.Second {
			t.Errorf("NextRetryDelay %v, want past the holder's lease end and the guard's clock skew (%v from now)", d, lapse)
		}
		if runs.Load() != 0 {
			t.Error("the activity ran while another call held the key")
		}
	})

	t.Run("key missing", func(t *testing.T) {
		_, err := runActivity(t, nil, activity.Must(activity.Wrap(newGuard(t), charge, activity.WithGuardOptions(guard.WithKeyPath("customer_id")),
			activity.WithGuardOptions(guard.WithRequireKey(true)))), order)
		if ae := appError(t, err); ae.Type() != activity.ErrorTypeKeyMissing || !ae.NonRetryable() {
			t.Errorf("type %q non-retryable %v, want %q non-retryable", ae.Type(), ae.NonRetryable(), activity.ErrorTypeKeyMissing)
		}
	})

	t.Run("result unavailable", func(t *testing.T) {
		g := newGuard(t)
		cl, _, err := adapt.Obtain(ctx, g, "Charge", order)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := adapt.Complete(ctx, g, *cl, store.ResultUnavailable, nil); err != nil {
			t.Fatal(err)
		}
		runs.Store(0)
		_, err = runActivity(t, nil, activity.Must(activity.Wrap(g, charge)), order)
		if ae := appError(t, err); ae.Type() != activity.ErrorTypeResultUnavailable || !ae.NonRetryable() {
			t.Errorf("type %q non-retryable %v, want %q non-retryable", ae.Type(), ae.NonRetryable(), activity.ErrorTypeResultUnavailable)
		}
		if runs.Load() != 0 {
			t.Error("the activity ran again after a completion without a result")
		}
	})

	t.Run("store throttled", func(t *testing.T) {
		g, err := guard.New(throttledStore{memory.New()})
		if err != nil {
			t.Fatal(err)
		}
		runs.Store(0)
		_, err = runActivity(t, nil, activity.Must(activity.Wrap(g, charge)), order)
		if ae := appError(t, err); ae.Type() != activity.ErrorTypeStoreThrottled || ae.NonRetryable() {
			t.Errorf("type %q non-retryable %v, want %q retryable", ae.Type(), ae.NonRetryable(), activity.ErrorTypeStoreThrottled)
		}
		if runs.Load() != 0 {
			t.Error("the activity ran although its key could not be claimed")
		}
	})

	t.Run("own error releases", func(t *testing.T) {
		g := newGuard(t)
		var n atomic.Int32
		failing := activity.Must(activity.Wrap(g, func(ctx context.Context, o Order) (Receipt, error) {
			n.Add(1)
			return Receipt{}, temporal.NewApplicationError("gateway timeout", "GatewayTimeout")
		}))
		for range 2 {
			_, err := runActivity(t, nil, failing, order)
			if ae := appError(t, err); ae.Type() != "GatewayTimeout" || ae.NonRetryable() {
				t.Errorf("type %q non-retryable %v, want the activity's own GatewayTimeout, retryable", ae.Type(), ae.NonRetryable())
			}
		}
		if n.Load() != 2 {
			t.Errorf("the failing activity ran %d times in 2 calls, want 2 (an error releases the key)", n.Load())
		}
	})
}

// throttledStore is a store whose every call is throttled.
type throttledStore struct{ store.Store }

var errThrottled = fmt.Errorf("ProvisionedThroughputExceeded: %w", store.ErrThrottled)

func (throttledStore) Acquire(context.Context, *store.Record, time.Time) (*store.Record, error) {
	return nil, errThrottled
}

// WithStoredFailures: a non-retryable application error is stored and
// replayed with its type, message and details; without it, the next call
// runs the activity again.
func TestStoredFailures(t *testing.T) {
	order := Order{OrderID: "o-1", Amount: 10}
	for _, stored := range []bool{true, false} {
		t.Run(fmt.Sprintf("stored=%v", stored), func(t *testing.T) {
			var runs atomic.Int32
			decline := func(ctx context.Context, o Order) (Receipt, error) {
				runs.Add(1)
				return Receipt{}, temporal.NewNonRetryableApplicationError("card declined", "CardDeclined", nil, "insufficient funds")
			}
			var opts []activity.Option
			if stored {
				opts = append(opts, activity.WithStoredFailures())
			}
			guarded := activity.Must(activity.Wrap(newGuard(t), decline, opts...))
			for i := range 2 {
				_, err := runActivity(t, nil, guarded, order)
				ae := appError(t, err)
				var detail string
				if ae.Type() != "CardDeclined" || !ae.NonRetryable() || ae.Message() != "card declined" || ae.Details(&detail) != nil || detail != "insufficient funds" {
					t.Errorf("call %d: type %q non-retryable %v message %q detail %q; want the original error", i, ae.Type(), ae.NonRetryable(), ae.Message(), detail)
				}
			}
			want := int32(2)
			if stored {
				want = 1
			}
			if runs.Load() != want {
				t.Errorf("the activity ran %d times in 2 calls, want %d", runs.Load(), want)
			}
		})
	}
}

// A key stamped into the activity's header wins over the input, and reaches
// an activity guarded with Guard through Interceptor. Inside, it is the
// explicit key; the idempotency key derived from it is another string.
func TestHeaderKeyWins(t *testing.T) {
	g := newGuard(t)
	const stamped = `step "charge" of order-workflow-1`
	var runs atomic.Int32
	explicitKeys := make(chan string, 2) // each run's explicit key
	guarded := activity.Must(activity.Wrap(g, func(ctx context.Context, o Order) (Receipt, error) {
		runs.Add(1)
		explicit, _ := activity.ExplicitKey(ctx)
		explicitKeys <- explicit
		if key, _ := guard.KeyFromContext(ctx); !strings.HasPrefix(key, "Charge#") || explicit != "" && strings.Contains(key, explicit) {
			t.Errorf("idempotency key %q, want Charge#<hash>", key)
		}
		return newReceipt(ctx, o), nil
	}))
	p, err := activity.EncodeKeyHeader(stamped)
	if err != nil {
		t.Fatal(err)
	}
	setup := func(env *testsuite.TestActivityEnvironment) {
		env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{activity.Must(activity.Interceptor(g))}})
		env.SetHeader(&commonpb.Header{Fields: map[string]*commonpb.Payload{activity.KeyHeader: p}})
	}
	first, err := runActivity(t, setup, guarded, Order{OrderID: "o-1", Amount: 10})
	if err != nil {
		t.Fatal(err)
	}
	second, err := runActivity(t, setup, guarded, Order{OrderID: "o-2", Amount: 20})
	if err != nil {
		t.Fatal(err)
	}
	if runs.Load() != 1 || first != second {
		t.Errorf("two inputs under one header key: %d runs, results %+v and %+v; want 1 run, equal results", runs.Load(), first, second)
	}
	if k := <-explicitKeys; k != stamped {
		t.Errorf("explicit key under the header %q, want %q", k, stamped)
	}
	if _, err := runActivity(t, nil, guarded, Order{OrderID: "o-2", Amount: 20}); err != nil || runs.Load() != 2 {
		t.Errorf("without the header: err %v, %d runs; want a second run", err, runs.Load())
	}
	if k := <-explicitKeys; k != "" {
		t.Errorf("explicit key without the header %q, want none", k)
	}
}

// An activity guarded both by Guard and by an interceptor policy is guarded
// once: no in-progress error against itself.
func TestGuardedTwiceRunsOnce(t *testing.T) {
	g := newGuard(t)
	var runs atomic.Int32
	guarded := activity.Must(activity.Wrap(g, func(ctx context.Context, o Order) (Receipt, error) {
		runs.Add(1)
		return newReceipt(ctx, o), nil
	}))
	setup := func(env *testsuite.TestActivityEnvironment) {
		env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{
			activity.Must(activity.Interceptor(g, activity.Policy{Activity: "Charge"})),
		}})
	}
	for range 2 {
		if _, err := runActivity(t, setup, guarded, Order{OrderID: "o-1"}); err != nil {
			t.Fatal(err)
		}
	}
	if runs.Load() != 1 {
		t.Errorf("%d runs, want 1", runs.Load())
	}
}

// Invalid options are reported when the activity is guarded, not on its
// first call.
func TestInvalidOptionsPanic(t *testing.T) {
	g := newGuard(t)
	charge := func(ctx context.Context, o Order) (Receipt, error) { return Receipt{}, nil }
	for name, f := range map[string]func(){
		"Guard": func() {
			activity.Must(activity.Wrap(g, charge, activity.WithGuardOptions(guard.WithKeyPath("order_id["))))
		},
		"Interceptor": func() {
			activity.Must(activity.Interceptor(g, activity.Policy{Activity: "Charge", Options: []activity.Option{activity.WithGuardOptions(guard.WithKeyPath("["))}}))
		},
		// Both name one call: every call of the activity would share one
		// key, or take over each other's claims.
		"Guard with an explicit key": func() { activity.Must(activity.Wrap(g, charge, activity.WithGuardOptions(guard.WithKey("k")))) },
		"Guard with a claim token":   func() { activity.Must(activity.Wrap(g, charge, activity.WithGuardOptions(adapt.WithClaimToken("t")))) },
		"Interceptor no name":        func() { activity.Must(activity.Interceptor(g, activity.Policy{})) },
		"Interceptor same one": func() {
			activity.Must(activity.Interceptor(g, activity.Policy{Activity: "A"}, activity.Policy{Activity: "A"}))
		},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s did not panic", name)
				}
			}()
			f()
		}()
	}
}

// The constructors report what their Must forms panic on as an error,
// which wraps guard.ErrInvalidOption for an invalid guard option.
func TestInvalidOptionsAreErrors(t *testing.T) {
	g := newGuard(t)
	charge := func(ctx context.Context, o Order) (Receipt, error) { return Receipt{}, nil }
	bad := activity.WithGuardOptions(guard.WithKeyPath("order_id["))
	if _, err := activity.Wrap(g, charge, bad); !errors.Is(err, guard.ErrInvalidOption) {
		t.Errorf("Wrap with an invalid key path = %v, want guard.ErrInvalidOption", err)
	}
	if _, err := activity.WrapNoInputNoResult(nil, func(context.Context) error { return nil }); err == nil {
		t.Error("WrapNoInputNoResult with a nil guard: no error")
	}
	if _, err := activity.Interceptor(g, activity.Policy{Activity: "Charge", Options: []activity.Option{bad}}); !errors.Is(err, guard.ErrInvalidOption) {
		t.Errorf("Interceptor with an invalid key path = %v, want guard.ErrInvalidOption", err)
	}
	if _, err := activity.Interceptor(g, activity.Policy{Activity: "A"}, activity.Policy{Activity: "A"}); err == nil {
		t.Error("Interceptor with two policies for one activity: no error")
	}
	if _, err := activity.Wrap(g, charge); err != nil {
		t.Errorf("Wrap with valid options = %v", err)
	}
}

// Each activity shape is guarded: with input, one run per input; without,
// keyed by execution scope, so two executions run twice, each under a key.
// Name gives the names Temporal derives.
func TestShapesAndNames(t *testing.T) {
	g := newGuard(t)
	var runs atomic.Int32
	var keys sync.Map
	count := func(ctx context.Context) {
		runs.Add(1)
		if k, ok := guard.KeyFromContext(ctx); ok {
			keys.Store(k, true)
		}
	}
	withInput := activity.Must(activity.Wrap(g, func(ctx context.Context, o Order) (Receipt, error) { count(ctx); return newReceipt(ctx, o), nil }))
	noInput := activity.Must(activity.WrapNoInput(g, func(ctx context.Context) (string, error) { count(ctx); return randomID(), nil }))
	noResult := activity.Must(activity.WrapNoResult(g, func(ctx context.Context, o Order) error { count(ctx); return nil }))
	neither := activity.Must(activity.WrapNoInputNoResult(g, func(ctx context.Context) error { count(ctx); return nil }))

	var s testsuite.WorkflowTestSuite
	s.SetLogger(temporaltest.Logger())
	for _, tc := range []struct {
		name     string
		fn       any
		args     []any
		wantRuns int32
	}{
		{"WithInput", withInput, []any{Order{OrderID: "o-1"}}, 1},
		{"NoResult", noResult, []any{Order{OrderID: "o-1"}}, 1},
		{"NoInput", noInput, nil, 2},
		{"NoInputNoResult", neither, nil, 2},
	} {
		runs.Store(0)
		keys.Clear()
		env := s.NewTestActivityEnvironment()
		env.RegisterActivityWithOptions(tc.fn, tactivity.RegisterOptions{Name: tc.name})
		for range 2 {
			if _, err := env.ExecuteActivity(tc.name, tc.args...); err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
		}
		nkeys := 0
		keys.Range(func(any, any) bool { nkeys++; return true })
		if runs.Load() != tc.wantRuns || nkeys != int(tc.wantRuns) {
			t.Errorf("%s: %d runs under %d keys in 2 calls, want %d guarded runs", tc.name, runs.Load(), nkeys, tc.wantRuns)
		}
	}

	if got := activity.Name(ChargeCard); got != "ChargeCard" {
		t.Errorf("Name(ChargeCard) = %q", got)
	}
	if got := activity.Name((&payments{}).Charge); got != "Charge" {
		t.Errorf("Name(method value) = %q", got)
	}
}

// ChargeCard is a top-level activity function, for Name and Register.
func ChargeCard(ctx context.Context, o Order) (Receipt, error) { return newReceipt(ctx, o), nil }
