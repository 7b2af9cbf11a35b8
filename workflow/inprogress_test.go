package workflow_test

import (
	"context"
	"errors"
	"fmt"
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
// A duplicate that waits for it takes the key over once the holder's lease
// can have lapsed on the guard's clock (its end plus the guard's clock
// skew, here 3 s): within its claim's wait slice when the slice reaches
// past the lapse (a workflow task timeout of 30 s, slices of 15 s), one
// claim; else, after a slice (a workflow task timeout of 2 s, slices of
// 1 s), it sleeps until the lapse and claims once more, two claims, not a
// claim that meets the lease again and a sleep of a whole backoff step.
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

	for i, tc := range []struct {
		taskTimeout    time.Duration
		claims, sleeps int
	}{{30 * time.Second, 1, 0}, {2 * time.Second, 2, 1}} {
		waiting := Order{OrderID: fmt.Sprintf("o-terminated-%d", i), Amount: 1}
		hold(waiting)
		id := temporaltest.Name(t, "waiter")
		run := temporaltest.Start(t, c, client.StartWorkflowOptions{ID: id, TaskQueue: tq, WorkflowTaskTimeout: tc.taskTimeout}, "shipOrder", waiting)
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		err := run.Get(ctx, nil)
		cancel()
		if err != nil {
			t.Fatalf("the duplicate of a terminated holder: %v; want it to take the key over once the lease lapsed", err)
		}
		h := temporaltest.History(t, c, id, "")
		if n, slept := claims(t, h), sleeps(t, h); n != tc.claims || slept != tc.sleeps || ships.count("ship") != i+1 {
			t.Errorf("task timeout %v: %d claims, %d sleeps, %d shipments; want %d claims, %d sleeps (held, then taken over) and %d shipments",
				tc.taskTimeout, n, slept, ships.count("ship"), tc.claims, tc.sleeps, i+1)
		}
	}

	rejected := Order{OrderID: "o-terminated-rejected", Amount: 1}
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
