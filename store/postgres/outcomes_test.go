package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/guard/guardtest"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/internal/telemetry"
	"github.com/idemguard/idemguard/store"
)

// adapt.ExecuteTx reports the true outcome on every path on PostgreSQL:
// the function's side effect is a row; the refused one comes with two
// rows of one id in a table whose unique constraint is checked at commit
// (DEFERRABLE INITIALLY DEFERRED).
func TestDoTxOutcomes(t *testing.T) {
	var e *effects
	guardtest.RunTxOutcomes(t, guardtest.TxStore[pgx.Tx]{
		NewStore: func(t *testing.T) store.Store {
			e = newEffects(t, nil)
			e.exec(t, `CREATE TABLE "`+e.table+`_once" (id text UNIQUE DEFERRABLE INITIALLY DEFERRED)`)
			t.Cleanup(func() { _, _ = e.pool.Exec(context.Background(), `DROP TABLE IF EXISTS "`+e.table+`_once"`) })
			return e.s
		},
		Write: func(ctx context.Context, tx pgx.Tx, name string) error { return e.write(ctx, tx, name, "w") },
		Refuse: func(ctx context.Context, tx pgx.Tx, name string) error {
			if err := e.write(ctx, tx, name, "w"); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO "`+e.table+`_once" (id) VALUES ($1), ($1)`, name)
			return err
		},
		Count: func(t *testing.T, name string) int { return e.total(t, name) },
	})
}

// accounts adds to e a table of accounts whose balance may not go below
// zero, checked at commit by a constraint trigger raising check_violation
// (SQLSTATE 23514), and an account with balance.
func (e *effects) accounts(t *testing.T, account string, balance int) string {
	t.Helper()
	table := e.table + "_accounts"
	e.exec(t, fmt.Sprintf(`CREATE TABLE %[1]q (id text PRIMARY KEY, balance int NOT NULL);
		CREATE FUNCTION %[2]q() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.balance < 0 THEN
				RAISE EXCEPTION 'insufficient funds in %%', NEW.id USING ERRCODE = 'check_violation';
			END IF;
			RETURN NULL;
		END $$;
		CREATE CONSTRAINT TRIGGER %[2]q AFTER INSERT OR UPDATE ON %[1]q
			DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION %[2]q();
		INSERT INTO %[1]q (id, balance) VALUES ('%[3]s', %[4]d)`, table, table+"_funds", account, balance))
	t.Cleanup(func() {
		_, _ = e.pool.Exec(context.Background(), fmt.Sprintf(`DROP TABLE IF EXISTS %q; DROP FUNCTION IF EXISTS %q()`, table, table+"_funds"))
	})
	return table
}

// Acceptance: a transactional debit refused at commit by a constraint of
// the function's own is released, is not ErrStore, carries the server's
// error, and is labelled "refused", not "store", in the calls metric.
func TestDoTxRefusedDebitIsNotAStoreError(t *testing.T) {
	e := newEffects(t, nil)
	accounts := e.accounts(t, "a-1", 100)
	reader := sdkmetric.NewManualReader()
	g := e.guard(t, nil, guard.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
	in := transfer{ID: "debit-1", Amount: 250}
	_, out, err := adapt.ExecuteTx(e.ctx, g, "debit", in, func(ctx context.Context, tx pgx.Tx) (string, error) {
		if err := e.write(ctx, tx, in.ID, "w"); err != nil {
			return "", err
		}
		_, err := tx.Exec(ctx, `UPDATE "`+accounts+`" SET balance = balance - $1 WHERE id = 'a-1'`, in.Amount)
		return "debited", err
	})
	if out != guard.OutcomeReleased || !errors.Is(err, guard.ErrRefused) || errors.Is(err, guard.ErrStore) || errors.Is(err, store.ErrThrottled) {
		t.Fatalf("the refused debit = %v, %v; want OutcomeReleased and ErrRefused, not ErrStore", out, err)
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "23514" || !strings.Contains(err.Error(), "insufficient funds") {
		t.Errorf("the refusal %v does not carry the server's check_violation", err)
	}
	if rec := e.record(t, "debit", in); rec != nil {
		t.Errorf("the refused debit left its record %+v; want the key released", rec)
	}
	if n := e.total(t, in.ID); n != 0 {
		t.Errorf("%d rows of the refused debit committed, want 0", n)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(e.ctx, &rm); err != nil {
		t.Fatal(err)
	}
	byType := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == telemetry.MetricCalls {
				for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
					et, _ := dp.Attributes.Value(telemetry.ErrorTypeKey)
					byType[et.AsString()] += dp.Value
				}
			}
		}
	}
	if byType[telemetry.ErrorTypeRefused] != 1 || byType[telemetry.ErrorTypeStore] != 0 {
		t.Errorf("calls by error.type = %v; want one %q and no %q", byType, telemetry.ErrorTypeRefused, telemetry.ErrorTypeStore)
	}
}

// A transactional commit that fails on its own deadline (a constraint
// trigger checked at commit sleeps past the guard's 5 s bound on the
// commit) still learns, under a fresh deadline, whether it committed.
// When the context ends, pgx closes the connection and asks the server to
// cancel the statement: the commit then fails, and the claim is released
// at once, not left in progress until its lease lapses. A trigger that
// outlives the cancel lets the commit land after the client gave up: the
// call then reports the success it was. Either way the guard reports what
// the database holds, and never ErrNotRecorded.
func TestDoTxCommitPastItsDeadline(t *testing.T) {
	for _, lands := range []bool{true, false} {
		t.Run(fmt.Sprintf("lands=%v", lands), func(t *testing.T) {
			e := newEffects(t, nil)
			slow := e.table + "_slow"
			e.exec(t, fmt.Sprintf(`CREATE TABLE %[1]q (fail bool NOT NULL);
				CREATE FUNCTION %[1]q() RETURNS trigger LANGUAGE plpgsql AS $$
				BEGIN
					BEGIN
						PERFORM pg_sleep(7);
					EXCEPTION WHEN query_canceled THEN
						IF NEW.fail THEN
							RAISE;
						END IF;
						PERFORM pg_sleep(1); -- and the commit lands, after the client gave up
					END;
					IF NEW.fail THEN
						RAISE EXCEPTION 'refused after the client gave up';
					END IF;
					RETURN NULL;
				END $$;
				CREATE CONSTRAINT TRIGGER %[1]q AFTER INSERT ON %[1]q
					DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION %[1]q()`, slow))
			t.Cleanup(func() {
				_, _ = e.pool.Exec(context.Background(), fmt.Sprintf(`DROP TABLE IF EXISTS %[1]q; DROP FUNCTION IF EXISTS %[1]q()`, slow))
			})
			g := e.guard(t, nil)
			in := transfer{ID: fmt.Sprintf("t-late-%v", lands)}
			var runs atomic.Int32
			fn := func(ctx context.Context, tx pgx.Tx) (int, error) {
				if runs.Add(1) == 1 {
					if _, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %q (fail) VALUES ($1)`, slow), !lands); err != nil {
						return 0, err
					}
				}
				return 6, e.write(ctx, tx, in.ID, "w")
			}
			v, out, err := adapt.ExecuteTx(e.ctx, g, "move", in, fn)
			if errors.Is(err, guard.ErrNotRecorded) {
				t.Fatalf("DoTx whose commit outlived its deadline = %v; want it to learn whether it committed", err)
			}
			// What the guard reports must be what the database holds.
			rec, rows := e.record(t, "move", in), e.total(t, in.ID)
			landed := err == nil
			switch {
			case landed && (v != 6 || out != guard.OutcomeExecuted || rec == nil || rec.Status != store.StatusCompleted || rows != 1):
				t.Fatalf("DoTx = %d, %v, nil with record %+v and %d rows; want 6, OutcomeExecuted, the record completed, the row committed", v, out, rec, rows)
			case !landed && (!errors.Is(err, guard.ErrStore) || out != guard.OutcomeReleased || rec != nil || rows != 0):
				t.Fatalf("DoTx = %v, %v with record %+v and %d rows; want a store error, OutcomeReleased, the claim released, no row", out, err, rec, rows)
			case !lands && landed:
				t.Fatal("the commit its trigger refuses succeeded")
			case lands && !landed:
				// On a starved machine the commit can start so late that
				// pgx's cancel reaches the server before the trigger can
				// outlive it: the server cancels the commit, and the guard
				// said so.
				t.Logf("the server cancelled the commit before its trigger could outlive the cancel: %v", err)
			}
			if v, err := guard.DoTx(e.ctx, g, "move", in, fn); err != nil || v != 6 {
				t.Fatalf("retry = %d, %v", v, err)
			}
			wantRuns := map[bool]int32{true: 1, false: 2}[landed]
			if n := e.total(t, in.ID); n != 1 || runs.Load() != wantRuns {
				t.Errorf("%d rows after %d runs; want 1 row, %d runs", n, runs.Load(), wantRuns)
			}
		})
	}
}
