package activity_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"

	"github.com/idemguard/idemguard/activity"
	"github.com/idemguard/idemguard/guard"
)

// keyedCharges returns a guarded charge activity that counts its runs and
// sends the explicit key each run sees to keys.
func keyedCharges(g *guard.Guard, runs *atomic.Int32, keys chan<- string) func(context.Context, Order) (Receipt, error) {
	return activity.Must(activity.Wrap(g, func(ctx context.Context, o Order) (Receipt, error) {
		runs.Add(1)
		k, _ := activity.ExplicitKey(ctx)
		keys <- k
		return newReceipt(ctx, o), nil
	}))
}

// withHeader returns a setup that runs the activity under the interceptor
// (keys only) with p, if not nil, as its stamped key header.
func withHeader(p *commonpb.Payload) func(*testsuite.TestActivityEnvironment) {
	return func(env *testsuite.TestActivityEnvironment) {
		env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{activity.Must(activity.Interceptor(nil))}})
		if p != nil {
			env.SetHeader(&commonpb.Header{Fields: map[string]*commonpb.Payload{activity.KeyHeader: p}})
		}
	}
}

// A key the workflow stamped into the activity's header is the activity's
// key: two inputs under one key run once and share the result; another key
// runs again; the same key in another activity type is another key (its
// scope is the type); an empty key changes nothing, so the input is the
// key.
func TestStampedKey(t *testing.T) {
	g := newGuard(t)
	var runs atomic.Int32
	keys := make(chan string, 8)
	charge := keyedCharges(g, &runs, keys)
	run := func(key, activityType string, o Order) Receipt {
		t.Helper()
		p, err := activity.EncodeKeyHeader(key)
		if err != nil {
			t.Fatal(err)
		}
		r, err := runActivityAs(t, activityType, withHeader(p), charge, o)
		if err != nil {
			t.Fatalf("%s under key %q: %v", activityType, key, err)
		}
		return r
	}

	first := run("order-7/charge", "Charge", Order{OrderID: "o-1", Amount: 10})
	second := run("order-7/charge", "Charge", Order{OrderID: "o-2", Amount: 20})
	if runs.Load() != 1 || second != first {
		t.Errorf("two inputs under one key: %d runs, results %+v and %+v; want 1 run and equal results", runs.Load(), first, second)
	}
	if other := run("order-8/charge", "Charge", Order{OrderID: "o-1", Amount: 10}); runs.Load() != 2 || other == first {
		t.Errorf("another key: %d runs, result %+v; want a second run", runs.Load(), other)
	}
	if refund := run("order-7/charge", "Refund", Order{OrderID: "o-1", Amount: 10}); runs.Load() != 3 || refund == first {
		t.Errorf("the key in another activity type: %d runs, result %+v; want a third run", runs.Load(), refund)
	}
	// Without a key the input is the key: o-1 was only ever keyed
	// explicitly, so it runs, and then replays.
	a := run("", "Charge", Order{OrderID: "o-1", Amount: 10})
	b := run("", "Charge", Order{OrderID: "o-1", Amount: 10})
	if runs.Load() != 4 || a != b || a == first {
		t.Errorf("no key: %d runs, results %+v and %+v; want a fourth run, then its replay", runs.Load(), a, b)
	}
	var seen []string
	for len(keys) > 0 {
		seen = append(seen, <-keys)
	}
	if want := []string{"order-7/charge", "order-8/charge", "order-7/charge", ""}; !slices.Equal(seen, want) {
		t.Errorf("the runs saw explicit keys %q, want %q", seen, want)
	}
}

// The interceptor hands the key stamped into the activity's header to the
// guarded activity; without a header the input is the key. A header that
// is not a string fails the activity, non-retryable, with
// ErrorTypeInvalidInput, before it runs.
func TestKeyHeader(t *testing.T) {
	g := newGuard(t)
	var runs atomic.Int32
	keys := make(chan string, 8)
	guarded := keyedCharges(g, &runs, keys)
	stamped, err := activity.EncodeKeyHeader(`step "charge" of order-workflow-2`)
	if err != nil {
		t.Fatal(err)
	}
	notAString, err := converter.GetDefaultDataConverter().ToPayload(42)
	if err != nil {
		t.Fatal(err)
	}

	first, err := runActivity(t, withHeader(stamped), guarded, Order{OrderID: "o-1", Amount: 10})
	if err != nil {
		t.Fatal(err)
	}
	second, err := runActivity(t, withHeader(stamped), guarded, Order{OrderID: "o-2", Amount: 20})
	if err != nil {
		t.Fatal(err)
	}
	if runs.Load() != 1 || second != first {
		t.Errorf("two inputs under one header key: %d runs, results %+v and %+v; want 1 run and equal results", runs.Load(), first, second)
	}
	if k := <-keys; k != `step "charge" of order-workflow-2` {
		t.Errorf("explicit key inside the activity %q, want the stamped one", k)
	}

	// No header: the context is left as it is, and the input is the key.
	if _, err := runActivity(t, withHeader(nil), guarded, Order{OrderID: "o-2", Amount: 20}); err != nil || runs.Load() != 2 {
		t.Errorf("without a header: %v after %d runs, want a second run", err, runs.Load())
	}
	if k := <-keys; k != "" {
		t.Errorf("explicit key without a header %q, want none", k)
	}

	_, err = runActivity(t, withHeader(notAString), guarded, Order{OrderID: "o-3", Amount: 30})
	if ae := appError(t, err); ae.Type() != activity.ErrorTypeInvalidInput || !ae.NonRetryable() {
		t.Errorf("malformed header: type %q, non-retryable %v; want %q, non-retryable", ae.Type(), ae.NonRetryable(), activity.ErrorTypeInvalidInput)
	}
	if runs.Load() != 2 {
		t.Errorf("the activity ran under a malformed header (%d runs, want 2)", runs.Load())
	}
}
