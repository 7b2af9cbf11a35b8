package guardtest

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemguard/idemguard/store"
)

// The disabled column of RunComposition: every case's guards are disabled
// (IDEMGUARD_DISABLED), and the entry point must be a pass-through. Every
// call runs the function and its step, returns what the function
// returned, and nothing is refused, waits or is recorded.

// passedThrough checks what every case of the disabled column promises,
// once its calls have returned: n calls ran the step, the store holds no
// record, and no function or step saw a key.
func (h *composeHarness) passedThrough(t *testing.T, n int) {
	t.Helper()
	if got := h.charges.Load(); got != int32(n) {
		t.Errorf("%s, disabled: the step ran %d times, want %d: once per call", h.ep.Name, got, n)
	}
	if n := h.keyed.Load(); n > 0 {
		t.Errorf("%s, disabled: guard.KeyFromContext found a key %d times; want none, as in a disabled guard.Do", h.ep.Name, n)
	}
	a, ok := h.s.(store.Admin)
	if !ok {
		return
	}
	page, err := a.List(h.ctx, store.Query{Limit: 10})
	if err != nil {
		t.Fatalf("listing the store: %v", err)
	}
	for _, rec := range page.Records {
		t.Errorf("%s, disabled: the store holds %s (%v); want no record", h.ep.Name, rec.Key, rec.Status)
	}
}

// wantRan checks that a call of the disabled column returned the
// function's result with charge n.
func wantRan(t *testing.T, what string, v string, err error, n int) {
	t.Helper()
	if want := fmt.Sprintf("shipped ch_%d", n); err != nil || v != want {
		t.Errorf("%s = %q, %v; want %q, the function's own result", what, v, err, want)
	}
}

func disabledFirstCallAndReplay(t *testing.T, h *composeHarness) {
	g := h.guard(t)
	for i := range 2 {
		v, err := h.call(t, g, "order 1", h.body(how{}))
		wantRan(t, fmt.Sprintf("call %d", i+1), v, err, i+1)
	}
	h.wantEffects(t, 2, 2)
	h.passedThrough(t, 2)
}

func disabledErrorAfterStep(t *testing.T, h *composeHarness) {
	g := h.guard(t)
	var failing atomic.Bool
	failing.Store(true)
	v, err := h.call(t, g, "order 1", h.body(how{failing: &failing}))
	if err == nil || !strings.Contains(err.Error(), errShipping.Error()) {
		t.Errorf("the first call = %q, %v; want the function's own error, %q", v, err, errShipping)
	}
	v, err = h.call(t, g, "order 1", h.body(how{failing: &failing}))
	wantRan(t, "the retry", v, err, 2)
	if h.transactional() {
		h.wantEffects(t, 1, 1) // the first call's charge rolled back with it
	} else {
		h.wantEffects(t, 2, 1)
	}
	h.passedThrough(t, 2)
}

func disabledPayloadReused(t *testing.T, h *composeHarness) {
	g := h.guard(t)
	v, err := h.call(t, g, "order 1, 100 EUR", h.body(how{}))
	wantRan(t, "the first call", v, err, 1)
	v, err = h.call(t, g, "order 1, 200 EUR", h.body(how{}))
	wantRan(t, "a call with the same key and another payload", v, err, 2)
	h.wantEffects(t, 2, 2)
	h.passedThrough(t, 2)
}

func disabledSecondCall(t *testing.T, h *composeHarness) {
	p := newPause(nil)
	first := h.start(t, h.guard(t), "order 1", h.body(how{pause: p.pause}))
	h.reach(t, p, first, "first call")
	// Neither refused nor kept waiting by the first call, which runs on.
	v, err := h.call(t, h.guard(t), "order 1", h.body(how{}))
	wantRan(t, "a second call while the first runs", v, err, 2)
	close(p.resume)
	r := h.wait(t, first, "first call")
	wantRan(t, "the first call", r.v, r.err, 1)
	h.wantEffects(t, 2, 2)
	h.passedThrough(t, 2)
}
