package guard_test

import (
	"context"
	"testing"

	"github.com/idemguard/idemguard/guard"
)

// sharedMeta is state that several batch inputs point to.
type sharedMeta struct {
	Version int `json:"version"`
}

// metaOrder is a batch input whose key, derived from the whole input,
// covers what its pointer points to.
type metaOrder struct {
	ID   string      `json:"id"`
	Meta *sharedMeta `json:"meta"`
}

// An item is claimed under the key DoBatch bound before anything ran, even
// when another item's function has changed its input since: a rerun of
// the batch with the original inputs then replays it instead of running it
// again.
func TestDoBatchClaimsUnderBoundKey(t *testing.T) {
	s := newBulk()
	g := mustGuard(t, s)
	var e effects
	fn := func(_ context.Context, o metaOrder) (charge, error) {
		e.add(o.ID)
		if o.ID == "a" {
			o.Meta.Version++ // b points to the same meta
		}
		return charge{ChargeID: "ch-" + o.ID}, nil
	}
	batch := func() []metaOrder {
		m := &sharedMeta{Version: 1}
		return []metaOrder{{ID: "a", Meta: m}, {ID: "b", Meta: m}}
	}
	// One at a time, so that a runs (and changes b's input) before b.
	res := guard.DoBatch(t.Context(), g, "charge", batch(), fn, guard.WithConcurrency(1))
	for i, r := range res {
		if r.Err != nil || r.Outcome != guard.OutcomeExecuted {
			t.Fatalf("first batch, item %d: %v, %v; want executed", i, r.Outcome, r.Err)
		}
	}

	res = guard.DoBatch(t.Context(), g, "charge", batch(), fn, guard.WithConcurrency(1))
	for i, r := range res {
		if r.Err != nil || r.Outcome != guard.OutcomeReplayed {
			t.Errorf("rerun, item %d: %v, %v; want replayed", i, r.Outcome, r.Err)
		}
	}
	for _, id := range []string{"a", "b"} {
		if n := e.get(id); n != 1 {
			t.Errorf("item %s ran %d times over two identical batches, want 1", id, n)
		}
	}
	if a := s.acquires.Load(); a != 2 {
		t.Errorf("%d claims over two identical batches, want 2", a)
	}
}
