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
	"github.com/idemguard/idemguard/internal/killswitch"
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
	//
	// An answer that stands for one of the guard's errors is returned
	// wrapping it, so that the suite can tell which one the caller got: a
	// call refused because another holds the key (HTTP 409, gRPC Aborted,
	// Temporal's IdempotencyInProgress) wraps guard.ErrInProgress; a key
	// reused with another payload (422, FailedPrecondition,
	// IdempotencyPayloadMismatch) wraps guard.ErrPayloadMismatch; a call
	// that ran but could not record its result because its claim was taken
	// over (IdempotencyLeaseLost, or a response served without the
	// idempotency status that says it was recorded, when g is not
	// disabled) wraps guard.ErrLeaseLost.
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
// fresh keys, and every side effect counted. The guarded function charges
// in a step and ships; its result names the charge, "shipped ch_1" for the
// first charge made.
//
//   - FirstCallAndReplay: the first call charges (in a step) and ships,
//     the second replays; each effect happened once, and the function
//     and its step see their keys (guard.KeyFromContext).
//   - ErrorAfterStepThenRetry: the first call fails after its step (the key
//     is released); the retry replays the step and ships: each once.
//   - PayloadReusedAfterStep: a call fails after its step; a call with the
//     same key and another payload is refused at the step, never given
//     the step's result, and charges nothing (in a transaction, where the
//     step rolled back with the first call, it runs as a new call).
//   - PayloadReusedAfterCompletion: a call completes; a call with the same
//     key and another payload is refused (guard.ErrPayloadMismatch) and
//     runs nothing; the first payload still replays.
//   - SecondCallMeetsLiveHolder: while a holder runs (paused in its body,
//     its lease live), a call that rejects gets guard.ErrInProgress and
//     one that waits gets the holder's result once it completes: the
//     function ran once.
//   - TakeoverOfPausedHolder: a holder's process stalls after its step,
//     its clock and timers standing still, until its lease has lapsed by
//     more than the skew on every clock; a second call takes the key over,
//     replays the step and ships; the holder, resumed, finds its context
//     ended (its lease keeper wakes to a lapsed lease) and ships nothing.
//   - TakeoverOfZombieHolder: the same stall, but the holder ignores its
//     context, and resumes while the taker runs: it ships anyway (the
//     guard cannot stop a function that ignores its context), but its
//     completion is fenced out (guard.ErrLeaseLost), and every later call
//     gets the taker's result.
//
// In a transaction (Count set) a step is not committed until its call
// is: a call that failed, or was taken over, leaves no step to replay,
// its writes are rolled back, and the next call charges once itself.
//
// The disabled column runs under "Disabled", with every guard disabled as
// IDEMGUARD_DISABLED disables it (built so without the process
// environment, which tests running in parallel share): the entry point
// must be a pass-through. In each of its cases every call runs the
// function and its step (a guard.Step works as inside a disabled
// guard.Do: unguarded), returns what the function returned, and is
// neither refused nor kept waiting; the store holds no record afterwards,
// and guard.KeyFromContext reports no key.
//
//   - Disabled/FirstCallAndReplay: two calls, two runs.
//   - Disabled/ErrorAfterStepThenRetry: the function's error, as it
//     returned it; the retry runs the step again.
//   - Disabled/PayloadReused: another payload runs too.
//   - Disabled/SecondCallMeetsHolder: a second call runs while the first
//     is paused in its body.
//
// The guards are built with a lease of three seconds and a clock skew of
// 50 ms, plus ep.GuardOptions: a default given to guard.New must reach the
// entry point's calls.
func RunComposition(t *testing.T, ep EntryPoint, stores Stores) {
	for name, mk := range stores {
		t.Run(name, func(t *testing.T) {
			fixture := func(disabled bool) func(ctx context.Context, t *testing.T) *composeHarness {
				return func(ctx context.Context, t *testing.T) *composeHarness {
					s := mk(t)
					warmUp(ctx, t, s)
					return &composeHarness{ep: ep, s: s, ctx: ctx, disabled: disabled, key: fmt.Sprintf("%s-%d", t.Name(), time.Now().UnixNano())}
				}
			}
			runCases(t, fixture(false), []testCase[*composeHarness]{
				{"FirstCallAndReplay", composeFirstCallAndReplay},
				{"ErrorAfterStepThenRetry", composeErrorAfterStep},
				{"PayloadReusedAfterStep", composePayloadReused},
				{"PayloadReusedAfterCompletion", composePayloadReusedAfterCompletion},
				{"SecondCallMeetsLiveHolder", composeLiveHolder},
				{"TakeoverOfPausedHolder", composeTakeover},
				{"TakeoverOfZombieHolder", composeZombie},
			})
			t.Run("Disabled", func(t *testing.T) {
				runCases(t, fixture(true), []testCase[*composeHarness]{
					{"FirstCallAndReplay", disabledFirstCallAndReplay},
					{"ErrorAfterStepThenRetry", disabledErrorAfterStep},
					{"PayloadReused", disabledPayloadReused},
					{"SecondCallMeetsHolder", disabledSecondCall},
				})
			})
		})
	}
}

// warmUp claims and releases a key of its own on a fresh store, so that
// what a store's first write costs (DynamoDB Local answered a first
// PutItem on a fresh table in seconds on a loaded machine) is not charged
// to the lease of a case's first call. Nothing remains of it.
func warmUp(ctx context.Context, t *testing.T, s store.Store) {
	t.Helper()
	now := time.Now()
	rec := &store.Record{Key: "guardtest-warm-up", Status: store.StatusInProgress, Token: "warm-up", LeaseExpiresAt: now.Add(time.Minute), ExpiresAt: now.Add(time.Minute)}
	if _, err := s.Acquire(ctx, rec, now); err != nil {
		t.Fatalf("warming the store up: %v", err)
	}
	if err := s.Release(ctx, rec.Key, rec.Token); err != nil {
		t.Fatalf("warming the store up: %v", err)
	}
}

// composeHarness is one case of RunComposition.
type composeHarness struct {
	ep       EntryPoint
	s        store.Store
	ctx      context.Context
	key      string
	disabled bool // the case's guards are disabled

	charges        atomic.Int32 // runs of the charge step's function
	keyed, unkeyed atomic.Int32 // functions and steps that saw a key, or none
	mu             sync.Mutex
	effects        map[string]int // by key and name, when the suite counts them; protected by mu
}

// composeLease and composeSkew are the guards' lease and clock skew, and
// composeWait the wait budget of the calls that wait.
const (
	composeLease = 3 * time.Second
	composeSkew  = 50 * time.Millisecond
	composeWait  = 30 * time.Second
)

// guard returns a guard over the case's store, disabled in the disabled
// column.
func (h *composeHarness) guard(t *testing.T, opts ...guard.Option) *guard.Guard {
	t.Helper()
	all := append([]guard.Option{guard.WithLease(composeLease), guard.WithClockSkew(composeSkew)}, h.ep.GuardOptions...)
	all = append(all, opts...)
	if h.disabled {
		// As IDEMGUARD_DISABLED does, without the process environment,
		// which tests running in parallel share.
		all = append(all, killswitch.Disable.(guard.Option))
	}
	g, err := guard.New(h.s, all...)
	if err != nil {
		t.Fatal(err)
	}
	if g.Disabled() != h.disabled {
		t.Fatalf("the guard is disabled: %t, want %t", g.Disabled(), h.disabled)
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

// transactional reports whether the entry point's effects commit with the
// call.
func (h *composeHarness) transactional() bool { return h.ep.Count != nil }

// errShipping is the failure after the step.
var errShipping = errors.New("guardtest: the shipping service is down")

// how is how one run of the suite's guarded function behaves.
type how struct {
	// by, if set, is added to the result ("shipped ch_1 by taker"), to
	// tell whose result a caller got.
	by string
	// failing, if it holds true, makes the run fail after its step, once.
	failing *atomic.Bool
	// pause, if set, is called after the step.
	pause func(ctx context.Context)
	// zombie makes the run ship even once its context has ended.
	zombie bool
}

// body is the suite's guarded function: charge in a step (the charge's
// id counts the step's runs), then fail if w says so, else ship.
func (h *composeHarness) body(w how) Body {
	return func(ctx context.Context, effect Effect) (string, error) {
		h.sawKey(ctx)
		charge, err := guard.Step(ctx, "charge", func(ctx context.Context) (string, error) {
			h.sawKey(ctx)
			id := fmt.Sprintf("ch_%d", h.charges.Add(1))
			return id, effect(ctx, "charge")
		})
		if err != nil {
			return "", err
		}
		if w.pause != nil {
			w.pause(ctx)
		}
		if w.failing != nil && w.failing.CompareAndSwap(true, false) {
			return "", errShipping
		}
		sctx := ctx
		if w.zombie {
			sctx = context.WithoutCancel(ctx)
		}
		if err := effect(sctx, "ship"); err != nil {
			return "", err
		}
		v := "shipped " + charge
		if w.by != "" {
			v += " by " + w.by
		}
		return v, nil
	}
}

// sawKey counts whether ctx carries a call's key.
func (h *composeHarness) sawKey(ctx context.Context) {
	if _, ok := guard.KeyFromContext(ctx); ok {
		h.keyed.Add(1)
	} else {
		h.unkeyed.Add(1)
	}
}

// call makes one call for key with payload through the entry point.
func (h *composeHarness) call(t *testing.T, g *guard.Guard, payload string, b Body) (string, error) {
	t.Helper()
	return h.ep.Run(h.ctx, t, g, Call{Key: h.key, Payload: payload}, h.effect(h.key), b)
}

// result is what a call returned.
type result struct {
	v   string
	err error
}

// start makes a call in its own goroutine; its result arrives on the
// channel returned. A Run that gives up with t.Fatal, which ends only the
// goroutine, delivers an error, so that the case does not wait for it.
func (h *composeHarness) start(t *testing.T, g *guard.Guard, payload string, b Body) <-chan result {
	done := make(chan result, 1)
	go func() {
		r := result{err: errors.New("guardtest: the call gave up (t.Fatal in EntryPoint.Run)")}
		defer func() { done <- r }()
		r.v, r.err = h.call(t, g, payload, b)
	}()
	return done
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
		v, err := h.call(t, g, "order 1", h.body(how{}))
		if err != nil || v != "shipped ch_1" {
			t.Fatalf("call %d = %q, %v; want \"shipped ch_1\"", i+1, v, err)
		}
	}
	h.wantEffects(t, 1, 1)
	if n := h.unkeyed.Load(); n > 0 || h.keyed.Load() == 0 {
		t.Errorf("guard.KeyFromContext found no key %d times in the function and its step (and one %d times); want a key every time", n, h.keyed.Load())
	}
}

func composeErrorAfterStep(t *testing.T, h *composeHarness) {
	g := h.guard(t)
	var failing atomic.Bool
	failing.Store(true)
	if v, err := h.call(t, g, "order 1", h.body(how{failing: &failing})); err == nil {
		t.Fatalf("the first call = %q; want the failure after its step", v)
	}
	want := "shipped ch_1" // the step replayed
	if h.transactional() {
		want = "shipped ch_2" // the step rolled back with the call, and ran again
	}
	v, err := h.call(t, g, "order 1", h.body(how{failing: &failing}))
	if err != nil || v != want {
		t.Fatalf("retry = %q, %v; want %q: the step replayed (or, in a transaction, run again) and the order shipped", v, err, want)
	}
	h.wantEffects(t, 1, 1)
}

func composePayloadReused(t *testing.T, h *composeHarness) {
	g := h.guard(t)
	var failing atomic.Bool
	failing.Store(true)
	if _, err := h.call(t, g, "order 1, 100 EUR", h.body(how{failing: &failing})); err == nil {
		t.Fatal("the first call did not fail after its step")
	}
	v, err := h.call(t, g, "order 1, 200 EUR", h.body(how{}))
	switch {
	case err == nil && !h.transactional():
		t.Errorf("a call with the same key and another payload = %q; want it refused at the step", v)
	case err == nil:
		// Transactional: the first call's step rolled back with it, so
		// nothing of the first payload remains; the second is a new call.
		h.wantEffects(t, 1, 1)
		return
	case !errors.Is(err, guard.ErrPayloadMismatch):
		t.Errorf("a call with the same key and another payload failed with %v; want guard.ErrPayloadMismatch (or the transport's answer for it)", err)
	}
	h.wantEffects(t, 1, 0)
}

func composePayloadReusedAfterCompletion(t *testing.T, h *composeHarness) {
	if v, err := h.call(t, h.guard(t), "order 1, 100 EUR", h.body(how{})); err != nil || v != "shipped ch_1" {
		t.Fatalf("the first call = %q, %v; want \"shipped ch_1\"", v, err)
	}
	v, err := h.call(t, h.guard(t), "order 1, 200 EUR", h.body(how{}))
	if !errors.Is(err, guard.ErrPayloadMismatch) {
		t.Errorf("a completed key reused with another payload = %q, %v; want guard.ErrPayloadMismatch (or the transport's answer for it), never the first call's result", v, err)
	}
	if v, err := h.call(t, h.guard(t), "order 1, 100 EUR", h.body(how{})); err != nil || v != "shipped ch_1" {
		t.Errorf("the first payload again = %q, %v; want its replay, \"shipped ch_1\"", v, err)
	}
	h.wantEffects(t, 1, 1)
}
