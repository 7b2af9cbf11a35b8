package guard_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/memory"
)

func TestClaimCompleteAcrossSteps(t *testing.T) {
	m, _ := newMemory()
	g := mustGuard(t, m, guard.WithLease(time.Hour))
	cl, existing, err := g.Claim(ctx, "wf", map[string]string{"order": "o-1"})
	if err != nil || cl == nil || existing != nil {
		t.Fatalf("Claim = %v, %v, %v", cl, existing, err)
	}
	// The claim travels as JSON between steps.
	b, _ := json.Marshal(cl)
	var back guard.Claim
	if err := json.Unmarshal(b, &back); err != nil || back.Token != cl.Token || !back.LeaseExpiresAt.Equal(cl.LeaseExpiresAt) {
		t.Fatalf("claim did not survive JSON: %s", b)
	}
	// Held: a second claim is in progress.
	if _, _, err := g.Claim(ctx, "wf", map[string]string{"order": "o-1"}); !errors.Is(err, guard.ErrInProgress) {
		t.Fatalf("second Claim = %v, want ErrInProgress", err)
	}
	ext, err := g.Extend(ctx, back, time.Now().Add(2*time.Hour))
	if err != nil || !ext.LeaseExpiresAt.After(back.LeaseExpiresAt) {
		t.Fatalf("Extend = %v, %v", ext, err)
	}
	if _, err := g.Complete(ctx, ext, store.ResultValue, []byte(`{"total":3}`)); err != nil {
		t.Fatalf("Complete = %v", err)
	}
	_, rec, err := g.Claim(ctx, "wf", map[string]string{"order": "o-1"})
	if err != nil || rec == nil {
		t.Fatalf("Claim after completion = %v, %v; want the record", rec, err)
	}
	v, err := guard.Decode[map[string]int](g, rec)
	if err != nil || v["total"] != 3 {
		t.Errorf("Decode = %v, %v", v, err)
	}
	// The same key through Do replays it too.
	got, out, err := guard.Execute(ctx, g, "wf", map[string]string{"order": "o-1"}, func(ctxx context.Context) (map[string]int, error) { return nil, nil })
	if err != nil || out != guard.OutcomeReplayed || got["total"] != 3 {
		t.Errorf("Do after Complete = %v, %v, %v", got, out, err)
	}
}

func TestClaimFencedAndReleased(t *testing.T) {
	m, _ := newMemory()
	g := mustGuard(t, m)
	cl, _, err := g.Claim(ctx, "wf", "k")
	if err != nil {
		t.Fatal(err)
	}
	stale := *cl
	stale.Token = "someone-else"
	if _, err := g.Complete(ctx, stale, store.ResultValue, []byte(`1`)); !errors.Is(err, guard.ErrLeaseLost) {
		t.Errorf("Complete with a stale token = %v, want ErrLeaseLost", err)
	}
	if err := g.Release(ctx, stale); !errors.Is(err, guard.ErrLeaseLost) {
		t.Errorf("Release with a stale token = %v, want ErrLeaseLost", err)
	}
	if err := g.Release(ctx, *cl); err != nil {
		t.Fatalf("Release = %v", err)
	}
	if again, _, err := g.Claim(ctx, "wf", "k"); err != nil || again == nil {
		t.Errorf("Claim after Release = %v, %v", again, err)
	}
	if _, _, err := g.Claim(ctx, "wf", ""); !errors.Is(err, guard.ErrKeyMissing) {
		t.Errorf("Claim of an empty selection = %v, want ErrKeyMissing", err)
	}
}

func TestClaimTokenMakesClaimReentrant(t *testing.T) {
	m, _ := newMemory()
	g := mustGuard(t, m, guard.WithLease(time.Hour))
	first, _, err := g.Claim(ctx, "wf", "k", guard.WithClaimToken("run-1"))
	if err != nil || first == nil || first.Token != "run-1" {
		t.Fatalf("Claim = %+v, %v", first, err)
	}
	// The same claimant claims again (it lost the first answer): it holds.
	again, _, err := g.Claim(ctx, "wf", "k", guard.WithClaimToken("run-1"))
	if err != nil || again == nil || again.Token != "run-1" {
		t.Fatalf("repeated Claim = %+v, %v; want the claim held again", again, err)
	}
	// Another claimant is still kept out.
	if _, _, err := g.Claim(ctx, "wf", "k", guard.WithClaimToken("run-2")); !errors.Is(err, guard.ErrInProgress) {
		t.Errorf("other claimant: %v, want ErrInProgress", err)
	}
	if _, err := g.Complete(ctx, *again, store.ResultValue, []byte(`1`)); err != nil {
		t.Fatal(err)
	}
	if cl, rec, err := g.Claim(ctx, "wf", "k", guard.WithClaimToken("run-1")); cl != nil || rec == nil || err != nil {
		t.Errorf("after completion: %v, %v, %v; want the record", cl, rec, err)
	}
	if _, err := g.Settings(guard.WithKeyPath("a[")); !errors.Is(err, guard.ErrInvalidOption) {
		t.Errorf("Settings = %v, want ErrInvalidOption", err)
	}
	if _, err := g.Settings(guard.WithKeyPath("a.b")); err != nil {
		t.Errorf("Settings of valid options = %v", err)
	}
}

// Settings reports what a call gets: the guard's defaults, overridden by
// the call's options.
func TestSettings(t *testing.T) {
	g := mustGuard(t, memory.New(), guard.WithTTL(48*time.Hour), guard.WithWait(10*time.Second))
	got, err := g.Settings(guard.WithLease(5 * time.Second))
	want := guard.CallSettings{TTL: 48 * time.Hour, Lease: 5 * time.Second, Mode: guard.Wait, WaitBudget: 10 * time.Second,
		WaitInitial: guard.DefaultWaitInitial, WaitMax: guard.DefaultWaitMax}
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
		got, err := mustGuard(t, memory.New(), c.opts...).Settings(c.call...)
		if err != nil || got.KeyPath != c.want {
			t.Errorf("Settings().KeyPath = %q, %v; want %q", got.KeyPath, err, c.want)
		}
	}
}

// WithDefaults gives way to what guard.New set and to earlier options of
// the call, and applies where neither set anything: an adapter's defaults
// never override the user's guard.
func TestWithDefaults(t *testing.T) {
	adapter := guard.WithDefaults(guard.WithTTL(24*time.Hour), guard.WithWait(30*time.Second), guard.WithLease(3*time.Second))
	for _, c := range []struct {
		name string
		opts []guard.Option
		call []guard.CallOption
		want guard.CallSettings
	}{
		{"plain guard", nil, []guard.CallOption{adapter},
			guard.CallSettings{TTL: 24 * time.Hour, Lease: 3 * time.Second, Mode: guard.Wait, WaitBudget: 30 * time.Second}},
		{"guard with its own TTL and mode", []guard.Option{guard.WithTTL(time.Hour), guard.WithReject()}, []guard.CallOption{adapter},
			guard.CallSettings{TTL: time.Hour, Lease: 3 * time.Second, Mode: guard.Reject, WaitBudget: guard.DefaultWaitBudget}},
		{"guard waiting 10 s", []guard.Option{guard.WithWait(10 * time.Second)}, []guard.CallOption{adapter},
			guard.CallSettings{TTL: 24 * time.Hour, Lease: 3 * time.Second, Mode: guard.Wait, WaitBudget: 10 * time.Second}},
		{"the adapter's own option after its defaults", nil, []guard.CallOption{adapter, guard.WithTTL(time.Minute)},
			guard.CallSettings{TTL: time.Minute, Lease: 3 * time.Second, Mode: guard.Wait, WaitBudget: 30 * time.Second}},
		{"an option before the defaults", nil, []guard.CallOption{guard.WithLease(time.Minute), adapter},
			guard.CallSettings{TTL: 24 * time.Hour, Lease: time.Minute, Mode: guard.Wait, WaitBudget: 30 * time.Second}},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := mustGuard(t, memory.New(), c.opts...)
			got, err := g.Settings(c.call...)
			c.want.WaitInitial, c.want.WaitMax = guard.DefaultWaitInitial, guard.DefaultWaitMax
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
	claim := func(k string) guard.Claim {
		t.Helper()
		cl, _, err := g.Claim(ctx, "wf", k)
		if err != nil || cl == nil {
			t.Fatalf("Claim(%s) = %v, %v", k, cl, err)
		}
		return *cl
	}
	start := time.Now()
	rec, err := g.Finish(ctx, claim("value"), map[string]int{"total": 3}, nil, guard.WithTTL(48*time.Hour))
	if err != nil || rec == nil || string(rec.Result) != `{"total":3}` || rec.ExpiresAt.Before(start.Add(47*time.Hour)) {
		t.Errorf("Finish(value) = %+v, %v; want the JSON result kept for 48 h", rec, err)
	}
	declined := guard.Definite(errors.New("card declined"))
	if rec, err := g.Finish(ctx, claim("definite"), nil, declined); err != nil || rec == nil || rec.ResultKind != store.ResultError {
		t.Errorf("Finish(definite) = %+v, %v; want the error recorded", rec, err)
	}
	if _, err := guard.Decode[int](g, mustGet(t, m, "wf", "definite", g)); err == nil || err.Error() != "card declined" {
		t.Errorf("replay of the definite error = %v", err)
	}
	for name, finish := range map[string]func(guard.Claim) (*store.Record, error){
		"error": func(cl guard.Claim) (*store.Record, error) {
			return g.Finish(ctx, cl, nil, errors.New("timeout"))
		},
		"filtered": func(cl guard.Claim) (*store.Record, error) {
			return g.Finish(ctx, cl, 0, nil, guard.WithResultFilter(func(v any) bool { return v != 0 }))
		},
	} {
		if rec, err := finish(claim(name)); err != nil || rec != nil {
			t.Errorf("Finish(%s) = %+v, %v; want released", name, rec, err)
		}
		if cl, rec, err := g.Claim(ctx, "wf", name); cl == nil || rec != nil || err != nil {
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
	adapter := guard.Fixed(guard.WithKeyPath("k"), guard.WithCodec(guard.JSON))
	if _, err := g.Settings(adapter); err != nil {
		t.Errorf("the guard's default key path = %v; want it to give way", err)
	}
	for _, opts := range [][]guard.CallOption{
		{adapter, guard.WithKeyPath("id")},
		{guard.WithCodec(guard.JSON), adapter},
	} {
		if _, err := g.Settings(opts...); !errors.Is(err, guard.ErrInvalidOption) {
			t.Errorf("a user's option for what the adapter fixed = %v; want ErrInvalidOption", err)
		}
	}
	if _, err := g.Settings(adapter, guard.WithTTL(time.Minute)); err != nil {
		t.Errorf("an option the adapter does not fix = %v", err)
	}
	// A step inside such a call may set its own codec.
	fn := func(ctx context.Context) (int, error) {
		return guard.Step(ctx, "s", func(context.Context) (int, error) { return 1, nil }, guard.WithCodec(guard.JSON))
	}
	if _, err := guard.Do(ctx, g, "job", map[string]string{"k": "1"}, fn, adapter); err != nil {
		t.Errorf("a step's own codec inside an adapter's call = %v", err)
	}
}
