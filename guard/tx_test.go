package guard_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/memory"
)

// txStore is a memory store whose transactions hold the completion until
// they commit, as a database's would.
type txStore struct{ *memory.Store }

func (s txStore) Begin(context.Context) (store.Tx[*fakeTx], error) { return &fakeTx{s: s.Store}, nil }

type fakeTx struct {
	s          *memory.Store
	pending    *store.Record
	rolledBack bool
	committed  bool
}

func (t *fakeTx) Handle() *fakeTx { return t }

func (t *fakeTx) Complete(ctx context.Context, rec *store.Record) error {
	old, err := t.s.Get(ctx, rec.Key)
	if err != nil || old.Token != rec.Token || old.Status != store.StatusInProgress {
		return store.ErrTokenMismatch
	}
	t.pending = rec
	return nil
}

func (t *fakeTx) Commit(ctx context.Context) error {
	t.committed = true
	if t.pending == nil {
		return nil
	}
	return t.s.Complete(ctx, t.pending)
}

func (t *fakeTx) Rollback(context.Context) error { t.rolledBack = true; return nil }

// DoTx commits the completion with the function's transaction; a panic
// after the function returned an error, with its transaction rolled back,
// releases the key: nothing committed, so a retry must run again.
func TestDoTx(t *testing.T) {
	s := txStore{memory.New()}
	g := mustGuard(t, s)
	var txs []*fakeTx
	fn := func(_ context.Context, tx *fakeTx) (int, error) {
		txs = append(txs, tx)
		return 7, nil
	}
	if v, err := guard.DoTx(ctx, g, "move", "t-1", fn); err != nil || v != 7 || len(txs) != 1 {
		t.Fatalf("DoTx = %d, %v after %d transactions", v, err, len(txs))
	}
	if v, err := guard.DoTx(ctx, g, "move", "t-1", fn); err != nil || v != 7 || len(txs) != 1 {
		t.Errorf("replay = %d, %v; %d transactions, want no second one", v, err, len(txs))
	}

	boom := func(error) bool { panic("predicate exploded") }
	failing := func(_ context.Context, tx *fakeTx) (int, error) {
		txs = append(txs, tx)
		return 0, errors.New("insufficient funds")
	}
	if r := recoverPanic(func() { guard.DoTx(ctx, g, "move", "t-2", failing, guard.WithDefiniteErrors(boom)) }); r == nil {
		t.Fatal("the predicate's panic did not reach the caller")
	}
	if !txs[len(txs)-1].rolledBack {
		t.Error("the failed call's transaction was not rolled back")
	}
	if n := s.Len(); n != 1 {
		t.Errorf("%d records; want the first call's only: the failed call's key is released, not completed", n)
	}
	if _, err := guard.DoTx(ctx, g, "move", "t-2", fn); err != nil {
		t.Errorf("retry after the rolled-back call: %v", err)
	}

	if _, err := guard.DoTx(ctx, mustGuard(t, memory.New()), "move", "t-3", fn); !errors.Is(err, guard.ErrInvalidOption) {
		t.Errorf("DoTx on a store without transactions = %v, want ErrInvalidOption", err)
	}
}

// lostTxStore is a txStore whose lease extensions find the claim taken
// over.
type lostTxStore struct{ txStore }

func (lostTxStore) Extend(context.Context, string, string, time.Time, time.Time) error {
	return store.ErrTokenMismatch
}

// A DoTx holder that lost its lease must not commit its writes, even when
// the result filter refuses its result: the transaction rolls back and the
// caller gets ErrLeaseLost, as when the result is kept.
func TestDoTxResultFilterAfterLeaseLost(t *testing.T) {
	clock := newFakeClock()
	s := lostTxStore{txStore{memory.New()}}
	g := mustGuard(t, s, adapt.WithClock(clock), guard.WithLease(3*time.Second))
	var txs []*fakeTx
	fn := func(ctx context.Context, tx *fakeTx) (int, error) {
		txs = append(txs, tx)
		for ctx.Err() == nil { // a zombie: it goes on after its context ended
			clock.Advance(time.Second)
			time.Sleep(time.Millisecond)
		}
		return 7, nil
	}
	refuse := guard.WithResultFilter(func(any) bool { return false })
	_, err := guard.DoTx(ctx, g, "move", "t-1", fn, refuse)
	if !errors.Is(err, guard.ErrLeaseLost) {
		t.Errorf("DoTx after the lease was lost = %v, want ErrLeaseLost", err)
	}
	if len(txs) != 1 || txs[0].committed || !txs[0].rolledBack {
		t.Fatalf("%d transactions; want one, rolled back and not committed", len(txs))
	}
}

// A step's definite error is a completion like its value: inside a DoTx it
// is written in the call's transaction and released if it rolls back, and
// under a result filter that refuses the call's result it is retired with
// the call's other steps. Either way the next call runs the step again.
func TestStepDefiniteErrorFollowsItsCall(t *testing.T) {
	declined := errors.New("declined")
	definite := guard.WithDefiniteErrors(func(err error) bool { return errors.Is(err, declined) })
	stepRuns := 0
	step := func(ctx context.Context) error {
		_, err := guard.Step(ctx, "charge", func(context.Context) (int, error) {
			stepRuns++
			return 0, declined
		}, definite)
		return err
	}

	t.Run("DoTx rolled back", func(t *testing.T) {
		stepRuns = 0
		g := mustGuard(t, txStore{memory.New()})
		fn := func(ctx context.Context, _ *fakeTx) (int, error) {
			if err := step(ctx); err == nil || err.Error() != declined.Error() {
				t.Errorf("step = %v, want the definite error", err)
			}
			return 0, errors.New("transient") // rolls the transaction back
		}
		for range 2 {
			if _, err := guard.DoTx(ctx, g, "move", "t-1", fn); err == nil {
				t.Error("DoTx succeeded, want the function's error")
			}
		}
		if stepRuns != 2 {
			t.Errorf("the step ran %d times, want 2: its record rolled back with the transaction", stepRuns)
		}
	})

	t.Run("result filtered out", func(t *testing.T) {
		stepRuns = 0
		g := mustGuard(t, memory.New())
		fn := func(ctx context.Context) (int, error) {
			_ = step(ctx) // the call goes on without the step
			return 7, nil
		}
		refuse := guard.WithResultFilter(func(any) bool { return false })
		for range 2 {
			if v, err := guard.Do(ctx, g, "move", "t-1", fn, refuse); err != nil || v != 7 {
				t.Errorf("Do = %d, %v; want 7", v, err)
			}
		}
		if stepRuns != 2 {
			t.Errorf("the step ran %d times, want 2: it was retired with its call", stepRuns)
		}
	})
}
