package activity_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	tactivity "go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/idemguard/idemguard/activity"
	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/internal/testing/temporaltest"
)

// An activity with a heartbeat timeout that waits (guard.WithWait) for
// another execution's claim heartbeats while it waits: its one attempt
// outlives several heartbeat timeouts, and runs the function once the
// holder releases the key.
func TestWaitingActivityHeartbeats(t *testing.T) {
	c := temporaltest.Client(t, client.Options{})
	g := newGuard(t)
	order := Order{OrderID: "o-wait-beat", Amount: 3}
	cl, _, err := adapt.Obtain(t.Context(), g, "Charge", order, guard.WithLease(time.Minute))
	if err != nil || cl == nil {
		t.Fatalf("claim: %v, %v", cl, err)
	}
	var ran atomic.Int64
	started := make(chan struct{}, 1)
	charge := activity.Must(activity.Wrap(g, func(ctx context.Context, o Order) (Receipt, error) {
		ran.Add(1)
		return newReceipt(ctx, o), nil
	}, activity.WithGuardOptions(guard.WithWait(time.Minute))))
	observed := func(ctx context.Context, o Order) (Receipt, error) {
		select {
		case started <- struct{}{}:
		default:
		}
		return charge(ctx, o)
	}
	tq := temporaltest.Name(t, "tq")
	temporaltest.Worker(t, c, tq, worker.Options{}, func(r worker.Registry) {
		r.RegisterWorkflow(chargeWorkflow)
		r.RegisterActivityWithOptions(observed, tactivity.RegisterOptions{Name: "Charge"})
	})
	go func() {
		<-started
		// Hold the key for three heartbeat timeouts, then give it up.
		time.Sleep(3 * time.Second)
		if err := adapt.Release(context.Background(), g, *cl); err != nil {
			t.Errorf("release: %v", err)
		}
	}()
	var got Receipt
	if err := temporaltest.Run(t, c, tq, temporaltest.Name(t, "wf"), time.Minute, &got, chargeWorkflow,
		chargeParams{Order: order, MaxAttempts: 1, StartToClose: 30 * time.Second, HeartbeatTimeout: time.Second}); err != nil {
		t.Fatalf("workflow: %v (a waiting activity that does not heartbeat times out)", err)
	}
	if got.Attempt != 1 || ran.Load() != 1 {
		t.Errorf("got %+v with %d runs; want one run, in the first attempt, once the key was released", got, ran.Load())
	}
}
