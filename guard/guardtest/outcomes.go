package guardtest

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/store"
)

// TxStore is a store whose transactions have handle H, and the side
// effects a guarded function writes through them, for [RunTxOutcomes].
type TxStore[H any] struct {
	// NewStore returns a fresh store; it must implement
	// store.Transactor[H].
	NewStore func(t *testing.T) store.Store
	// Write adds to tx the side effect named name (one row, one item),
	// which commits with the transaction.
	Write func(ctx context.Context, tx H, name string) error
	// Refuse adds to tx the side effect named name with a condition of the
	// function's own that the store refuses when the transaction commits:
	// on DynamoDB an action whose condition fails, on PostgreSQL a write
	// that a deferred constraint refuses. It returns nil: the refusal
	// comes at commit.
	Refuse func(ctx context.Context, tx H, name string) error
	// Count returns how many side effects named name committed.
	Count func(t *testing.T, name string) int
}

// RunTxOutcomes holds adapt.ExecuteTx on a store to the outcome it
// reports, and the error, on every path, with each case's side effects
// counted where they commit:
//
//   - Executed: the function's write commits with the completion;
//     [guard.OutcomeExecuted].
//   - Replayed: a second call returns the stored result without running
//     the function; [guard.OutcomeReplayed].
//   - ReleasedByError: the function writes and returns an error; nothing
//     commits, the key is released; [guard.OutcomeReleased] and the
//     function's error. A retry runs the function again.
//   - ReleasedByOwnCondition: the function's own condition refuses the
//     commit; nothing commits, the key is released;
//     [guard.OutcomeReleased] and a [*adapt.RefusedError], which matches
//     [guard.ErrRefused] and not [guard.ErrStore] (nor any error that
//     says the function did not run). A retry runs the function again.
//   - LeaseLost: the holder's claim is taken over while its function
//     runs (its clock runs behind: the lease end it wrote has lapsed for
//     the taker); the taker's write commits, the holder's rolls back;
//     the holder gets [guard.OutcomeExecuted] (it ran the function) and
//     [guard.ErrLeaseLost].
//   - Unguarded: a key selection that selects nothing, with
//     guard.WithRequireKey(false): the write commits in a transaction of
//     its own; [guard.OutcomeUnguarded]. A refused one is a
//     [*adapt.RefusedError] too.
func RunTxOutcomes[H any](t *testing.T, ts TxStore[H]) {
	runCases(t, func(ctx context.Context, t *testing.T) *txOutcomes[H] {
		return &txOutcomes[H]{ts: ts, s: ts.NewStore(t), ctx: ctx, key: fmt.Sprintf("%s-%d", t.Name(), time.Now().UnixNano())}
	}, []testCase[*txOutcomes[H]]{
		{"Executed", txExecuted[H]},
		{"Replayed", txReplayed[H]},
		{"ReleasedByError", txReleasedByError[H]},
		{"ReleasedByOwnCondition", txReleasedByOwnCondition[H]},
		{"LeaseLost", txLeaseLost[H]},
		{"Unguarded", txUnguarded[H]},
	})
}

// txOutcomes is one case of RunTxOutcomes.
type txOutcomes[H any] struct {
	ts   TxStore[H]
	s    store.Store
	ctx  context.Context
	key  string
	runs atomic.Int32
}

func (h *txOutcomes[H]) guard(t *testing.T, opts ...guard.Option) *guard.Guard {
	t.Helper()
	g, err := guard.New(h.s, append([]guard.Option{guard.WithLease(composeLease), guard.WithClockSkew(composeSkew), guard.WithKeyPath("id")}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// input is the request of the case: keyed by h.key.
func (h *txOutcomes[H]) input() map[string]string { return map[string]string{"id": h.key} }

// write is a guarded function that writes the side effect name.
func (h *txOutcomes[H]) write(name string) func(context.Context, H) (string, error) {
	return func(ctx context.Context, tx H) (string, error) {
		h.runs.Add(1)
		return "done " + name, h.ts.Write(ctx, tx, name)
	}
}

// refuse is a guarded function whose write of name its own condition
// refuses at commit.
func (h *txOutcomes[H]) refuse(name string) func(context.Context, H) (string, error) {
	return func(ctx context.Context, tx H) (string, error) {
		h.runs.Add(1)
		return "done " + name, h.ts.Refuse(ctx, tx, name)
	}
}

func (h *txOutcomes[H]) want(t *testing.T, name string, n int) {
	t.Helper()
	if got := h.ts.Count(t, name); got != n {
		t.Errorf("side effect %s committed %d times, want %d", name, got, n)
	}
}

func (h *txOutcomes[H]) wantRuns(t *testing.T, n int32) {
	t.Helper()
	if got := h.runs.Load(); got != n {
		t.Errorf("the function ran %d times, want %d", got, n)
	}
}

// errDeclined is the function's own error in ReleasedByError.
var errDeclined = errors.New("guardtest: declined")

func txExecuted[H any](t *testing.T, h *txOutcomes[H]) {
	v, out, err := adapt.ExecuteTx(h.ctx, h.guard(t), "outcomes", h.input(), h.write(h.key))
	if err != nil || out != guard.OutcomeExecuted || v != "done "+h.key {
		t.Fatalf("ExecuteTx = %q, %v, %v; want the result, OutcomeExecuted", v, out, err)
	}
	h.want(t, h.key, 1)
}

func txReplayed[H any](t *testing.T, h *txOutcomes[H]) {
	g := h.guard(t)
	if _, _, err := adapt.ExecuteTx(h.ctx, g, "outcomes", h.input(), h.write(h.key)); err != nil {
		t.Fatal(err)
	}
	v, out, err := adapt.ExecuteTx(h.ctx, g, "outcomes", h.input(), h.write(h.key))
	if err != nil || out != guard.OutcomeReplayed || v != "done "+h.key {
		t.Fatalf("the second ExecuteTx = %q, %v, %v; want the stored result, OutcomeReplayed", v, out, err)
	}
	h.wantRuns(t, 1)
	h.want(t, h.key, 1)
}

func txReleasedByError[H any](t *testing.T, h *txOutcomes[H]) {
	g := h.guard(t)
	_, out, err := adapt.ExecuteTx(h.ctx, g, "outcomes", h.input(), func(ctx context.Context, tx H) (string, error) {
		if _, err := h.write(h.key)(ctx, tx); err != nil {
			return "", err
		}
		return "", errDeclined
	})
	if !errors.Is(err, errDeclined) || out != guard.OutcomeReleased {
		t.Fatalf("ExecuteTx whose function fails = %v, %v; want its error, OutcomeReleased", out, err)
	}
	h.want(t, h.key, 0)
	if _, out, err := adapt.ExecuteTx(h.ctx, g, "outcomes", h.input(), h.write(h.key)); err != nil || out != guard.OutcomeExecuted {
		t.Fatalf("the retry = %v, %v; want it run: the key was released", out, err)
	}
	h.wantRuns(t, 2)
	h.want(t, h.key, 1)
}

func txReleasedByOwnCondition[H any](t *testing.T, h *txOutcomes[H]) {
	g := h.guard(t)
	for i := range 2 {
		_, out, err := adapt.ExecuteTx(h.ctx, g, "outcomes", h.input(), h.refuse(h.key))
		checkRefused(t, fmt.Sprintf("call %d, refused by its own condition", i+1), out, guard.OutcomeReleased, err)
	}
	h.wantRuns(t, 2) // the key was released: the retry ran again
	h.want(t, h.key, 0)
	if _, out, err := adapt.ExecuteTx(h.ctx, g, "outcomes", h.input(), h.write(h.key)); err != nil || out != guard.OutcomeExecuted {
		t.Fatalf("a call whose condition holds = %v, %v; want it run", out, err)
	}
	h.want(t, h.key, 1)
}

// checkRefused fails unless the call ended with outcome want and a
// refusal: a *adapt.RefusedError, which says nothing of the store's or of
// a function that did not run.
func checkRefused(t *testing.T, what string, out, want guard.Outcome, err error) {
	t.Helper()
	var re *adapt.RefusedError
	if !errors.Is(err, guard.ErrRefused) || !errors.As(err, &re) || !errors.Is(err, store.ErrRefused) || out != want {
		t.Fatalf("%s = %v, %v; want a *adapt.RefusedError matching store.ErrRefused, and %v", what, out, err, want)
	}
	for _, not := range []error{guard.ErrStore, guard.ErrInProgress, guard.ErrBatchStopped, guard.ErrLeaseLost, guard.ErrNotRecorded, store.ErrThrottled, store.ErrTokenMismatch} {
		if errors.Is(err, not) {
			t.Errorf("%s: error %v matches %v", what, err, not)
		}
	}
}

func txLeaseLost[H any](t *testing.T, h *txOutcomes[H]) {
	holder := h.guard(t, adapt.WithClock(behind{composeLease + 10*time.Second}))
	taker := h.guard(t)
	var takerOut guard.Outcome
	var takerErr error
	_, out, err := adapt.ExecuteTx(h.ctx, holder, "outcomes", h.input(), func(ctx context.Context, tx H) (string, error) {
		if _, err := h.write("holder")(ctx, tx); err != nil {
			return "", err
		}
		// The holder's lease has lapsed for the taker, which takes the
		// key over and commits while the holder's transaction is open.
		_, takerOut, takerErr = adapt.ExecuteTx(context.WithoutCancel(ctx), taker, "outcomes", h.input(), h.write("taker"))
		return "holder's", nil
	})
	if takerErr != nil || takerOut != guard.OutcomeExecuted {
		t.Fatalf("the taker = %v, %v; want it to take the lapsed claim over and run", takerOut, takerErr)
	}
	if !errors.Is(err, guard.ErrLeaseLost) || out != guard.OutcomeExecuted {
		t.Fatalf("the holder = %v, %v; want ErrLeaseLost and OutcomeExecuted (it ran; nothing of it committed)", out, err)
	}
	h.want(t, "holder", 0)
	h.want(t, "taker", 1)
	v, out, err := adapt.ExecuteTx(h.ctx, taker, "outcomes", h.input(), h.write(h.key))
	if err != nil || out != guard.OutcomeReplayed || v != "done taker" {
		t.Errorf("a later call = %q, %v, %v; want the taker's result replayed", v, out, err)
	}
}

func txUnguarded[H any](t *testing.T, h *txOutcomes[H]) {
	g := h.guard(t)
	none := map[string]string{"note": "no id"}
	v, out, err := adapt.ExecuteTx(h.ctx, g, "outcomes", none, h.write(h.key), guard.WithRequireKey(false))
	if err != nil || out != guard.OutcomeUnguarded || v != "done "+h.key {
		t.Fatalf("ExecuteTx without a key = %q, %v, %v; want the result, OutcomeUnguarded", v, out, err)
	}
	h.want(t, h.key, 1)
	_, out, err = adapt.ExecuteTx(h.ctx, g, "outcomes", none, h.refuse(h.key+"-refused"), guard.WithRequireKey(false))
	checkRefused(t, "ExecuteTx without a key, refused by its own condition", out, guard.OutcomeUnguarded, err)
	h.want(t, h.key+"-refused", 0)
}

// behind is a clock d behind the system's: a holder on it writes a lease
// end that has already lapsed for a guard on the system clock.
type behind struct{ d time.Duration }

func (b behind) Now() time.Time { return time.Now().Add(-b.d) }

func (behind) AfterFunc(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }
