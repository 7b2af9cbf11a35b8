package guard_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/store"
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
	if err := g.Check(guard.WithKeyPath("a[")); !errors.Is(err, guard.ErrInvalidOption) {
		t.Errorf("Check = %v, want ErrInvalidOption", err)
	}
	if err := g.Check(guard.WithKeyPath("a.b")); err != nil {
		t.Errorf("Check of valid options = %v", err)
	}
}
