package guard_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/memory"
)

// Result filters and steps, where they meet: a step's own filter is the
// step's alone, and the call's filter releases every step of the call.

// refuseAll is a result filter that keeps nothing.
var refuseAll = guard.WithResultFilter(func(any) bool { return false })

// A step whose own result filter refuses its result inside a DoTx neither
// commits nor ends the call's transaction, nor releases the steps
// completed before it: the call's writes commit once, with the call's
// completion and the earlier step's. The refused step's claim is
// released, so a retry of a call that failed after it runs it again.
// Before, the refusal committed the transaction halfway through the
// function, retired the earlier step, and the call's own commit applied
// the writes a second time.
func TestStepFilterInsideDoTx(t *testing.T) {
	t.Run("call completes", func(t *testing.T) {
		s := &ledgerStore{Store: memory.New()}
		g := mustGuard(t, s)
		var reserves, quotes int
		fn := func(ctx context.Context, tx *ledgerTx) (string, error) {
			tx.writes = append(tx.writes, "debit alice 100")
			if _, err := guard.Step(ctx, "reserve", func(context.Context) (int, error) { reserves++; return 1, nil }); err != nil {
				return "", err
			}
			q, err := guard.Step(ctx, "quote", func(context.Context) (int, error) { quotes++; return 42, nil }, refuseAll)
			if err != nil || q != 42 {
				return "", fmt.Errorf("quote = %d, %v; want the refused result returned", q, err)
			}
			tx.writes = append(tx.writes, "credit bob 100")
			return "moved", nil
		}
		v, out, err := adapt.ExecuteTx(ctx, g, "transfer", "t-1", fn)
		if err != nil || v != "moved" || out != guard.OutcomeExecuted {
			t.Fatalf("ExecuteTx = %q, %v, %v; want moved, executed", v, out, err)
		}
		if want := "[debit alice 100 credit bob 100]"; fmt.Sprint(s.ledger) != want {
			t.Errorf("ledger = %v, want %s: the call's writes once", s.ledger, want)
		}
		if got := stepRecord(t, s.Store, "transfer", "t-1", "reserve"); got == nil || got.Status != store.StatusCompleted || !got.Live(time.Now()) {
			t.Errorf("the earlier step's record = %+v; want it completed and live, committed with the call", got)
		}
		if got := stepRecord(t, s.Store, "transfer", "t-1", "quote"); got != nil {
			t.Errorf("the refused step's record = %+v; want it released", got)
		}
		if v, out, err := adapt.ExecuteTx(ctx, g, "transfer", "t-1", fn); v != "moved" || out != guard.OutcomeReplayed || err != nil {
			t.Errorf("second call = %q, %v, %v; want the stored result", v, out, err)
		}
		if reserves != 1 || quotes != 1 || len(s.ledger) != 2 {
			t.Errorf("reserve ran %d times, quote %d, ledger %v; want once, once, two writes", reserves, quotes, s.ledger)
		}
	})

	t.Run("call fails after the step", func(t *testing.T) {
		s := &ledgerStore{Store: memory.New()}
		g := mustGuard(t, s)
		var quotes int
		fail := true
		fn := func(ctx context.Context, tx *ledgerTx) (string, error) {
			tx.writes = append(tx.writes, "debit alice 100")
			if _, err := guard.Step(ctx, "quote", func(context.Context) (int, error) { quotes++; return quotes, nil }, refuseAll); err != nil {
				return "", err
			}
			if fail {
				fail = false
				return "", errors.New("connection reset") // rolls back
			}
			return "moved", nil
		}
		if _, err := guard.DoTx(ctx, g, "transfer", "t-1", fn); err == nil {
			t.Fatal("the first attempt did not fail")
		}
		if len(s.ledger) != 0 {
			t.Fatalf("ledger after the rolled-back attempt = %v; want nothing committed", s.ledger)
		}
		if v, err := guard.DoTx(ctx, g, "transfer", "t-1", fn); err != nil || v != "moved" {
			t.Fatalf("retry = %q, %v", v, err)
		}
		if fmt.Sprint(s.ledger) != "[debit alice 100]" || quotes != 2 {
			t.Errorf("ledger %v, %d quotes; want the debit once and the refused step run by each attempt", s.ledger, quotes)
		}
	})
}

// Outside a transaction too, a step's own filter releases the step alone:
// the steps before it stay completed, and the retry of a call that failed
// replays them.
func TestStepFilterKeepsEarlierSteps(t *testing.T) {
	m, _ := newMemory()
	g := mustGuard(t, m)
	var reserves, quotes int
	fail := true
	fn := func(ctx context.Context) (int, error) {
		if _, err := guard.Step(ctx, "reserve", func(context.Context) (int, error) { reserves++; return 1, nil }); err != nil {
			return 0, err
		}
		q, err := guard.Step(ctx, "quote", func(context.Context) (int, error) { quotes++; return quotes, nil }, refuseAll)
		if err != nil {
			return 0, err
		}
		if fail {
			fail = false
			return 0, errors.New("mailer down")
		}
		return q, nil
	}
	keep := guard.WithResultFilter(func(any) bool { return true }) // gives the call its list of steps
	if _, err := guard.Do(ctx, g, "checkout", "o-1", fn, keep); err == nil {
		t.Fatal("the first attempt did not fail")
	}
	v, out, err := adapt.Execute(ctx, g, "checkout", "o-1", fn, keep)
	if err != nil || v != 2 || out != guard.OutcomeExecuted {
		t.Fatalf("retry = %d, %v, %v; want the refused step run again (2), executed", v, out, err)
	}
	if reserves != 1 {
		t.Errorf("reserve ran %d times; want once: the refused step after it released only itself", reserves)
	}
}

// When the call's own filter refuses its result, every step of the call is
// released, those it replayed from an earlier attempt too: from the
// store, the local cache, or under a previous key secret. Before, only the
// steps completed in the refused attempt were, and the next call replayed
// the others.
func TestResultFilterReleasesReplayedSteps(t *testing.T) {
	for _, tc := range []struct {
		name          string
		first, second []guard.Option // the guards of the first attempt and of the later ones
	}{
		{"store", nil, nil},
		{"cache", []guard.Option{guard.WithCache(16, 0)}, nil},
		{"previous secret", []guard.Option{guard.WithKeySecret([]byte("old"))}, []guard.Option{guard.WithKeySecret([]byte("new"), []byte("old"))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, _ := newMemory()
			first := mustGuard(t, m, tc.first...)
			later := first
			if tc.second != nil {
				later = mustGuard(t, m, tc.second...)
			}
			charges := 0
			fail := true
			fn := func(ctx context.Context) (int, error) {
				n, err := guard.Step(ctx, "charge", func(context.Context) (int, error) { charges++; return charges, nil })
				if err != nil {
					return 0, err
				}
				if fail {
					fail = false
					return 0, errors.New("mailer down") // releases the call; the step stays completed
				}
				return n, nil
			}
			keepEven := guard.WithResultFilter(func(v any) bool { return v.(int)%2 == 0 })
			if _, out, err := adapt.Execute(ctx, first, "pay", "p-1", fn, keepEven); err == nil || out != guard.OutcomeReleased {
				t.Fatalf("first attempt = %v, %v; want its error, released", out, err)
			}
			v, out, err := adapt.Execute(ctx, later, "pay", "p-1", fn, keepEven)
			if err != nil || v != 1 || out != guard.OutcomeReleased || charges != 1 {
				t.Fatalf("second attempt = %d, %v, %v after %d charges; want the replayed step's 1, refused and released", v, out, err, charges)
			}
			v, out, err = adapt.Execute(ctx, later, "pay", "p-1", fn, keepEven)
			if err != nil || v != 2 || out != guard.OutcomeExecuted || charges != 2 {
				t.Errorf("third attempt = %d, %v, %v after %d charges; want the step run again (2), executed", v, out, err, charges)
			}
		})
	}
}

// stepRecord returns the record in s of the step called name of the call
// of input within scope by a guard without a key secret, or nil.
func stepRecord(t *testing.T, s store.Store, scope string, input any, name string) *store.Record {
	t.Helper()
	var key string // derived by a call on a store of its own
	_, err := guard.Do(ctx, mustGuard(t, memory.New()), scope, input, func(ctx context.Context) (int, error) {
		return guard.Step(ctx, name, func(ctx context.Context) (int, error) {
			key, _ = guard.KeyFromContext(ctx)
			return 0, nil
		})
	})
	if err != nil || key == "" {
		t.Fatalf("deriving the key of step %s: %v", name, err)
	}
	rec, err := s.Get(ctx, key)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil
	case err != nil:
		t.Fatal(err)
	}
	return rec
}
