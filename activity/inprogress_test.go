package activity_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	tactivity "go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"

	"github.com/idemguard/idemguard/activity"
	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/internal/testing/temporaltest"
)

// A worker died holding an activity's key (a claim nobody extends). The
// next attempt finds it in progress and fails with IdempotencyInProgress,
// whose next-retry delay ends once the holder's lease can have lapsed on
// the guard's clock (its end plus the guard's clock skew), not at the
// retry policy's first interval nor at the bare lease end: so the retry
// after it takes the key over, and the activity runs on that attempt. The
// order of events is asserted, not their speed.
func TestRetryOfInProgressComesAfterTheLease(t *testing.T) {
	c := temporaltest.Client(t, client.Options{})
	const skew = 1500 * time.Millisecond
	g := newGuard(t, guard.WithClockSkew(skew))
	order := Order{OrderID: "o-held", Amount: 7}
	cl, _, err := adapt.Obtain(t.Context(), g, "Charge", order, guard.WithLease(4*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	lapse := cl.LeaseExpiresAt.Add(skew) // when a claimant may take it over

	type attempt struct {
		started time.Time
		errType string
	}
	var mu sync.Mutex
	attempts := map[int32]attempt{} // protected by mu
	ran := []int32{}                // protected by mu
	charge := activity.Must(activity.Wrap(g, func(ctx context.Context, o Order) (Receipt, error) {
		mu.Lock()
		ran = append(ran, tactivity.GetInfo(ctx).Attempt)
		mu.Unlock()
		return newReceipt(ctx, o), nil
	}))
	observed := func(ctx context.Context, o Order) (Receipt, error) {
		started := time.Now()
		r, err := charge(ctx, o)
		a := attempt{started: started}
		var ae *temporal.ApplicationError
		if errors.As(err, &ae) {
			a.errType = ae.Type()
		}
		mu.Lock()
		attempts[tactivity.GetInfo(ctx).Attempt] = a
		mu.Unlock()
		return r, err
	}
	tq := temporaltest.Name(t, "tq")
	temporaltest.Worker(t, c, tq, worker.Options{}, func(r worker.Registry) {
		r.RegisterWorkflow(chargeWorkflow)
		r.RegisterActivityWithOptions(observed, tactivity.RegisterOptions{Name: "Charge"})
	})
	var got Receipt
	if err := temporaltest.Run(t, c, tq, temporaltest.Name(t, "wf"), time.Minute, &got, chargeWorkflow,
		chargeParams{Order: order, MaxAttempts: 20}); err != nil {
		t.Fatalf("workflow: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	first := attempts[1]
	if first.errType != activity.ErrorTypeInProgress || !first.started.Before(lapse) {
		t.Fatalf("attempt 1 started %v before the lease could lapse and ended with %q; want it before, with %s (the test did not set up a held key)",
			lapse.Sub(first.started), first.errType, activity.ErrorTypeInProgress)
	}
	if len(ran) != 1 || ran[0] != 2 || got.Attempt != 2 {
		t.Errorf("the activity ran in attempts %v (result from attempt %d); want it to run once, in attempt 2, the first retry", ran, got.Attempt)
	}
	if second, ok := attempts[2]; ok && second.started.Before(lapse) {
		t.Errorf("attempt 2 started %v before the holder's lease could lapse (its end plus the guard's clock skew)", lapse.Sub(second.started))
	}
}
