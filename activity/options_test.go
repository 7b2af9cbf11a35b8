package activity_test

import (
	"context"
	"testing"
	"time"

	tactivity "go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/idemguard/idemguard/activity"
	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/testing/temporaltest"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/memory"
)

// Defaults given to guard.New reach guarded activities over the activity
// package's own (a lease of the heartbeat timeout): a lease of 7 s, a TTL
// of 48 h, and a wait of 10 s, so that a duplicate with a single attempt
// waits for the holder and replays its result instead of failing with
// IdempotencyInProgress. WithGuardOptions wins over guard.New (a lease of
// 9 s); without defaults, the lease is the heartbeat timeout.
func TestGuardDefaultsReachActivity(t *testing.T) {
	c := temporaltest.Client(t, client.Options{})
	s := memory.New()
	const ttl = 48 * time.Hour
	g, err := guard.New(s, guard.WithLease(7*time.Second), guard.WithTTL(ttl), guard.WithWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := guard.New(s)
	if err != nil {
		t.Fatal(err)
	}
	var effects ledger
	leases := make(chan time.Duration, 8)
	charge := func(ctx context.Context, o Order) (Receipt, error) {
		effects.add(o.OrderID)
		key, _ := guard.KeyFromContext(ctx)
		rec, err := s.Get(ctx, key)
		if err != nil {
			return Receipt{}, err
		}
		leases <- time.Until(rec.LeaseExpiresAt)
		time.Sleep(time.Second) // the duplicate arrives while this runs
		return newReceipt(ctx, o), nil
	}
	byOrder := guard.WithKeyPath("order_id")
	tq := temporaltest.Name(t, "tq")
	temporaltest.Worker(t, c, tq, worker.Options{}, func(r worker.Registry) {
		r.RegisterWorkflow(chargeWorkflow)
		r.RegisterActivityWithOptions(activity.Must(activity.Wrap(g, charge, activity.WithGuardOptions(byOrder))), tactivity.RegisterOptions{Name: "Charge"})
		r.RegisterActivityWithOptions(activity.Must(activity.Wrap(g, charge, activity.WithGuardOptions(byOrder, guard.WithLease(9*time.Second)))),
			tactivity.RegisterOptions{Name: "Override"})
		r.RegisterActivityWithOptions(activity.Must(activity.Wrap(plain, charge, activity.WithGuardOptions(byOrder))), tactivity.RegisterOptions{Name: "Plain"})
	})
	params := func(activityType, orderID string, attempts int32) chargeParams {
		return chargeParams{Order: Order{OrderID: orderID, Amount: 1}, Activity: activityType, MaxAttempts: attempts,
			HeartbeatTimeout: 2 * time.Second, StartToClose: time.Minute}
	}

	first := temporaltest.Start(t, c, client.StartWorkflowOptions{ID: temporaltest.Name(t, "wf"), TaskQueue: tq}, chargeWorkflow, params("Charge", "o-defaults", 1))
	lease := <-leases
	second := temporaltest.Start(t, c, client.StartWorkflowOptions{ID: temporaltest.Name(t, "wf"), TaskQueue: tq}, chargeWorkflow, params("Charge", "o-defaults", 1))
	var a, b Receipt
	if err := first.Get(t.Context(), &a); err != nil {
		t.Fatalf("first: %v", err)
	}
	if err := second.Get(t.Context(), &b); err != nil {
		t.Fatalf("the duplicate, with one attempt, did not wait for the holder: %v", err)
	}
	if a != b || effects.count("o-defaults") != 1 {
		t.Errorf("results %+v, %+v after %d charges; want equal results after 1", a, b, effects.count("o-defaults"))
	}
	if lease <= 6*time.Second || lease > 7*time.Second {
		t.Errorf("the claim's lease was %v, want guard.New's 7 s rather than the 2 s heartbeat timeout", lease)
	}
	assertTTL(t, s, g, "Charge", "o-defaults", ttl)

	for _, tc := range []struct {
		activity  string
		min, max  time.Duration
		rationale string
	}{
		{"Override", 8 * time.Second, 9 * time.Second, "WithGuardOptions' 9 s"},
		{"Plain", time.Second, 2 * time.Second, "the 2 s heartbeat timeout"},
	} {
		if err := temporaltest.Run(t, c, tq, temporaltest.Name(t, "wf"), time.Minute, nil, chargeWorkflow, params(tc.activity, "o-"+tc.activity, 1)); err != nil {
			t.Fatalf("%s: %v", tc.activity, err)
		}
		if lease := <-leases; lease <= tc.min || lease > tc.max {
			t.Errorf("%s: the claim's lease was %v, want %s", tc.activity, lease, tc.rationale)
		}
	}
}

// assertTTL fails the test unless the record of orderID's call of
// activityType lives for about ttl more.
func assertTTL(t *testing.T, s store.Store, g *guard.Guard, activityType, orderID string, ttl time.Duration) {
	t.Helper()
	key, _, err := g.Key(activityType, Order{OrderID: orderID}, guard.WithKeyPath("order_id"))
	if err != nil {
		t.Fatal(err)
	}
	rec, err := s.Get(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	if life := time.Until(rec.ExpiresAt); life < ttl-time.Minute || life > ttl {
		t.Errorf("the record lives %v more, want guard.New's TTL %v", life, ttl)
	}
}
