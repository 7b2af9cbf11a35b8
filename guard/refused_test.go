package guard_test

import (
	"context"
	"errors"
	"testing"

	"go.opentelemetry.io/otel/attribute"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/internal/telemetry"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/memory"
)

// commitFailStore is a txStore whose transactions fail to commit with
// err, writing nothing.
type commitFailStore struct {
	txStore
	err error
}

func (s commitFailStore) Begin(ctx context.Context) (store.Tx[*fakeTx], error) {
	tx, _ := s.txStore.Begin(ctx)
	return failingCommit{tx.(*fakeTx), s.err}, nil
}

type failingCommit struct {
	*fakeTx
	err error
}

func (t failingCommit) Commit(context.Context) error { return t.err }

// insufficientFunds is a store's error for a transaction refused by a
// condition of the function's own.
var insufficientFunds = &store.OpError{Store: "fake", Op: "Tx.Commit", Err: errors.New("balance >= 250 did not hold"), Refused: true}

// A transaction refused at commit by the function's own condition is the
// function's outcome: released, an ErrRefused that is no store error and
// reaches the store's cause, labelled "refused" in the calls metric; a
// commit the store failed is released too, and a store error.
func TestDoTxRefusedByOwnCondition(t *testing.T) {
	for _, tc := range []struct {
		name     string
		err      error
		want     error
		notWant  error
		wantType string
	}{
		{"refused", insufficientFunds, guard.ErrRefused, guard.ErrStore, telemetry.ErrorTypeRefused},
		{"store failed", &store.OpError{Store: "fake", Op: "Tx.Commit", Err: errors.New("connection refused")}, guard.ErrStore, guard.ErrRefused, telemetry.ErrorTypeStore},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newOtel()
			m := memory.New()
			g := mustGuard(t, commitFailStore{txStore{m}, tc.err}, h.opts...)
			runs := 0
			fn := func(context.Context, *fakeTx) (int, error) { runs++; return 7, nil }
			v, out, err := adapt.ExecuteTx(ctx, g, "debit", "d-1", fn)
			if !errors.Is(err, tc.want) || errors.Is(err, tc.notWant) || out != guard.OutcomeReleased {
				t.Fatalf("ExecuteTx whose commit fails with %v = %d, %v, %v; want %v (not %v) and OutcomeReleased", tc.err, v, out, err, tc.want, tc.notWant)
			}
			for _, safe := range []error{guard.ErrInProgress, guard.ErrBatchStopped, guard.ErrLeaseLost, guard.ErrNotRecorded, store.ErrThrottled} {
				if errors.Is(err, safe) {
					t.Errorf("error %v matches %v", err, safe)
				}
			}
			if !errors.Is(err, tc.err) {
				t.Errorf("error %v does not reach the store's %v", err, tc.err)
			}
			if tc.want == guard.ErrRefused {
				var re *adapt.RefusedError
				if !errors.As(err, &re) || re.Key == "" {
					t.Errorf("error %v is not a *adapt.RefusedError naming the key", err)
				}
			}
			if n := m.Len(); n != 0 {
				t.Errorf("%d records after the refused commit; want the key released", n)
			}
			if n := callCount(t, h, "debit", telemetry.OutcomeError, telemetry.ErrorTypeKey.String(tc.wantType)); n != 1 {
				t.Errorf("calls{outcome=error, error.type=%s} = %d, want 1", tc.wantType, n)
			}
			if n := callCount(t, h, "debit", telemetry.OutcomeError, attribute.String(string(telemetry.ErrorTypeKey), telemetry.ErrorTypeStore)); n != 0 && tc.wantType == telemetry.ErrorTypeRefused {
				t.Errorf("calls{error.type=store} = %d, want 0", n)
			}
			if _, _, err := adapt.ExecuteTx(ctx, g, "debit", "d-1", fn); runs != 2 || !errors.Is(err, tc.want) {
				t.Errorf("a retry ran the function %d times in all (%v); want it run again", runs, err)
			}
		})
	}
}
