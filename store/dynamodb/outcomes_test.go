package dynamodb_test

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/guard/guardtest"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/internal/telemetry"
	"github.com/idemguard/idemguard/store"
	idemddb "github.com/idemguard/idemguard/store/dynamodb"
)

// adapt.ExecuteTx reports the true outcome on every path on DynamoDB
// Local: the function's side effect is a counter item of the business
// table, incremented through the transaction; the refused one comes with
// an Update of an account that does not exist, conditional on its
// balance.
func TestDoTxOutcomes(t *testing.T) {
	var e *txEnv
	guardtest.RunTxOutcomes(t, guardtest.TxStore[*idemddb.TxWrites]{
		NewStore: func(t *testing.T) store.Store {
			e = newTxEnv(t)
			return e.s
		},
		Write: func(_ context.Context, w *idemddb.TxWrites, name string) error {
			return w.Update(e.biz, pk("fx#"+name), expression.Add(expression.Name("n"), expression.Value(1)))
		},
		Refuse: func(_ context.Context, w *idemddb.TxWrites, name string) error {
			if err := w.Update(e.biz, pk("fx#"+name), expression.Add(expression.Name("n"), expression.Value(1))); err != nil {
				return err
			}
			return w.Update(e.biz, pk("acct#"+name), expression.Add(expression.Name("balance"), expression.Value(-100)),
				idemddb.If(expression.Name("balance").GreaterThanEqual(expression.Value(100))))
		},
		Count: func(t *testing.T, name string) int { return int(e.number(t, "fx#"+name, "n")) },
	})
}

// Acceptance: a transactional debit refused by its condition on DynamoDB
// Local is released, is not ErrStore, and is labelled "refused", not
// "store", in the calls metric (read through the OpenTelemetry SDK), so
// that the store-error alert does not count it.
func TestDoTxRefusedDebitIsNotAStoreError(t *testing.T) {
	e := newTxEnv(t)
	reader := sdkmetric.NewManualReader()
	g := e.guard(t, nil, guard.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
	e.putAccount(t, "a-wallet", 100)
	c := charge{ID: "c-refused", Account: "a-wallet", Cents: 250}
	_, out, err := adapt.ExecuteTx(e.ctx, g, "debit", c, func(ctx context.Context, w *idemddb.TxWrites) (string, error) {
		return "debited", w.Update(e.biz, pk("acct#"+c.Account),
			expression.Add(expression.Name("balance"), expression.Value(-c.Cents)),
			idemddb.If(expression.Name("balance").GreaterThanEqual(expression.Value(c.Cents))),
			idemddb.ReturnOldOnFailure())
	}, guard.WithKeyPath("id"))
	if out != guard.OutcomeReleased || !errors.Is(err, guard.ErrRefused) || errors.Is(err, guard.ErrStore) {
		t.Fatalf("the refused debit = %v, %v; want OutcomeReleased and ErrRefused, not ErrStore", out, err)
	}
	var ce *idemddb.TxCanceledError
	if !errors.As(err, &ce) || len(ce.ConditionFailed()) != 1 {
		t.Errorf("the refusal %v does not carry the *TxCanceledError naming the debit", err)
	}
	if rec := e.record(t, "debit", c, guard.WithKeyPath("id")); rec != nil {
		t.Errorf("the refused debit left its record %+v; want the key released", rec)
	}
	if bal := e.number(t, "acct#a-wallet", "balance"); bal != 100 {
		t.Errorf("balance %d after the refused debit; want 100", bal)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(e.ctx, &rm); err != nil {
		t.Fatal(err)
	}
	byType := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != telemetry.MetricCalls {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				et, _ := dp.Attributes.Value(telemetry.ErrorTypeKey)
				byType[et.AsString()] += dp.Value
			}
		}
	}
	if byType[telemetry.ErrorTypeRefused] != 1 || byType[telemetry.ErrorTypeStore] != 0 {
		t.Errorf("calls by error.type = %v; want one %q and no %q", byType, telemetry.ErrorTypeRefused, telemetry.ErrorTypeStore)
	}
}

// A transactional commit that fails on its own deadline (its
// TransactWriteItems request held in transit past the guard's bound on
// the commit) still learns, under a fresh deadline, that it did not
// commit: the claim is released at once, not left in progress until its
// lease lapses, and the call is released with a store error, not
// ErrNotRecorded. The request, reaching DynamoDB late, finds the claim
// gone: the completion's condition cancels it, and nothing is written.
func TestDoTxCommitPastItsDeadline(t *testing.T) {
	e := newTxEnv(t)
	p, ep := newTxProxy(t)
	p.delay.Store(1)
	p.delayBy = 7 * time.Second // the guard bounds a commit at 5 s
	st, err := idemddb.New(dynamodbtestClient(ep), e.table)
	if err != nil {
		t.Fatal(err)
	}
	g := e.guard(t, st)
	c := charge{ID: "c-late", Account: "a-late", Cents: 4}
	var runs atomic.Int32
	fn := func(ctx context.Context, w *idemddb.TxWrites) (int, error) {
		runs.Add(1)
		return 4, e.charge(w, c, "w")
	}
	_, out, err := adapt.ExecuteTx(e.ctx, g, "charge", c, fn)
	if errors.Is(err, guard.ErrNotRecorded) || !errors.Is(err, guard.ErrStore) || out != guard.OutcomeReleased {
		t.Fatalf("DoTx whose commit outlived its deadline = %v, %v; want a store error and OutcomeReleased (the record says it did not commit)", out, err)
	}
	if rec := e.record(t, "charge", c); rec != nil {
		t.Fatalf("the claim is left %v (lease until %v); want it released", rec.Status, rec.LeaseExpiresAt)
	}
	select {
	case code := <-p.late:
		if code != http.StatusBadRequest {
			t.Errorf("the late TransactWriteItems got status %d; want 400, cancelled by the completion's condition", code)
		}
	case <-e.ctx.Done():
		t.Fatal("the delayed request never reached DynamoDB")
	}
	if it := e.item(t, "charge#c-late"); it != nil {
		t.Errorf("the late request wrote %v; want it cancelled", it)
	}
	if v, err := guard.DoTx(e.ctx, g, "charge", c, fn); err != nil || v != 4 || runs.Load() != 2 {
		t.Fatalf("retry = %d, %v after %d runs; want it run again", v, err, runs.Load())
	}
	if n := e.number(t, "acct#a-late", "charges"); n != 1 {
		t.Errorf("%d charges; want 1", n)
	}
}
