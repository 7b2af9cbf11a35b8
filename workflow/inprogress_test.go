package workflow_test

import (
	"errors"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/idemguard/idemguard/activity"
	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/internal/testing/temporaltest"
	"github.com/idemguard/idemguard/store/memory"
	"github.com/idemguard/idemguard/workflow"
)

// A workflow that held its key was terminated (a claim nobody extends).
// A duplicate that waits for it sleeps until the holder's lease can have
// lapsed on the guard's clock (its end plus the guard's clock skew, here
// 3 s) and then claims once more, and takes the key over: two claims, not
// a claim that meets the lease again and a sleep of a whole backoff step.
// A duplicate under guard.WithWait(0) fails with a next-retry delay that
// runs past the same point.
func TestInProgressWaitsForTheLapse(t *testing.T) {
	c := temporaltest.Client(t, client.Options{})
	const skew = 3 * time.Second
	s := memory.New()
	g, err := guard.New(s, guard.WithClockSkew(skew))
	if err != nil {
		t.Fatal(err)
	}
	var ships ledger
	// Backoff steps longer than the test: only the wake-up aimed at the
	// lapse can take the key over in time.
	tq := shipWorker(t, c, g, &ships, workflow.WithGuardOptions(adapt.WithWaitBackoff(time.Minute, time.Minute)))
	rejectTQ := shipWorker(t, c, g, &ships, workflow.WithGuardOptions(guard.WithWait(0)))
	hold := func(o Order) time.Time {
		t.Helper()
		cl, _, err := adapt.Obtain(t.Context(), g, "shipOrder", o, guard.WithKeyPath("order_id"), guard.WithLease(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		return cl.LeaseExpiresAt
	}

	waiting := Order{OrderID: "o-terminated", Amount: 1}
	hold(waiting)
	id := temporaltest.Name(t, "waiter")
	if err := temporaltest.Run(t, c, tq, id, 30*time.Second, nil, "shipOrder", waiting); err != nil {
		t.Fatalf("the duplicate of a terminated holder: %v; want it to take the key over once the lease lapsed", err)
	}
	claims := 0
	for _, la := range localActivities(t, temporaltest.History(t, c, id, "")) {
		if la == "IdempotencyClaim" {
			claims++
		}
	}
	if claims != 2 || ships.count("ship") != 1 {
		t.Errorf("%d claims, %d shipments; want 2 claims (held, then taken over) and 1 shipment", claims, ships.count("ship"))
	}

	rejected := Order{OrderID: "o-terminated-2", Amount: 1}
	leaseEnd := hold(rejected)
	err = temporaltest.Run(t, c, rejectTQ, temporaltest.Name(t, "rejected"), 30*time.Second, nil, "shipOrder", rejected)
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.Type() != activity.ErrorTypeInProgress {
		t.Fatalf("duplicate under guard.WithWait(0): %v; want %s", err, activity.ErrorTypeInProgress)
	}
	// The delay was computed before now: it must reach past the lapse
	// from now on.
	if lapse := time.Until(leaseEnd.Add(skew)); ae.NextRetryDelay() < lapse {
		t.Errorf("NextRetryDelay %v; want at least %v, to the holder's lease end plus the guard's clock skew", ae.NextRetryDelay(), lapse)
	}
}
