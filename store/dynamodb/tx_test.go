package dynamodb_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/store"
	idemddb "github.com/idemguard/idemguard/store/dynamodb"
)

// The store's transactions on DynamoDB Local, below the guard.

func (e *txEnv) begin(t *testing.T, s *idemddb.Store) store.Tx[*idemddb.TxWrites] {
	t.Helper()
	if s == nil {
		s = e.s
	}
	tx, err := s.Begin(e.ctx)
	if err != nil {
		t.Fatalf("Begin: %v", err)
	}
	return tx
}

// done is rec completed with result.
func done(rec *store.Record, result string) *store.Record {
	d := *rec
	d.Status = store.StatusCompleted
	d.Result = []byte(result)
	d.LeaseExpiresAt = time.Time{}
	return &d
}

// Every kind of action and the completion are sent as one
// TransactWriteItems at Commit, and nothing before.
func TestTxCommit(t *testing.T) {
	e := newTxEnv(t)
	e.putAccount(t, "a", 10)
	e.putAccount(t, "gone", 0)
	rec := e.claim("scope#tx-commit")
	e.mustAcquire(t, rec)
	e.n.Reset()
	tx := e.begin(t, nil)
	w := tx.Handle()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(w.Put(e.biz, map[string]types.AttributeValue{"pk": s("charge#1"), "cents": num(3)}))
	must(w.Update(e.biz, pk("acct#a"), expression.Add(expression.Name("balance"), expression.Value(-3)),
		idemddb.If(expression.Name("balance").GreaterThanEqual(expression.Value(3)))))
	must(w.Delete(e.biz, pk("acct#gone")))
	must(w.ConditionCheck(e.biz, pk("acct#other"), expression.AttributeNotExists(expression.Name("pk"))))
	must(w.Add(types.TransactWriteItem{Put: &types.Put{TableName: &e.biz, Item: map[string]types.AttributeValue{"pk": s("raw")}}}))
	must(tx.Complete(e.ctx, done(rec, `"ok"`)))
	if w.Len() != 5 || e.n.Total() != 0 {
		t.Fatalf("before Commit: %d actions, sent %s; want 5 actions and nothing sent", w.Len(), e.n)
	}
	must(tx.Commit(e.ctx))
	if got := e.n.String(); got != "1 round trip: TransactWriteItems=1" {
		t.Errorf("Commit sent %s", got)
	}
	if e.item(t, "charge#1") == nil || e.item(t, "raw") == nil || e.item(t, "acct#gone") != nil || e.number(t, "acct#a", "balance") != 7 {
		t.Errorf("after Commit: charge %v, raw %v, gone %v, account %v", e.item(t, "charge#1"), e.item(t, "raw"), e.item(t, "acct#gone"), e.item(t, "acct#a"))
	}
	got, err := e.s.Get(e.ctx, rec.Key)
	if err != nil || got.Status != store.StatusCompleted || string(got.Result) != `"ok"` {
		t.Fatalf("record = %+v, %v; want it completed with the result", got, err)
	}
	if err := w.Put(e.biz, pk("late")); !errors.Is(err, idemddb.ErrTxEnded) {
		t.Errorf("Put after Commit = %v, want ErrTxEnded", err)
	}
	if err := tx.Commit(e.ctx); !errors.Is(err, idemddb.ErrTxEnded) {
		t.Errorf("a second Commit = %v, want ErrTxEnded", err)
	}
	if err := tx.Rollback(e.ctx); err != nil {
		t.Errorf("Rollback after Commit = %v, want nil", err)
	}
}

// The completion is fenced: held under the call's token and still in
// progress. Otherwise the transaction is cancelled with an error matching
// ErrTokenMismatch, and none of its writes happen.
func TestTxCompletionFenced(t *testing.T) {
	e := newTxEnv(t)
	for _, c := range []struct {
		name  string
		setup func(rec *store.Record) *store.Record // returns what the transaction completes
	}{
		{"taken over", func(rec *store.Record) *store.Record {
			e.mustAcquire(t, rec)
			other := *rec
			other.Token = "someone-else"
			return &other
		}},
		{"already completed", func(rec *store.Record) *store.Record {
			e.mustAcquire(t, rec)
			e.complete(t, rec, []byte(`"first"`))
			return rec
		}},
		{"released", func(rec *store.Record) *store.Record { return rec }},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec := e.claim("scope#fenced-" + c.name)
			target := c.setup(rec)
			before, _ := e.s.Get(e.ctx, rec.Key)
			tx := e.begin(t, nil)
			if err := tx.Handle().Put(e.biz, map[string]types.AttributeValue{"pk": s("fenced-" + c.name)}); err != nil {
				t.Fatal(err)
			}
			if err := tx.Complete(e.ctx, done(target, `"zombie"`)); err != nil {
				t.Fatal(err)
			}
			err := tx.Commit(e.ctx)
			var ce *idemddb.TxCanceledError
			if !errors.Is(err, store.ErrTokenMismatch) || !errors.As(err, &ce) || len(ce.Records) != 1 || ce.Records[0] != rec.Key {
				t.Fatalf("Commit = %v; want a *TxCanceledError matching ErrTokenMismatch that names the record", err)
			}
			if errors.Is(err, store.ErrThrottled) || len(ce.ConditionFailed()) != 0 {
				t.Errorf("Commit = %v: a fenced completion is neither throttling nor the function's condition", err)
			}
			if e.item(t, "fenced-"+c.name) != nil {
				t.Errorf("the function's write happened")
			}
			after, _ := e.s.Get(e.ctx, rec.Key)
			if fmt.Sprint(before) != fmt.Sprint(after) {
				t.Errorf("record changed from %+v to %+v", before, after)
			}
		})
	}
}

// Cancellations by conflicts or throttling are resent with the same
// ClientRequestToken; if they persist beyond the retryer's attempts, the
// error matches ErrThrottled. A cancellation by a failed condition is not
// resent.
func TestTxCommitResends(t *testing.T) {
	for _, c := range []struct {
		reason    string
		fail      int32
		ok        bool
		throttled bool
		sends     int
	}{
		{"TransactionConflict", 2, true, false, 3},
		{"ThrottlingError", 1, true, false, 2},
		{"TransactionConflict", -1, false, true, 3},
		{"ProvisionedThroughputExceeded", -1, false, true, 3},
		{"ConditionalCheckFailed", -1, false, false, 1},
	} {
		t.Run(fmt.Sprintf("%s×%d", c.reason, c.fail), func(t *testing.T) {
			e := newTxEnv(t)
			p, ep := newTxProxy(t)
			p.reason = c.reason
			p.cancel.Store(c.fail)
			s, err := idemddb.New(dynamodbtestClient(ep), e.table, idemddb.WithMaxAttempts(3))
			if err != nil {
				t.Fatal(err)
			}
			rec := e.claim("scope#resend")
			e.mustAcquire(t, rec)
			tx := e.begin(t, s)
			if err := tx.Handle().Update(e.biz, pk("acct#r"), expression.Add(expression.Name("charges"), expression.Value(1))); err != nil {
				t.Fatal(err)
			}
			if err := tx.Complete(e.ctx, done(rec, "1")); err != nil {
				t.Fatal(err)
			}
			err = tx.Commit(e.ctx)
			toks := p.tokens()
			if len(toks) != c.sends {
				t.Errorf("sent %d times (%v); want %d", len(toks), err, c.sends)
			}
			for _, tok := range toks {
				if tok != toks[0] || tok == "" {
					t.Errorf("tokens %q; want one ClientRequestToken for every send", toks)
					break
				}
			}
			if c.ok {
				if err != nil || e.number(t, "acct#r", "charges") != 1 {
					t.Fatalf("Commit = %v, %d charges; want success, applied once", err, e.number(t, "acct#r", "charges"))
				}
				return
			}
			var ce *idemddb.TxCanceledError
			if !errors.As(err, &ce) || errors.Is(err, store.ErrThrottled) != c.throttled {
				t.Fatalf("Commit = %v; want a *TxCanceledError, matching ErrThrottled: %v", err, c.throttled)
			}
			if c.reason == "ConditionalCheckFailed" && (len(ce.ConditionFailed()) != 1 || !errors.Is(err, store.ErrTokenMismatch)) {
				t.Errorf("Commit = %v; want the function's action and the completion named", err)
			}
			if e.number(t, "acct#r", "charges") != 0 {
				t.Errorf("a cancelled transaction was applied")
			}
		})
	}
}

// A single-item request that meets a transaction in flight on its item is
// refused with TransactionConflictException; the store's retryer sends it
// again.
func TestTransactionConflictExceptionRetried(t *testing.T) {
	e := newTxEnv(t)
	p, ep := newTxProxy(t)
	p.conflictOp = "PutItem"
	p.conflict.Store(2)
	s, err := idemddb.New(dynamodbtestClient(ep), e.table)
	if err != nil {
		t.Fatal(err)
	}
	rec := e.claim("scope#conflict")
	if old, err := s.Acquire(e.ctx, rec, e.t0); err != nil {
		t.Fatalf("Acquire through 2 transaction conflicts = %v, %v; want success on the 3rd attempt", old, err)
	}
	if p.conflict.Load() != 0 {
		t.Errorf("%d conflicts left unanswered", p.conflict.Load())
	}
}

// The limits, below the guard: what fits, what does not, and that a
// refused completion leaves the transaction usable.
func TestTxLimits(t *testing.T) {
	e := newTxEnv(t)
	put := func(w *idemddb.TxWrites, k string) error {
		return w.Put(e.biz, map[string]types.AttributeValue{"pk": s(k)})
	}

	t.Run("99 actions and 1 completion", func(t *testing.T) {
		rec := e.claim("scope#limit-99")
		e.mustAcquire(t, rec)
		tx := e.begin(t, nil)
		for i := range idemddb.MaxTxActions - 1 {
			if err := put(tx.Handle(), fmt.Sprint("fit-", i)); err != nil {
				t.Fatalf("action %d: %v", i, err)
			}
		}
		other := e.claim("scope#limit-99-step")
		e.mustAcquire(t, other)
		var le *idemddb.TxLimitError
		if err := tx.Complete(e.ctx, done(rec, "1")); err != nil {
			t.Fatalf("the 100th action, the completion: %v", err)
		}
		if err := tx.Complete(e.ctx, done(other, "1")); !errors.As(err, &le) || le.Limit != idemddb.TxTooManyActions {
			t.Fatalf("a 101st action = %v, want TxTooManyActions", err)
		}
		e.n.Reset()
		if err := tx.Commit(e.ctx); err != nil {
			t.Fatalf("Commit of 100 actions after a refused completion: %v", err)
		}
		if sent := e.n.Total(); sent != 1 || e.item(t, "fit-98") == nil {
			t.Errorf("the 100 actions were not applied in one request (%s)", e.n)
		}
	})

	t.Run("steps' completions leave less room", func(t *testing.T) {
		tx := e.begin(t, nil)
		for i := range 3 {
			step := e.claim(fmt.Sprint("scope#limit-step-", i))
			e.mustAcquire(t, step)
			if err := tx.Complete(e.ctx, done(step, "1")); err != nil {
				t.Fatal(err)
			}
		}
		// 3 steps' completions, and the call's own still to come: 96 left.
		for i := range idemddb.MaxTxActions - 4 {
			if err := put(tx.Handle(), fmt.Sprint("room-", i)); err != nil {
				t.Fatalf("action %d with 3 completions: %v", i, err)
			}
		}
		var le *idemddb.TxLimitError
		if err := put(tx.Handle(), "room-over"); !errors.As(err, &le) || le.Limit != idemddb.TxTooManyActions || le.Index != idemddb.MaxTxActions-4 {
			t.Fatalf("the 97th action with 3 step completions = %v, want TxTooManyActions at index 96", err)
		}
		e.n.Reset()
		if err := tx.Commit(e.ctx); !errors.As(err, &le) || e.n.Total() != 0 {
			t.Errorf("Commit after a refused action = %v, sent %s; want the refusal, nothing sent", err, e.n)
		}
	})

	t.Run("an item twice, found when the table's key shows", func(t *testing.T) {
		tx := e.begin(t, nil)
		w := tx.Handle()
		for _, k := range []string{"p1", "p2", "p1"} {
			if err := put(w, k); err != nil {
				t.Fatalf("Put %s before the table's key is known: %v", k, err)
			}
		}
		var le *idemddb.TxLimitError
		err := w.Update(e.biz, pk("other"), expression.Set(expression.Name("n"), expression.Value(1)))
		if !errors.As(err, &le) || le.Limit != idemddb.TxSameItem || le.Index != 2 {
			t.Fatalf("the Update that shows the key = %v; want TxSameItem at action 2 (the second Put of p1)", err)
		}
		if err := put(w, "p3"); !errors.Is(err, le) {
			t.Errorf("an action after the refusal = %v; want the same refusal (the transaction has failed)", err)
		}
		_ = tx.Rollback(e.ctx)
	})

	t.Run("numbers compare by value", func(t *testing.T) {
		tx := e.begin(t, nil)
		w := tx.Handle()
		n1 := map[string]types.AttributeValue{"pk": &types.AttributeValueMemberN{Value: "1"}}
		n2 := map[string]types.AttributeValue{"pk": &types.AttributeValueMemberN{Value: "1.00"}}
		if err := w.Delete("t-other", n1); err != nil {
			t.Fatal(err)
		}
		var le *idemddb.TxLimitError
		if err := w.Delete("t-other", n2); !errors.As(err, &le) || le.Limit != idemddb.TxSameItem {
			t.Fatalf("Delete of pk=1.00 after pk=1 = %v, want TxSameItem", err)
		}
		_ = tx.Rollback(e.ctx)
	})

	t.Run("the same item twice on a table no action keys", func(t *testing.T) {
		// The store cannot tell which attributes are the key: DynamoDB
		// refuses the transaction, and Commit says which limit.
		tx := e.begin(t, nil)
		w := tx.Handle()
		if err := put(w, "dup"); err != nil {
			t.Fatal(err)
		}
		if err := w.Put(e.biz, map[string]types.AttributeValue{"pk": s("dup"), "v": s("second")}); err != nil {
			t.Fatal(err)
		}
		err := tx.Commit(e.ctx)
		var le *idemddb.TxLimitError
		if !errors.As(err, &le) || le.Limit != idemddb.TxSameItem || le.Err == nil {
			t.Fatalf("Commit = %v; want DynamoDB's refusal as a TxLimitError of TxSameItem", err)
		}
		if e.item(t, "dup") != nil {
			t.Errorf("the refused transaction was applied")
		}
	})

	t.Run("a record's item, in sort-key mode", func(t *testing.T) {
		sk := newTxEnv(t, idemddb.WithAttributes(idemddb.Attributes{Key: "pk"}), idemddb.WithSortKey("sk", "idempotency#app"))
		tx := sk.begin(t, nil)
		rec := sk.claim("scope#sk")
		if err := tx.Complete(sk.ctx, done(rec, "1")); err != nil {
			t.Fatal(err)
		}
		var le *idemddb.TxLimitError
		err := tx.Handle().Put(sk.table, map[string]types.AttributeValue{"pk": s("idempotency#app"), "sk": s(rec.Key), "x": s("y")})
		if !errors.As(err, &le) || le.Limit != idemddb.TxRecordItem {
			t.Fatalf("a Put of the completed record's item = %v, want TxRecordItem", err)
		}
	})
}

// A client without TransactWriteItems cannot begin a transaction; the
// guard fails the call without running the function or keeping the claim.
func TestBeginNeedsTxAPI(t *testing.T) {
	e := newTxEnv(t)
	s, err := idemddb.New(apiOnly{e.client}, e.table)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Begin(e.ctx); err == nil || !strings.Contains(err.Error(), "TransactWriteItems") {
		t.Fatalf("Begin = %v, want an error naming TransactWriteItems", err)
	}
	g := e.guard(t, s)
	ran := false
	_, err = guard.DoTx(e.ctx, g, "charge", charge{ID: "no-tx"}, func(ctx context.Context, w *idemddb.TxWrites) (int, error) {
		ran = true
		return 1, nil
	})
	var se *adapt.StoreError
	if !errors.As(err, &se) || ran {
		t.Fatalf("DoTx = %v, ran %v; want a *adapt.StoreError and no run", err, ran)
	}
	if rec := e.record(t, "charge", charge{ID: "no-tx"}); rec != nil {
		t.Errorf("claim left: %+v", rec)
	}
}

// A transaction without actions sends nothing; a rolled-back one sends
// nothing and refuses more writes.
func TestTxEmptyAndRolledBack(t *testing.T) {
	e := newTxEnv(t)
	tx := e.begin(t, nil)
	if err := tx.Commit(e.ctx); err != nil || e.n.Total() != 0 {
		t.Errorf("empty Commit = %v, sent %s; want nothing sent", err, e.n)
	}
	tx = e.begin(t, nil)
	if err := tx.Handle().Put(e.biz, pk("rolled")); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(e.ctx); err != nil {
		t.Fatal(err)
	}
	if err := tx.Handle().Put(e.biz, pk("after")); !errors.Is(err, idemddb.ErrTxEnded) {
		t.Errorf("Put after Rollback = %v, want ErrTxEnded", err)
	}
	if err := tx.Commit(e.ctx); !errors.Is(err, idemddb.ErrTxEnded) || e.n.Total() != 0 || e.item(t, "rolled") != nil {
		t.Errorf("Commit after Rollback = %v, sent %s; want ErrTxEnded and nothing sent", err, e.n)
	}
}
