package guardtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
)

// paused is a run of the guarded function that stops after its step until
// it is resumed.
type paused struct {
	at     chan struct{} // closed when the run reaches its pause
	resume chan struct{} // closed to let it go on
	before func()        // called at the pause, before at is closed
}

func newPause(before func()) *paused {
	return &paused{at: make(chan struct{}), resume: make(chan struct{}), before: before}
}

// pause is the how.pause of the run.
func (p *paused) pause(context.Context) {
	if p.before != nil {
		p.before()
	}
	close(p.at)
	<-p.resume
}

// reach waits until the run of the call whose result arrives on done is at
// its pause; it fails the test if the call returns first.
func (h *composeHarness) reach(t *testing.T, p *paused, done <-chan result, who string) {
	t.Helper()
	select {
	case <-p.at:
	case r := <-done:
		t.Fatalf("the %s returned %q, %v before reaching its pause", who, r.v, r.err)
	case <-h.ctx.Done():
		t.Fatalf("the %s never reached its pause", who)
	}
}

// wait returns the result of a call, failing the test if the case's
// context ends first.
func (h *composeHarness) wait(t *testing.T, done <-chan result, who string) result {
	t.Helper()
	select {
	case r := <-done:
		return r
	case <-h.ctx.Done():
		t.Fatalf("the %s never returned", who)
		return result{}
	}
}

// sleep waits d, or until the case's context ends.
func (h *composeHarness) sleep(d time.Duration) {
	select {
	case <-time.After(d):
	case <-h.ctx.Done():
	}
}

func composeLiveHolder(t *testing.T, h *composeHarness) {
	p := newPause(nil)
	// A lease longer than the case, so that the holder stays live however
	// slow its extensions are on a loaded machine.
	held := h.start(t, h.guard(t, guard.WithLease(composeWait)), "order 1", h.body(how{by: "holder", pause: p.pause}))
	h.reach(t, p, held, "holder")

	v, err := h.call(t, h.guard(t, guard.WithWait(0)), "order 1", h.body(how{by: "rejected"}))
	if !errors.Is(err, guard.ErrInProgress) {
		t.Errorf("a call that rejects, while the holder runs = %q, %v; want guard.ErrInProgress (or the transport's answer for it)", v, err)
	}
	waited := h.start(t, h.guard(t, guard.WithWait(composeWait)), "order 1", h.body(how{by: "waiter"}))
	// The waiter polls while the holder runs on.
	h.sleep(time.Second)
	select {
	case r := <-waited:
		t.Fatalf("a call that waits returned %q, %v while the holder still ran", r.v, r.err)
	default:
	}
	close(p.resume)
	if r := h.wait(t, held, "holder"); r.err != nil || r.v != "shipped ch_1 by holder" {
		t.Errorf("the holder = %q, %v; want \"shipped ch_1 by holder\"", r.v, r.err)
	}
	if r := h.wait(t, waited, "waiting call"); r.err != nil || r.v != "shipped ch_1 by holder" {
		t.Errorf("the call that waited = %q, %v; want the holder's result, \"shipped ch_1 by holder\"", r.v, r.err)
	}
	h.wantEffects(t, 1, 1)
}

// stalledHolder starts a holder whose process stalls after its step: its
// clock and timers stand still (see stallClock) until it is resumed. A
// zombie holder ships even once its context has ended.
func (h *composeHarness) stalledHolder(t *testing.T, zombie bool) (*stallClock, *paused, <-chan result) {
	clk := &stallClock{}
	p := newPause(clk.stall)
	g := h.guard(t, adapt.WithClock(clk))
	done := h.start(t, g, "order 1", h.body(how{by: "holder", pause: p.pause, zombie: zombie}))
	h.reach(t, p, done, "holder")
	return clk, p, done
}

// taker starts a call that waits out the stalled holder's lease and takes
// the key over; p, if not nil, pauses it after its step.
func (h *composeHarness) taker(t *testing.T, p *paused) <-chan result {
	w := how{by: "taker"}
	if p != nil {
		w.pause = p.pause
	}
	return h.start(t, h.guard(t, guard.WithWait(composeWait)), "order 1", h.body(w))
}

// checkTaker checks the taker's result: the holder's step replayed, or,
// in a transaction, where the holder's step was rolled back, its own (the
// last charge made). It returns that result.
func (h *composeHarness) checkTaker(t *testing.T, r result) string {
	t.Helper()
	want := "shipped ch_1 by taker"
	if h.transactional() {
		want = fmt.Sprintf("shipped ch_%d by taker", h.charges.Load())
	}
	if r.err != nil || r.v != want {
		t.Errorf("the taker = %q, %v; want %q", r.v, r.err, want)
	}
	return want
}

// retried is the taker's result r, or, if a transactional taker gave up
// while the stalled holder's transaction held a row it needed (a step
// completed inside it, DoTx on PostgreSQL), its retry's, which finds the
// row free.
func (h *composeHarness) retried(t *testing.T, r result) result {
	t.Helper()
	if r.err != nil && h.transactional() {
		r.v, r.err = h.call(t, h.guard(t), "order 1", h.body(how{by: "taker"}))
	}
	return r
}

// heldUp returns a channel that delivers once a transactional taker may
// be held up by the stalled holder's transaction, which holds the rows it
// wrote (DoTx on PostgreSQL): well after the holder's lease has lapsed.
// For other entry points nothing holds the taker up, and the channel
// never delivers.
func (h *composeHarness) heldUp() <-chan time.Time {
	if !h.transactional() {
		return nil
	}
	return time.After(composeLease + 3*time.Second)
}

func composeTakeover(t *testing.T, h *composeHarness) {
	clk, p, held := h.stalledHolder(t, false)
	taken := h.taker(t, nil)
	var r result
	waited := false
	select {
	case r = <-taken:
	case <-h.heldUp():
		// The stalled holder's transaction holds a row the taker needs
		// (DoTx): resume the holder.
		waited = true
	case <-h.ctx.Done():
		t.Fatal("the taker never took the key over from the stalled holder")
	}
	// Resumed, the holder's lease keeper wakes to a lapsed lease and ends
	// its context: the holder ships nothing.
	clk.resume()
	close(p.resume)
	if hr := h.wait(t, held, "holder"); hr.err == nil {
		t.Errorf("the resumed holder = %q; want an error, its claim lost", hr.v)
	}
	if waited {
		r = h.wait(t, taken, "taker")
	}
	h.checkTaker(t, h.retried(t, r))
	h.wantEffects(t, 1, 1)
}

func composeZombie(t *testing.T, h *composeHarness) {
	clk, hp, held := h.stalledHolder(t, true)
	tp := newPause(nil)
	taken := h.taker(t, tp)
	select {
	case <-tp.at:
	case r := <-taken:
		if !h.transactional() {
			t.Fatalf("the taker returned %q, %v before its pause; want it to take the key over", r.v, r.err)
		}
		// It gave up on the row the stalled holder's transaction holds;
		// its retry comes after the holder.
		taken = closedResult(r)
	case <-h.heldUp():
		// Held up by the stalled holder's transaction (DoTx): resume the
		// holder first.
	case <-h.ctx.Done():
		t.Fatal("the taker never took the key over from the stalled holder")
	}
	// The holder runs again, its timers still held: its completion reaches
	// the store before its lease keeper wakes, and must be fenced out.
	clk.run()
	close(hp.resume)
	hr := h.wait(t, held, "holder")
	clk.resume()
	if !errors.Is(hr.err, guard.ErrLeaseLost) {
		t.Errorf("the resumed zombie holder = %q, %v; want guard.ErrLeaseLost (or the transport's answer for it): its completion fenced out", hr.v, hr.err)
	}
	close(tp.resume)
	want := h.checkTaker(t, h.retried(t, h.wait(t, taken, "taker")))
	if v, err := h.call(t, h.guard(t), "order 1", h.body(how{by: "late"})); err != nil || v != want {
		t.Errorf("a later call = %q, %v; want the taker's result, %q", v, err, want)
	}
	if h.transactional() {
		// The zombie's writes rolled back with its fenced completion.
		h.wantEffects(t, 1, 1)
	} else {
		// The step replayed for the taker; the zombie shipped anyway.
		h.wantEffects(t, 1, 2)
	}
}

// closedResult returns a channel that holds r.
func closedResult(r result) <-chan result {
	c := make(chan result, 1)
	c <- r
	return c
}

// stallClock is the clock of a holder whose process stalls, as in a long
// garbage-collection pause, a SIGSTOP or a virtual machine's migration:
// while stalled, its time stands still and its timers do not fire (its
// lease keeper extends nothing); they fire, late, once it resumes. Its
// time is otherwise the system clock's, the one every other guard of the
// case reads: the holder's lease lapses on every clock, not on its alone.
type stallClock struct {
	mu      sync.Mutex    // protects the fields below
	stalled bool          // the time stands still, at at
	at      time.Time     // the time of the stall
	hold    bool          // timers that come due wait in due
	due     []*stallTimer // timers that came due while held
}

// stallTimer is a timer of a stallClock.
type stallTimer struct {
	f     func()
	state atomic.Int32 // armed, held, fired or stopped
}

const (
	timerArmed int32 = iota
	timerHeld
	timerFired
	timerStopped
)

func (c *stallClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stalled {
		return c.at
	}
	return time.Now()
}

func (c *stallClock) AfterFunc(d time.Duration, f func()) func() bool {
	st := &stallTimer{f: f}
	tm := time.AfterFunc(d, func() { c.fire(st) })
	return func() bool {
		tm.Stop()
		return st.state.CompareAndSwap(timerArmed, timerStopped) || st.state.CompareAndSwap(timerHeld, timerStopped)
	}
}

// fire runs a timer that came due, or holds it.
func (c *stallClock) fire(st *stallTimer) {
	c.mu.Lock()
	if c.hold {
		if st.state.CompareAndSwap(timerArmed, timerHeld) {
			c.due = append(c.due, st)
		}
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	if st.state.CompareAndSwap(timerArmed, timerFired) {
		st.f()
	}
}

// stall stops the time and holds the timers.
func (c *stallClock) stall() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stalled, c.at, c.hold = true, time.Now(), true
}

// run lets the time run again, the timers still held.
func (c *stallClock) run() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stalled = false
}

// resume lets the time run again and fires the timers that came due, one
// after the other, before it returns: a lease keeper that wakes to a
// lapsed lease has ended its function's context when resume returns.
func (c *stallClock) resume() {
	c.mu.Lock()
	c.stalled, c.hold = false, false
	due := c.due
	c.due = nil
	c.mu.Unlock()
	for _, st := range due {
		if st.state.CompareAndSwap(timerHeld, timerFired) {
			st.f()
		}
	}
}
