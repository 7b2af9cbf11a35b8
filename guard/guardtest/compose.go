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
	"github.com/idemguard/idemguard/store"
)

// An EntryPoint is one way of calling a guarded function — guard.Do,
// DoBatch, DoTx, a Temporal activity or workflow, an HTTP handler, a gRPC
// method, a message handler — as [RunComposition] drives it. Every entry
// point joins the composition suite in its own package's tests.
type EntryPoint struct {
	// Name names the entry point in subtests.
	Name string
	// Run makes one call through the entry point: body guarded by g, keyed
	// by call.Key, with call.Payload as the part of the request that
	// payload validation covers (an HTTP body, an activity's argument). It
	// hands body effect, with which the suite counts side effects, and
	// returns what the caller gets: the body's result, or an error (for a
	// transport, any answer that is not a success). Calls may run
	// concurrently.
	Run func(ctx context.Context, t *testing.T, g *guard.Guard, call Call, effect Effect, body Body) (string, error)
	// Count, when set, counts the side effects named name that committed
	// for key, for an entry point whose effects commit or roll back with
	// the call (DoTx): its Run hands body an Effect of its own that writes
	// through the call's transaction (and, like the suite's, does nothing
	// once the call's context has ended). Nil: the suite counts effects in
	// memory.
	Count func(t *testing.T, key, name string) int
	// GuardOptions are options every guard of the suite gets, such as the
	// payload validation an entry point needs to see Call.Payload.
	GuardOptions []guard.Option
}

// Call is one call of an [EntryPoint].
type Call struct {
	// Key is the idempotency key the caller sends, the same on every call
	// of one case.
	Key string
	// Payload is the request's payload; two calls with one key and another
	// payload are a key reused for another request.
	Payload string
}

// Effect performs the side effect called name once, unless the call's
// context has ended (a holder whose claim was taken over stops before its
// side effects, as a well-behaved function does).
type Effect func(ctx context.Context, name string) error

// Body is a guarded function of the suite: it charges in a step, then
// ships, through effect.
type Body func(ctx context.Context, effect Effect) (string, error)

// Stores makes the stores the suite runs on, by name.
type Stores map[string]func(t *testing.T) store.Store

// RunComposition holds an entry point to the guarantees of the guard with
// a guard.Step inside it, on each store: for each case a fresh store and
// fresh keys, and every side effect counted.
//
//   - FirstCallAndReplay: the first call charges (in a step) and ships,
//     the second replays; each effect happened once.
//   - ErrorAfterStepThenRetry: the first call fails after its step (the key
//     is released); the retry replays the step and ships: each once.
//   - PayloadReusedAfterStep: a call fails after its step; a call with the
//     same key and another payload is refused at the step, never given
//     the step's result, and charges nothing (in a transaction, where the
//     step rolled back with the first call, it runs as a new call).
//   - TakeoverOfPausedHolder: a holder pauses after its step, past its
//     lease (its clock runs behind, so the lease end it wrote has lapsed);
//     a second call takes the key over, replays the step and ships; the
//     holder, resumed, finds its context ended when its next lease
//     extension meets the new claim, and ships nothing. (In a transaction
//     the holder's step is not committed: the taker waits for the row the
//     holder's transaction locks, or gives up and retries, and charges
//     once itself.)
//
// The guards are built with a lease of three seconds and a clock skew of
// 50 ms, plus ep.GuardOptions: a default given to guard.New must reach the entry
// point's calls.
func RunComposition(t *testing.T, ep EntryPoint, stores Stores) {
	for name, mk := range stores {
		t.Run(name, func(t *testing.T) {
			runCases(t, func(ctx context.Context, t *testing.T) *composeHarness {
				return &composeHarness{ep: ep, s: mk(t), ctx: ctx, key: fmt.Sprintf("%s-%d", t.Name(), time.Now().UnixNano())}
			}, []testCase[*composeHarness]{
				{"FirstCallAndReplay", composeFirstCallAndReplay},
				{"ErrorAfterStepThenRetry", composeErrorAfterStep},
				{"PayloadReusedAfterStep", composePayloadReused},
				{"TakeoverOfPausedHolder", composeTakeover},
			})
		})
	}
}

// composeHarness is one case of RunComposition.
type composeHarness struct {
	ep  EntryPoint
	s   store.Store
	ctx context.Context
	key string

	mu      sync.Mutex
	effects map[string]int // by key and name, when the suite counts them
}

// composeLease and composeSkew are the guards' lease and clock skew.
const (
	composeLease = 3 * time.Second
	composeSkew  = 50 * time.Millisecond
)

func (h *composeHarness) guard(t *testing.T, opts ...guard.Option) *guard.Guard {
	t.Helper()
	all := append([]guard.Option{guard.WithLease(composeLease), guard.WithClockSkew(composeSkew)}, h.ep.GuardOptions...)
	g, err := guard.New(h.s, append(all, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// effect is the suite's Effect for key.
func (h *composeHarness) effect(key string) Effect {
	return func(ctx context.Context, name string) error {
		if err := context.Cause(ctx); err != nil {
			return err
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.effects == nil {
			h.effects = map[string]int{}
		}
		h.effects[key+"/"+name]++
		return nil
	}
}

// count returns how many effects named name happened for key.
func (h *composeHarness) count(t *testing.T, key, name string) int {
	if h.ep.Count != nil {
		return h.ep.Count(t, key, name)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.effects[key+"/"+name]
}

// errShipping is the failure after the step.
var errShipping = errors.New("guardtest: the shipping service is down")

// body is the suite's guarded function: charge in a step, then fail if
// failing says so, else ship. pause, if not nil, is called after the step.
func body(failing *atomic.Bool, pause func(context.Context)) Body {
	return func(ctx context.Context, effect Effect) (string, error) {
		charge, err := guard.Step(ctx, "charge", func(ctx context.Context) (string, error) {
			return "ch_1", effect(ctx, "charge")
		})
		if err != nil {
			return "", err
		}
		if pause != nil {
			pause(ctx)
		}
		if failing != nil && failing.CompareAndSwap(true, false) {
			return "", errShipping
		}
		if err := effect(ctx, "ship"); err != nil {
			return "", err
		}
		return "shipped " + charge, nil
	}
}

// call makes one call for key with payload through the entry point.
func (h *composeHarness) call(t *testing.T, g *guard.Guard, payload string, b Body) (string, error) {
	t.Helper()
	return h.ep.Run(h.ctx, t, g, Call{Key: h.key, Payload: payload}, h.effect(h.key), b)
}

func (h *composeHarness) wantEffects(t *testing.T, charge, ship int) {
	t.Helper()
	if got := h.count(t, h.key, "charge"); got != charge {
		t.Errorf("%s on %s: charged %d times, want %d", h.ep.Name, h.key, got, charge)
	}
	if got := h.count(t, h.key, "ship"); got != ship {
		t.Errorf("%s on %s: shipped %d times, want %d", h.ep.Name, h.key, got, ship)
	}
}

func composeFirstCallAndReplay(t *testing.T, h *composeHarness) {
	g := h.guard(t)
	for i := range 2 {
		v, err := h.call(t, g, "order 1", body(nil, nil))
		if err != nil || v != "shipped ch_1" {
			t.Fatalf("call %d = %q, %v; want \"shipped ch_1\"", i+1, v, err)
		}
	}
	h.wantEffects(t, 1, 1)
}

func composeErrorAfterStep(t *testing.T, h *composeHarness) {
	g := h.guard(t)
	var failing atomic.Bool
	failing.Store(true)
	if v, err := h.call(t, g, "order 1", body(&failing, nil)); err == nil {
		t.Fatalf("the first call = %q; want the failure after its step", v)
	}
	v, err := h.call(t, g, "order 1", body(&failing, nil))
	if err != nil || v != "shipped ch_1" {
		t.Fatalf("retry = %q, %v; want the step replayed and the order shipped", v, err)
	}
	h.wantEffects(t, 1, 1)
}

func composePayloadReused(t *testing.T, h *composeHarness) {
	g := h.guard(t)
	var failing atomic.Bool
	failing.Store(true)
	if _, err := h.call(t, g, "order 1, 100 EUR", body(&failing, nil)); err == nil {
		t.Fatal("the first call did not fail after its step")
	}
	v, err := h.call(t, g, "order 1, 200 EUR", body(nil, nil))
	switch {
	case err == nil && h.ep.Count == nil:
		t.Errorf("a call with the same key and another payload = %q; want it refused at the step", v)
	case err == nil:
		// Transactional: the first call's step rolled back with it, so
		// nothing of the first payload remains; the second is a new call.
		h.wantEffects(t, 1, 1)
		return
	}
	h.wantEffects(t, 1, 0)
}

func composeTakeover(t *testing.T, h *composeHarness) {
	// The holder's clock runs behind: the lease end it writes has lapsed by
	// the taker's clock, as if the holder had been paused for seconds.
	holder := h.guard(t, guard.WithClock(behind{composeLease + 10*time.Second}))
	taker := h.guard(t)
	paused, resume := make(chan struct{}), make(chan struct{})
	holderDone := make(chan struct{})
	go func() {
		defer close(holderDone)
		_, _ = h.call(t, holder, "order 1", body(nil, func(ctx context.Context) {
			close(paused)
			<-resume
			// Resumed: the holder's next lease extension finds the claim
			// taken over and ends its context, before it ships.
			select {
			case <-ctx.Done():
			case <-time.After(30 * time.Second):
			}
		}))
	}()
	select {
	case <-paused:
	case <-h.ctx.Done():
		t.Fatal("the holder never reached its pause")
	}
	// The taker takes the key over. Where the holder's paused transaction
	// holds a row the taker needs (a step it completed inside it, DoTx),
	// the taker waits for it: resume the holder after a while either way.
	type result struct {
		v   string
		err error
	}
	taken := make(chan result, 1)
	go func() {
		v, err := h.call(t, taker, "order 1", body(nil, nil))
		taken <- result{v, err}
	}()
	var r result
	var waited bool
	select {
	case r = <-taken:
	case <-time.After(2 * time.Second):
		waited = true
	}
	close(resume)
	select {
	case <-holderDone:
	case <-h.ctx.Done():
		t.Fatal("the holder never returned")
	}
	if waited {
		r = <-taken
	}
	if r.err != nil && h.ep.Count != nil {
		// A transactional entry point's taker may have given up while the
		// holder's transaction held its row; the retry finds it free.
		r.v, r.err = h.call(t, taker, "order 1", body(nil, nil))
	}
	if r.err != nil || r.v != "shipped ch_1" {
		t.Errorf("the taker = %q, %v; want the step replayed (or, in a transaction, run once) and the order shipped", r.v, r.err)
	}
	h.wantEffects(t, 1, 1)
}

// behind is a clock that runs d behind the system clock.
type behind struct{ d time.Duration }

func (b behind) Now() time.Time { return time.Now().Add(-b.d) }

func (behind) AfterFunc(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }
