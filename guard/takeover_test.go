package guard_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/internal/telemetry"
	"github.com/idemguard/idemguard/store"
)

// takeovers sums idemguard.claim.taken_over by scope, checking that every
// point carries the store; absent, the counter counts 0.
func takeovers(t *testing.T, h *otelHarness) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	agg, ok := h.metrics(t)[telemetry.MetricClaimTakenOver]
	if !ok {
		return out
	}
	sum, ok := agg.(metricdata.Sum[int64])
	if !ok || !sum.IsMonotonic {
		t.Fatalf("%s is %T, want a monotonic int64 counter", telemetry.MetricClaimTakenOver, agg)
	}
	for _, dp := range sum.DataPoints {
		s, _ := dp.Attributes.Value(telemetry.ScopeKey)
		if st, _ := dp.Attributes.Value(telemetry.StoreKey); st.AsString() != "memory" {
			t.Errorf("%s point without the store: %v", telemetry.MetricClaimTakenOver, dp.Attributes.ToSlice())
		}
		out[s.AsString()] += dp.Value
	}
	return out
}

// Live contention is not a stuck claim: duplicates that meet a running
// holder, turned away (ErrInProgress) or waiting in Wait mode, count no
// takeover.
func TestTakeoverNotCountedForContention(t *testing.T) {
	h := newOtel()
	m, _ := newMemory()
	holder := mustGuard(t, m, h.opts...)
	rejected := mustGuard(t, m, h.opts...)
	waiter := mustGuard(t, m, append(h.opts, guard.WithWait(5*time.Second), adapt.WithWaitBackoff(time.Millisecond, 4*time.Millisecond))...)
	inside, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := guard.Do(ctx, holder, "ship", "k", func(context.Context) (int, error) { close(inside); <-release; return 1, nil })
		done <- err
	}()
	<-inside
	for range 3 {
		if _, err := guard.Do(ctx, rejected, "ship", "k", func(context.Context) (int, error) { return 2, nil }); !errors.Is(err, guard.ErrInProgress) {
			t.Fatalf("a duplicate of a running call: %v, want ErrInProgress", err)
		}
	}
	time.AfterFunc(20*time.Millisecond, func() { close(release) })
	if v, out, err := adapt.Execute(ctx, waiter, "ship", "k", func(context.Context) (int, error) { return 3, nil }); v != 1 || out != guard.OutcomeReplayed {
		t.Fatalf("a waiting duplicate: %d, %v, %v; want the holder's 1, replayed", v, out, err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := callCount(t, h, "ship", "in_progress"); n != 3 {
		t.Errorf("calls{in_progress} = %d, want 3", n)
	}
	if got := takeovers(t, h); len(got) != 0 {
		t.Errorf("%s = %v after live contention only, want none", telemetry.MetricClaimTakenOver, got)
	}
}

// A claim left by a holder that died (its lease lapsed without a
// completion) is taken over by the next call, which counts it in
// idemguard.claim.taken_over by scope and store, adds an idemguard.takeover
// event with the dead holder's lease end to its acquire span, and logs it.
// A takeover of a step's claim counts under its call's scope.
func TestTakeoverCountedForLapsedClaims(t *testing.T) {
	h := newOtel()
	m := newMemoryStore()
	clock := newFakeClock()
	var logs strings.Builder
	dead := mustGuard(t, m, adapt.WithClock(clock), guard.WithLease(30*time.Second))
	taker := mustGuard(t, m, append(h.opts, adapt.WithClock(clock), guard.WithLease(30*time.Second), guard.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))...)

	cl, _, err := adapt.Obtain(ctx, dead, "export", "e-1")
	if err != nil || cl == nil {
		t.Fatalf("claim: %v, %v", cl, err)
	}
	clock.Advance(45 * time.Second) // past the lease and the clock skew: the holder is gone
	h.reset()
	if _, out, err := adapt.Execute(ctx, taker, "export", "e-1", func(context.Context) (int, error) { return 2, nil }); out != guard.OutcomeExecuted {
		t.Fatalf("a call after its key's holder died: %v, %v; want executed", out, err)
	}
	if got := takeovers(t, h); len(got) != 1 || got["export"] != 1 {
		t.Errorf("%s = %v, want export: 1", telemetry.MetricClaimTakenOver, got)
	}
	acq := spanNamed(t, h.ended(), telemetry.SpanAcquire)
	var events int
	for _, e := range acq.Events() {
		if e.Name != telemetry.EventTakeover {
			continue
		}
		events++
		for _, a := range e.Attributes {
			if a.Key == telemetry.LeaseExpiresKey && a.Value.AsString() != cl.LeaseExpiresAt.UTC().Format(time.RFC3339Nano) {
				t.Errorf("takeover event lease end %s, want the dead holder's %s", a.Value.AsString(), cl.LeaseExpiresAt.UTC().Format(time.RFC3339Nano))
			}
		}
	}
	if events != 1 {
		t.Errorf("%d takeover events on the acquire span %v, want 1", events, acq.Events())
	}
	if !strings.Contains(logs.String(), "lease lapsed") || !strings.Contains(logs.String(), "idemguard.scope=export") {
		t.Errorf("log = %q, want a warning about the takeover with its scope", logs.String())
	}

	// A step's claim left in progress by a dead attempt of its call.
	step := func(ctx context.Context) (int, error) {
		return guard.Step(ctx, "charge", func(context.Context) (int, error) { return 1, nil })
	}
	if _, err := guard.Do(ctx, taker, "order", "o-1", step); err != nil {
		t.Fatal(err)
	}
	var stepKey, callKey string
	m.each(func(r store.Record) {
		switch {
		case strings.HasPrefix(r.Key, "order/charge#"):
			stepKey = r.Key
		case strings.HasPrefix(r.Key, "order#"):
			callKey = r.Key
		}
	})
	if stepKey == "" || callKey == "" {
		t.Fatal("the call's and the step's records are not in the store")
	}
	for _, k := range []string{stepKey, callKey} {
		if err := m.Delete(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	now := clock.Now()
	stale := &store.Record{Key: stepKey, Status: store.StatusInProgress, Token: "dead",
		ExpiresAt: now.Add(time.Hour), LeaseExpiresAt: now.Add(-time.Minute)}
	if _, err := m.Acquire(ctx, stale, now.Add(-2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, err := guard.Do(ctx, taker, "order", "o-1", step); err != nil {
		t.Fatal(err)
	}
	if got := takeovers(t, h); len(got) != 2 || got["order"] != 1 {
		t.Errorf("%s = %v, want export: 1 and order: 1 (a step counts under its call's scope)", telemetry.MetricClaimTakenOver, got)
	}
}
