package guard_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/memory"
)

func TestClaimCompleteAcrossSteps(t *testing.T) {
	m, _ := newMemory()
	g := mustGuard(t, m, guard.WithLease(time.Hour))
	cl, existing, err := adapt.Obtain(ctx, g, "wf", map[string]string{"order": "o-1"})
	if err != nil || cl == nil || existing != nil {
		t.Fatalf("Claim = %v, %v, %v", cl, existing, err)
	}
	// The claim travels as JSON between steps.
	b, _ := json.Marshal(cl)
	var back adapt.Claim
	if err := json.Unmarshal(b, &back); err != nil || back.Token != cl.Token || !back.LeaseExpiresAt.Equal(cl.LeaseExpiresAt) {
		t.Fatalf("claim did not survive JSON: %s", b)
	}
	// Held: a second claim is in progress.
	if _, _, err := adapt.Obtain(ctx, g, "wf", map[string]string{"order": "o-1"}); !errors.Is(err, guard.ErrInProgress) {
		t.Fatalf("second Claim = %v, want ErrInProgress", err)
	}
	ext, err := adapt.Extend(ctx, g, back, time.Now().Add(2*time.Hour))
	if err != nil || !ext.LeaseExpiresAt.After(back.LeaseExpiresAt) {
		t.Fatalf("Extend = %v, %v", ext, err)
	}
	if _, err := adapt.Complete(ctx, g, ext, store.ResultValue, []byte(`{"total":3}`)); err != nil {
		t.Fatalf("Complete = %v", err)
	}
	_, rec, err := adapt.Obtain(ctx, g, "wf", map[string]string{"order": "o-1"})
	if err != nil || rec == nil {
		t.Fatalf("Claim after completion = %v, %v; want the record", rec, err)
	}
	v, err := adapt.Decode[map[string]int](g, rec)
	if err != nil || v["total"] != 3 {
		t.Errorf("Decode = %v, %v", v, err)
	}
	// The same key through Do replays it too.
	got, out, err := adapt.Execute(ctx, g, "wf", map[string]string{"order": "o-1"}, func(ctxx context.Context) (map[string]int, error) { return nil, nil })
	if err != nil || out != guard.OutcomeReplayed || got["total"] != 3 {
		t.Errorf("Do after Complete = %v, %v, %v", got, out, err)
	}
}

func TestClaimFencedAndReleased(t *testing.T) {
	m, _ := newMemory()
	g := mustGuard(t, m)
	cl, _, err := adapt.Obtain(ctx, g, "wf", "k")
	if err != nil {
		t.Fatal(err)
	}
	stale := *cl
	stale.Token = "someone-else"
	if _, err := adapt.Complete(ctx, g, stale, store.ResultValue, []byte(`1`)); !errors.Is(err, guard.ErrLeaseLost) {
		t.Errorf("Complete with a stale token = %v, want ErrLeaseLost", err)
	}
	if err := adapt.Release(ctx, g, stale); !errors.Is(err, guard.ErrLeaseLost) {
		t.Errorf("Release with a stale token = %v, want ErrLeaseLost", err)
	}
	if err := adapt.Release(ctx, g, *cl); err != nil {
		t.Fatalf("Release = %v", err)
	}
	if again, _, err := adapt.Obtain(ctx, g, "wf", "k"); err != nil || again == nil {
		t.Errorf("Claim after Release = %v, %v", again, err)
	}
	if _, _, err := adapt.Obtain(ctx, g, "wf", ""); !errors.Is(err, guard.ErrKeyMissing) {
		t.Errorf("Claim of an empty selection = %v, want ErrKeyMissing", err)
	}
}

func TestClaimTokenMakesClaimReentrant(t *testing.T) {
	m, _ := newMemory()
	g := mustGuard(t, m, guard.WithLease(time.Hour))
	first, _, err := adapt.Obtain(ctx, g, "wf", "k", adapt.WithClaimToken("run-1"))
	if err != nil || first == nil || first.Token != "run-1" {
		t.Fatalf("Claim = %+v, %v", first, err)
	}
	// The same claimant claims again (it lost the first answer): it holds.
	again, _, err := adapt.Obtain(ctx, g, "wf", "k", adapt.WithClaimToken("run-1"))
	if err != nil || again == nil || again.Token != "run-1" {
		t.Fatalf("repeated Claim = %+v, %v; want the claim held again", again, err)
	}
	// Another claimant is still kept out.
	if _, _, err := adapt.Obtain(ctx, g, "wf", "k", adapt.WithClaimToken("run-2")); !errors.Is(err, guard.ErrInProgress) {
		t.Errorf("other claimant: %v, want ErrInProgress", err)
	}
	if _, err := adapt.Complete(ctx, g, *again, store.ResultValue, []byte(`1`)); err != nil {
		t.Fatal(err)
	}
	if cl, rec, err := adapt.Obtain(ctx, g, "wf", "k", adapt.WithClaimToken("run-1")); cl != nil || rec == nil || err != nil {
		t.Errorf("after completion: %v, %v, %v; want the record", cl, rec, err)
	}
	if _, err := adapt.Settings(g, guard.WithKeyPath("a[")); !errors.Is(err, guard.ErrInvalidOption) {
		t.Errorf("Settings = %v, want ErrInvalidOption", err)
	}
	if _, err := adapt.Settings(g, guard.WithKeyPath("a.b")); err != nil {
		t.Errorf("Settings of valid options = %v", err)
	}
}

// Settings reports what a call gets: the guard's defaults, overridden by
// the call's options.
func TestSettings(t *testing.T) {
	g := mustGuard(t, memory.New(), guard.WithTTL(48*time.Hour), guard.WithWait(10*time.Second))
	got, err := adapt.Settings(g, guard.WithLease(5*time.Second))
	want := adapt.CallSettings{TTL: 48 * time.Hour, Lease: 5 * time.Second, Mode: adapt.Wait, WaitBudget: 10 * time.Second,
		WaitInitial: adapt.DefaultWaitInitial, WaitMax: adapt.DefaultWaitMax}
	if err != nil || got != want {
		t.Errorf("Settings = %+v, %v; want %+v", got, err, want)
	}
	// The key path, the guard's default or the call's: an adapter whose
	// default key is not the input (a Nexus request ID) keys on the input
	// when the user selected part of it.
	for _, c := range []struct {
		opts []guard.Option
		call []guard.CallOption
		want string
	}{
		{nil, nil, ""},
		{[]guard.Option{guard.WithKeyPath("order_id")}, nil, "order_id"},
		{[]guard.Option{guard.WithKeyPath("order_id")}, []guard.CallOption{guard.WithKeyPath("@")}, "@"},
	} {
		got, err := adapt.Settings(mustGuard(t, memory.New(), c.opts...), c.call...)
		if err != nil || got.KeyPath != c.want {
			t.Errorf("Settings().KeyPath = %q, %v; want %q", got.KeyPath, err, c.want)
		}
	}
}

// WithDefaults gives way to what guard.New set and to earlier options of
// the call, and applies where neither set anything: an adapter's defaults
// never override the user's guard.
func TestWithDefaults(t *testing.T) {
	adapter := adapt.WithDefaults(guard.WithTTL(24*time.Hour), guard.WithWait(30*time.Second), guard.WithLease(3*time.Second))
	for _, c := range []struct {
		name string
		opts []guard.Option
		call []guard.CallOption
		want adapt.CallSettings
	}{
		{"plain guard", nil, []guard.CallOption{adapter},
			adapt.CallSettings{TTL: 24 * time.Hour, Lease: 3 * time.Second, Mode: adapt.Wait, WaitBudget: 30 * time.Second}},
		{"guard with its own TTL and mode", []guard.Option{guard.WithTTL(time.Hour), guard.WithWait(0)}, []guard.CallOption{adapter},
			adapt.CallSettings{TTL: time.Hour, Lease: 3 * time.Second, Mode: adapt.Reject, WaitBudget: adapt.DefaultWaitBudget}},
		{"guard waiting 10 s", []guard.Option{guard.WithWait(10 * time.Second)}, []guard.CallOption{adapter},
			adapt.CallSettings{TTL: 24 * time.Hour, Lease: 3 * time.Second, Mode: adapt.Wait, WaitBudget: 10 * time.Second}},
		{"the adapter's own option after its defaults", nil, []guard.CallOption{adapter, guard.WithTTL(time.Minute)},
			adapt.CallSettings{TTL: time.Minute, Lease: 3 * time.Second, Mode: adapt.Wait, WaitBudget: 30 * time.Second}},
		{"an option before the defaults", nil, []guard.CallOption{guard.WithLease(time.Minute), adapter},
			adapt.CallSettings{TTL: 24 * time.Hour, Lease: time.Minute, Mode: adapt.Wait, WaitBudget: 30 * time.Second}},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := mustGuard(t, memory.New(), c.opts...)
			got, err := adapt.Settings(g, c.call...)
			c.want.WaitInitial, c.want.WaitMax = adapt.DefaultWaitInitial, adapt.DefaultWaitMax
			if err != nil || got != c.want {
				t.Errorf("Settings = %+v, %v; want %+v", got, err, c.want)
			}
		})
	}
}

// Finish records an outcome as Do would: a result encoded with the codec
// and kept for the TTL, a definite error recorded, any other error and a
// filtered result released.
func TestFinish(t *testing.T) {
	m, _ := newMemory()
	g := mustGuard(t, m, guard.WithLease(time.Hour))
	claim := func(k string) adapt.Claim {
		t.Helper()
		cl, _, err := adapt.Obtain(ctx, g, "wf", k)
		if err != nil || cl == nil {
			t.Fatalf("Claim(%s) = %v, %v", k, cl, err)
		}
		return *cl
	}
	start := time.Now()
	rec, err := adapt.Finish(ctx, g, claim("value"), map[string]int{"total": 3}, nil, guard.WithTTL(48*time.Hour))
	if err != nil || rec == nil || string(rec.Result) != `{"total":3}` || rec.ExpiresAt.Before(start.Add(47*time.Hour)) {
		t.Errorf("Finish(value) = %+v, %v; want the JSON result kept for 48 h", rec, err)
	}
	declined := guard.Definite(errors.New("card declined"))
	if rec, err := adapt.Finish(ctx, g, claim("definite"), nil, declined); err != nil || rec == nil || rec.ResultKind != store.ResultError {
		t.Errorf("Finish(definite) = %+v, %v; want the error recorded", rec, err)
	}
	if _, err := adapt.Decode[int](g, mustGet(t, m, "wf", "definite", g)); err == nil || err.Error() != "card declined" {
		t.Errorf("replay of the definite error = %v", err)
	}
	for name, finish := range map[string]func(adapt.Claim) (*store.Record, error){
		"error": func(cl adapt.Claim) (*store.Record, error) {
			return adapt.Finish(ctx, g, cl, nil, errors.New("timeout"))
		},
		"filtered": func(cl adapt.Claim) (*store.Record, error) {
			return adapt.Finish(ctx, g, cl, 0, nil, guard.WithResultFilter(func(v any) bool { return v != 0 }))
		},
	} {
		if rec, err := finish(claim(name)); err != nil || rec != nil {
			t.Errorf("Finish(%s) = %+v, %v; want released", name, rec, err)
		}
		if cl, rec, err := adapt.Obtain(ctx, g, "wf", name); cl == nil || rec != nil || err != nil {
			t.Errorf("Claim after Finish(%s) = %v, %v, %v; want the key free", name, cl, rec, err)
		}
	}
}

func mustGet(t *testing.T, s store.Store, scope string, input any, g *guard.Guard) *store.Record {
	t.Helper()
	key, _, err := g.Key(scope, input)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := s.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// Fixed makes a call option an adapter sets itself a reported mistake, in
// either order, while the guard's defaults give way to it silently.
func TestFixed(t *testing.T) {
	g := mustGuard(t, memory.New(), guard.WithKeyPath("order_id"), guard.WithTTL(time.Hour))
	adapter := adapt.Fixed(guard.WithKeyPath("k"), guard.WithCodec(adapt.JSON))
	if _, err := adapt.Settings(g, adapter); err != nil {
		t.Errorf("the guard's default key path = %v; want it to give way", err)
	}
	for _, opts := range [][]guard.CallOption{
		{adapter, guard.WithKeyPath("id")},
		{guard.WithCodec(adapt.JSON), adapter},
	} {
		if _, err := adapt.Settings(g, opts...); !errors.Is(err, guard.ErrInvalidOption) {
			t.Errorf("a user's option for what the adapter fixed = %v; want ErrInvalidOption", err)
		}
	}
	if _, err := adapt.Settings(g, adapter, guard.WithTTL(time.Minute)); err != nil {
		t.Errorf("an option the adapter does not fix = %v", err)
	}
	// A step inside such a call may set its own codec.
	fn := func(ctx context.Context) (int, error) {
		return guard.Step(ctx, "s", func(context.Context) (int, error) { return 1, nil }, guard.WithCodec(adapt.JSON))
	}
	if _, err := guard.Do(ctx, g, "job", map[string]string{"k": "1"}, fn, adapter); err != nil {
		t.Errorf("a step's own codec inside an adapter's call = %v", err)
	}
}
