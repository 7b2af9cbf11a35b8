package dynamodb_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/store"
	idemddb "github.com/idemguard/idemguard/store/dynamodb"
)

// The transactional guard end to end on DynamoDB Local: guard.DoTx over
// Store.Begin, the function's writes added to *idemddb.TxWrites and sent
// with the completion as one TransactWriteItems.

// The function's writes and the completion commit together, in one
// request after the claim; a replay is the claim alone and never builds a
// transaction; a cached replay sends nothing.
func TestDoTxCommitsTogether(t *testing.T) {
	e := newTxEnv(t)
	g := e.guard(t, nil)
	c := charge{ID: "c-1", Account: "a-1", Cents: 250}
	var runs atomic.Int32
	fn := func(ctx context.Context, w *idemddb.TxWrites) (string, error) {
		runs.Add(1)
		return "receipt-" + c.ID, e.charge(w, c, "first")
	}
	v, err := guard.DoTx(e.ctx, g, "charge", c, fn)
	if err != nil || v != "receipt-c-1" {
		t.Fatalf("DoTx = %q, %v", v, err)
	}
	if got := e.n.String(); got != "2 round trips: PutItem=1 TransactWriteItems=1" {
		t.Errorf("first call sent %s; want the claim and one TransactWriteItems", got)
	}
	if e.number(t, "acct#a-1", "charges") != 1 || e.number(t, "acct#a-1", "balance") != -250 || e.item(t, "charge#c-1") == nil {
		t.Errorf("after the call: account %v, charge %v; want one charge of 250", e.item(t, "acct#a-1"), e.item(t, "charge#c-1"))
	}
	rec := e.record(t, "charge", c)
	if rec == nil || rec.Status != store.StatusCompleted || string(rec.Result) != `"receipt-c-1"` || rec.LeaseExpiresAt != (time.Time{}) {
		t.Fatalf("record = %+v, want COMPLETED with the receipt and no lease", rec)
	}

	e.n.Reset()
	v, err = guard.DoTx(e.ctx, g, "charge", c, fn)
	if err != nil || v != "receipt-c-1" || runs.Load() != 1 {
		t.Fatalf("replay = %q, %v after %d runs; want the stored receipt, 1 run", v, err, runs.Load())
	}
	if got := e.n.String(); got != "1 round trip: PutItem=1" {
		t.Errorf("replay sent %s; want the claim only, no transaction", got)
	}

	cached := e.guard(t, nil, guard.WithCache(16, 0))
	if _, err := guard.DoTx(e.ctx, cached, "charge", c, fn); err != nil {
		t.Fatal(err)
	}
	e.n.Reset()
	if v, err = guard.DoTx(e.ctx, cached, "charge", c, fn); err != nil || v != "receipt-c-1" || e.n.Total() != 0 {
		t.Errorf("cached replay = %q, %v, sent %s; want the receipt and no request", v, err, e.n)
	}
	if runs.Load() != 1 || e.number(t, "acct#a-1", "charges") != 1 {
		t.Errorf("after the replays: %d runs, %d charges; want 1 and 1", runs.Load(), e.number(t, "acct#a-1", "charges"))
	}
}

// Acceptance: 4 guards (as 4 processes would have) × 50 concurrent calls
// with one key: the business writes are applied once and every call gets
// the result.
func TestDoTxConcurrentGuards(t *testing.T) {
	e := newTxEnv(t)
	c := charge{ID: "c-hot", Account: "a-hot", Cents: 100}
	var runs atomic.Int32
	fn := func(ctx context.Context, w *idemddb.TxWrites) (string, error) {
		runs.Add(1)
		time.Sleep(20 * time.Millisecond) // long enough for the others to meet the claim
		return fmt.Sprintf("receipt-%d", runs.Load()), e.charge(w, c, "w")
	}
	const guards, calls = 4, 50
	var wg sync.WaitGroup
	results := make([]string, guards*calls)
	errs := make([]error, guards*calls)
	for i := range guards {
		g := e.guard(t, nil)
		for j := range calls {
			wg.Go(func() {
				results[i*calls+j], errs[i*calls+j] = guard.DoTx(e.ctx, g, "charge", c, fn, guard.WithWait(time.Minute))
			})
		}
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if results[i] != results[0] {
			t.Fatalf("call %d got %q, call 0 %q; every call must get the one result", i, results[i], results[0])
		}
	}
	if runs.Load() != 1 || e.number(t, "acct#a-hot", "charges") != 1 || e.number(t, "acct#a-hot", "balance") != -100 {
		t.Errorf("%d runs, account %v; want 1 run, 1 charge of 100", runs.Load(), e.item(t, "acct#a-hot"))
	}
	t.Logf("%d calls from %d guards: %s", guards*calls, guards, e.n)
}

// A function that fails sends nothing and the key is released: the retry
// runs it again. A definite error is recorded and replayed, and its writes
// are never sent.
func TestDoTxFailureSendsNothing(t *testing.T) {
	e := newTxEnv(t)
	g := e.guard(t, nil)
	c := charge{ID: "c-fail", Account: "a-fail", Cents: 5}
	fail := true
	var runs atomic.Int32
	fn := func(ctx context.Context, w *idemddb.TxWrites) (int, error) {
		runs.Add(1)
		if err := e.charge(w, c, "w"); err != nil {
			return 0, err
		}
		if fail {
			return 0, errors.New("downstream unavailable")
		}
		return 7, nil
	}
	if _, err := guard.DoTx(e.ctx, g, "charge", c, fn); err == nil || err.Error() != "downstream unavailable" {
		t.Fatalf("failing DoTx = %v, want the function's error", err)
	}
	if got := e.n.Snapshot(); got["TransactWriteItems"] != 0 {
		t.Errorf("the failed call sent %s; want no transaction", e.n)
	}
	if e.item(t, "charge#c-fail") != nil || e.record(t, "charge", c) != nil {
		t.Errorf("the failed call left a charge or a record")
	}
	fail = false
	if v, err := guard.DoTx(e.ctx, g, "charge", c, fn); err != nil || v != 7 || runs.Load() != 2 {
		t.Fatalf("retry = %d, %v after %d runs; want 7 from a second run", v, err, runs.Load())
	}
	if n := e.number(t, "acct#a-fail", "charges"); n != 1 {
		t.Errorf("after the retry: %d charges, want 1", n)
	}

	errDeclined := errors.New("card declined")
	d := charge{ID: "c-declined", Account: "a-fail", Cents: 9}
	var defRuns atomic.Int32
	declined := func(ctx context.Context, w *idemddb.TxWrites) (int, error) {
		defRuns.Add(1)
		if err := e.charge(w, d, "w"); err != nil {
			return 0, err
		}
		return 0, errDeclined
	}
	isDef := guard.WithDefiniteErrors(func(err error) bool { return errors.Is(err, errDeclined) })
	e.n.Reset()
	if _, err := guard.DoTx(e.ctx, g, "charge", d, declined, isDef); !errors.Is(err, errDeclined) {
		t.Fatalf("DoTx with a definite error = %v", err)
	}
	if got := e.n.Snapshot(); got["TransactWriteItems"] != 0 || e.item(t, "charge#c-declined") != nil {
		t.Errorf("the definite error's call sent %s; want its writes never sent", e.n)
	}
	rec := e.record(t, "charge", d)
	if rec == nil || rec.Status != store.StatusCompleted || rec.ResultKind != store.ResultError {
		t.Fatalf("record of the definite error = %+v, want COMPLETED with an error", rec)
	}
	_, err := guard.DoTx(e.ctx, g, "charge", d, declined, isDef)
	var re *adapt.ReplayedError
	if !errors.As(err, &re) || re.Message != errDeclined.Error() || defRuns.Load() != 1 {
		t.Errorf("replay of the definite error = %v after %d runs; want the recorded error, no run", err, defRuns.Load())
	}
}

// A panic sends nothing, releases the key, and goes on in the caller.
func TestDoTxPanicSendsNothing(t *testing.T) {
	e := newTxEnv(t)
	g := e.guard(t, nil)
	c := charge{ID: "c-panic", Account: "a-panic", Cents: 5}
	func() {
		defer func() {
			if r := recover(); r != "kaboom" {
				t.Errorf("recovered %v, want the function's panic", r)
			}
		}()
		_, _ = guard.DoTx(e.ctx, g, "charge", c, func(ctx context.Context, w *idemddb.TxWrites) (int, error) {
			if err := e.charge(w, c, "w"); err != nil {
				t.Error(err)
			}
			panic("kaboom")
		})
	}()
	if got := e.n.Snapshot(); got["TransactWriteItems"] != 0 || e.item(t, "charge#c-panic") != nil || e.record(t, "charge", c) != nil {
		t.Errorf("the panicking call sent %s and left charge %v, record %v; want nothing", e.n, e.item(t, "charge#c-panic"), e.record(t, "charge", c))
	}
}

// Acceptance: a zombie — a holder paused past its lease and the guard's
// clock skew — has its claim taken over. Its completion's condition fails,
// its writes are cancelled with the transaction, and it gets
// ErrLeaseLost; the new holder's writes are the ones that exist.
func TestDoTxZombieCancelled(t *testing.T) {
	e := newTxEnv(t)
	c := charge{ID: "c-zombie", Account: "a-zombie", Cents: 40}
	const lease = time.Minute
	zombie := e.guard(t, nil)
	taker := e.guard(t, nil, adapt.WithClock(offsetClock(lease+adapt.DefaultClockSkew+time.Second)))

	added, resume := make(chan struct{}), make(chan struct{})
	zerr := make(chan error, 1)
	go func() {
		_, err := guard.DoTx(e.ctx, zombie, "charge", c, func(ctx context.Context, w *idemddb.TxWrites) (int, error) {
			if err := e.charge(w, c, "zombie"); err != nil {
				return 0, err
			}
			close(added)
			<-resume // the pause
			return 1, nil
		}, guard.WithLease(lease))
		zerr <- err
	}()
	select {
	case <-added:
	case err := <-zerr:
		t.Fatalf("the zombie's call ended before its writes: %v", err)
	}
	v, err := guard.DoTx(e.ctx, taker, "charge", c, func(ctx context.Context, w *idemddb.TxWrites) (int, error) {
		return 2, e.charge(w, c, "taker")
	}, guard.WithLease(lease))
	if err != nil || v != 2 {
		t.Fatalf("the taker's call = %d, %v; want it to take the lapsed claim over and run", v, err)
	}
	close(resume)
	err = <-zerr
	if !errors.Is(err, guard.ErrLeaseLost) {
		t.Fatalf("the zombie's call = %v, want ErrLeaseLost", err)
	}
	var ce *idemddb.TxCanceledError
	if !errors.As(err, &ce) || len(ce.Records) != 1 || !errors.Is(err, store.ErrTokenMismatch) {
		t.Errorf("the zombie's error = %v; want it to carry the cancelled transaction, its completion named", err)
	}
	if w := e.item(t, "charge#c-zombie"); w == nil || w["writer"].(*types.AttributeValueMemberS).Value != "taker" || e.number(t, "acct#a-zombie", "charges") != 1 {
		t.Errorf("charge %v, account %v; want the taker's charge only", w, e.item(t, "acct#a-zombie"))
	}
	if rec := e.record(t, "charge", c); rec == nil || rec.Status != store.StatusCompleted || string(rec.Result) != "2" {
		t.Errorf("record = %+v, want the taker's completion", rec)
	}
}

// Acceptance: a condition of the function's that fails cancels the
// transaction. The caller gets a typed error naming the action, with the
// item's old values as asked; nothing is written and the key is released,
// so the call runs again once the condition holds.
func TestDoTxUserConditionFails(t *testing.T) {
	e := newTxEnv(t)
	g := e.guard(t, nil)
	e.putAccount(t, "a-poor", 100)
	c := charge{ID: "c-big", Account: "a-poor", Cents: 250}
	var runs atomic.Int32
	fn := func(ctx context.Context, w *idemddb.TxWrites) (string, error) {
		runs.Add(1)
		if err := w.Put(e.biz, map[string]types.AttributeValue{"pk": s("charge#" + c.ID), "cents": num(c.Cents)}); err != nil {
			return "", err
		}
		return "ok", w.Update(e.biz, pk("acct#"+c.Account),
			expression.Add(expression.Name("balance"), expression.Value(-c.Cents)),
			idemddb.If(expression.Name("balance").GreaterThanEqual(expression.Value(c.Cents))),
			idemddb.ReturnOldOnFailure())
	}
	_, err := guard.DoTx(e.ctx, g, "charge", c, fn)
	var ce *idemddb.TxCanceledError
	if !errors.As(err, &ce) {
		t.Fatalf("DoTx whose condition fails = %v, want a *TxCanceledError", err)
	}
	failed := ce.ConditionFailed()
	if len(failed) != 1 || failed[0].Index != 1 || failed[0].Kind != "Update" || failed[0].Table != e.biz || failed[0].Key["pk"].(*types.AttributeValueMemberS).Value != "acct#a-poor" {
		t.Fatalf("failed conditions = %+v; want action 1, the Update of acct#a-poor", failed)
	}
	if bal, ok := failed[0].Old["balance"].(*types.AttributeValueMemberN); !ok || bal.Value != "100" {
		t.Errorf("old item = %v; want the account as it was, balance 100", failed[0].Old)
	}
	if errors.Is(err, guard.ErrLeaseLost) || errors.Is(err, store.ErrThrottled) || errors.Is(err, store.ErrTokenMismatch) {
		t.Errorf("error %v matches ErrLeaseLost, ErrThrottled or ErrTokenMismatch; a failed condition of the function's is none of them", err)
	}
	for _, want := range []string{"none of its writes happened", "action 1 (Update", "ConditionalCheckFailed"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if e.item(t, "charge#c-big") != nil || e.number(t, "acct#a-poor", "balance") != 100 {
		t.Errorf("the cancelled call wrote: charge %v, account %v", e.item(t, "charge#c-big"), e.item(t, "acct#a-poor"))
	}
	if rec := e.record(t, "charge", c); rec != nil {
		t.Errorf("the cancelled call left its record %+v; want the key released", rec)
	}
	e.putAccount(t, "a-poor", 1000)
	if v, err := guard.DoTx(e.ctx, g, "charge", c, fn); err != nil || v != "ok" || runs.Load() != 2 {
		t.Fatalf("retry once the balance suffices = %q, %v after %d runs", v, err, runs.Load())
	}
	if e.number(t, "acct#a-poor", "balance") != 750 || e.item(t, "charge#c-big") == nil {
		t.Errorf("after the retry: account %v; want 750 and the charge", e.item(t, "acct#a-poor"))
	}
}

// Acceptance: each limit is refused before anything is sent; the call
// fails with a *TxLimitError, the key is released and nothing is
// written, whether or not the function returned the error. The write
// that breaks a limit is refused as it is added, but for a write of the
// call's own record: the store learns the record's key when the guard
// completes it, and refuses the completion.
func TestDoTxLimitsRefusedBeforeSending(t *testing.T) {
	big := strings.Repeat("x", 300<<10)
	for _, c := range []struct {
		name   string
		limit  idemddb.TxLimit
		ignore bool // the function ignores the error and returns success
		write  func(e *txEnv, w *idemddb.TxWrites, key string) error
	}{
		{"100 actions", idemddb.TxTooManyActions, false, func(e *txEnv, w *idemddb.TxWrites, _ string) error {
			for i := range idemddb.MaxTxActions {
				if err := w.Put(e.biz, map[string]types.AttributeValue{"pk": s(fmt.Sprint("many-", i))}); err != nil {
					return err
				}
			}
			return nil
		}},
		{"item over 400 KB", idemddb.TxItemTooLarge, true, func(e *txEnv, w *idemddb.TxWrites, _ string) error {
			return w.Put(e.biz, map[string]types.AttributeValue{"pk": s("huge"), "v": s(big + big)})
		}},
		{"over 4 MB", idemddb.TxTooLarge, false, func(e *txEnv, w *idemddb.TxWrites, _ string) error {
			for i := range 14 {
				if err := w.Put(e.biz, map[string]types.AttributeValue{"pk": s(fmt.Sprint("big-", i)), "v": s(big)}); err != nil {
					return err
				}
			}
			return nil
		}},
		{"one item twice", idemddb.TxSameItem, true, func(e *txEnv, w *idemddb.TxWrites, _ string) error {
			_ = w.Put(e.biz, map[string]types.AttributeValue{"pk": s("twice"), "n": num(1)})
			return w.Update(e.biz, pk("twice"), expression.Set(expression.Name("n"), expression.Value(2)))
		}},
		{"the record's own item", idemddb.TxRecordItem, false, func(e *txEnv, w *idemddb.TxWrites, key string) error {
			return w.Update(e.table, id(key), expression.Set(expression.Name("note"), expression.Value("mine")))
		}},
		{"no table", idemddb.TxInvalidAction, false, func(e *txEnv, w *idemddb.TxWrites, _ string) error {
			return w.Delete("", pk("x"))
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newTxEnv(t)
			g := e.guard(t, nil)
			in := charge{ID: "limit-" + c.name}
			var fnErr error
			_, err := guard.DoTx(e.ctx, g, "charge", in, func(ctx context.Context, w *idemddb.TxWrites) (int, error) {
				key, _ := guard.KeyFromContext(ctx)
				fnErr = c.write(e, w, key)
				if c.ignore {
					return 1, nil
				}
				return 1, fnErr
			})
			var le *idemddb.TxLimitError
			if c.limit != idemddb.TxRecordItem && (!errors.As(fnErr, &le) || le.Limit != c.limit) {
				t.Fatalf("the refused write returned %v; want a *TxLimitError of %v", fnErr, c.limit)
			}
			if !errors.As(err, &le) || le.Limit != c.limit || le.Err != nil {
				t.Fatalf("DoTx = %v; want the *TxLimitError of %v, found before sending", err, c.limit)
			}
			if got := e.n.Snapshot(); got["TransactWriteItems"] != 0 {
				t.Errorf("sent %s; want no transaction", e.n)
			}
			if rec := e.record(t, "charge", in); rec != nil {
				t.Errorf("record %+v left; want the key released", rec)
			}
			t.Logf("%v", err)
		})
	}
}

// A commit whose answer is lost: the guard reads the record. Committed:
// the call succeeds and a retry replays. Not committed: the claim is
// released, the call fails, and the retry's writes exist once.
func TestDoTxLostCommitAnswer(t *testing.T) {
	for _, committed := range []bool{true, false} {
		t.Run(fmt.Sprintf("committed=%v", committed), func(t *testing.T) {
			e := newTxEnv(t)
			h := &hookStore{Store: e.s}
			h.commit = func(ctx context.Context, tx store.Tx[*idemddb.TxWrites]) error {
				h.commit = nil // the retry commits normally
				if committed {
					if err := tx.Commit(ctx); err != nil {
						t.Errorf("the commit: %v", err)
					}
				} else {
					_ = tx.Rollback(ctx)
				}
				return errAnswerLost
			}
			g := e.guard(t, h)
			c := charge{ID: fmt.Sprintf("c-lost-%v", committed), Account: "a-lost", Cents: 1}
			var runs atomic.Int32
			fn := func(ctx context.Context, w *idemddb.TxWrites) (int, error) {
				runs.Add(1)
				return 9, e.charge(w, c, "w")
			}
			v, err := guard.DoTx(e.ctx, g, "charge", c, fn)
			var se *adapt.StoreError
			switch {
			case committed && (err != nil || v != 9):
				t.Fatalf("DoTx whose commit landed = %d, %v; want 9 (the record says it committed)", v, err)
			case !committed && !errors.As(err, &se):
				t.Fatalf("DoTx whose commit did not land = %v, want a *adapt.StoreError", err)
			}
			if !committed && e.record(t, "charge", c) != nil {
				t.Errorf("the uncommitted call left its claim; want it released")
			}
			if v, err := guard.DoTx(e.ctx, g, "charge", c, fn); err != nil || v != 9 {
				t.Fatalf("retry = %d, %v", v, err)
			}
			wantRuns := map[bool]int32{true: 1, false: 2}[committed]
			if n := e.number(t, "acct#a-lost", "charges"); n != 1 || runs.Load() != wantRuns {
				t.Errorf("%d charges after %d runs; want 1 charge, %d runs", n, runs.Load(), wantRuns)
			}
		})
	}
}

var errAnswerLost = errors.New("connection reset by peer (simulated: the commit's answer was lost)")

// The answer to the TransactWriteItems request itself is lost on the wire
// (the request reached DynamoDB, which applied it): the SDK's retryer
// resends it with the same ClientRequestToken, DynamoDB answers without
// applying it again, and the call succeeds with the writes applied once.
func TestDoTxLostAnswerResentWithSameToken(t *testing.T) {
	e := newTxEnv(t)
	p, ep := newTxProxy(t)
	p.lose.Store(1)
	client := dynamodbtestClient(ep)
	s, err := idemddb.New(client, e.table)
	if err != nil {
		t.Fatal(err)
	}
	g := e.guard(t, s)
	c := charge{ID: "c-resent", Account: "a-resent", Cents: 3}
	v, err := guard.DoTx(e.ctx, g, "charge", c, func(ctx context.Context, w *idemddb.TxWrites) (int, error) {
		return 3, e.charge(w, c, "w")
	})
	if err != nil || v != 3 {
		t.Fatalf("DoTx through a lost answer = %d, %v", v, err)
	}
	tokens := p.tokens()
	if len(tokens) != 2 || tokens[0] != tokens[1] || tokens[0] == "" {
		t.Errorf("TransactWriteItems sent with tokens %q; want twice with the same one", tokens)
	}
	if n := e.number(t, "acct#a-resent", "charges"); n != 1 {
		t.Errorf("%d charges; want the transaction applied once", n)
	}
}

// An unguarded call (an empty key selection, with the key not required)
// still sends the function's writes as one transaction, without a record.
func TestDoTxUnguarded(t *testing.T) {
	e := newTxEnv(t)
	g := e.guard(t, nil)
	c := charge{ID: "c-unguarded", Account: "a-unguarded", Cents: 2}
	v, err := guard.DoTx(e.ctx, g, "charge", map[string]any{"note": "x"}, func(ctx context.Context, w *idemddb.TxWrites) (int, error) {
		return 5, e.charge(w, c, "w")
	}, guard.WithKeyPath("id"), guard.WithRequireKey(false))
	if err != nil || v != 5 {
		t.Fatalf("DoTx = %d, %v", v, err)
	}
	if got := e.n.String(); got != "1 round trip: TransactWriteItems=1" {
		t.Errorf("unguarded call sent %s; want the transaction alone", got)
	}
	if e.number(t, "acct#a-unguarded", "charges") != 1 {
		t.Errorf("the unguarded call's writes are missing")
	}
}

func TestWrapTx(t *testing.T) {
	e := newTxEnv(t)
	g := e.guard(t, nil)
	var runs atomic.Int32
	pay, err := guard.WrapTx(g, "charge", func(ctx context.Context, w *idemddb.TxWrites, c charge) (string, error) {
		runs.Add(1)
		return "r-" + c.ID, e.charge(w, c, "w")
	}, guard.WithKeyPath("id"))
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if v, err := pay(e.ctx, charge{ID: "c-wrap", Account: "a-wrap", Cents: 1}); err != nil || v != "r-c-wrap" {
			t.Fatalf("wrapped call = %q, %v", v, err)
		}
	}
	if runs.Load() != 1 || e.number(t, "acct#a-wrap", "charges") != 1 {
		t.Errorf("3 wrapped calls: %d runs, %d charges; want 1 and 1", runs.Load(), e.number(t, "acct#a-wrap", "charges"))
	}
}

// hookStore is the store with a hook replacing its transactions' Commit.
type hookStore struct {
	*idemddb.Store
	commit func(ctx context.Context, tx store.Tx[*idemddb.TxWrites]) error
}

func (h *hookStore) Begin(ctx context.Context) (store.Tx[*idemddb.TxWrites], error) {
	tx, err := h.Store.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &hookTx{Tx: tx, h: h}, nil
}

type hookTx struct {
	store.Tx[*idemddb.TxWrites]
	h *hookStore
}

func (t *hookTx) Commit(ctx context.Context) error {
	if t.h.commit != nil {
		return t.h.commit(ctx, t.Tx)
	}
	return t.Tx.Commit(ctx)
}

// A step inside a transactional call (guard.Step) completes inside the
// call's transaction: its record commits with the call's writes and its
// own, in the one TransactWriteItems, and is released if they do not.
func TestDoTxStepCompletesInTransaction(t *testing.T) {
	e := newTxEnv(t)
	g := e.guard(t, nil)
	e.putAccount(t, "a-step", 0)
	c := charge{ID: "c-step", Account: "a-step", Cents: 30}
	var stepRuns, runs atomic.Int32
	fn := func(ctx context.Context, w *idemddb.TxWrites) (string, error) {
		runs.Add(1)
		r, err := guard.Step(ctx, "reserve", func(ctx context.Context) (string, error) {
			stepRuns.Add(1)
			return "reserved", w.Put(e.biz, map[string]types.AttributeValue{"pk": s("reservation#" + c.ID)})
		})
		if err != nil {
			return "", err
		}
		return r + "+charged", w.Update(e.biz, pk("acct#"+c.Account),
			expression.Add(expression.Name("balance"), expression.Value(-c.Cents)).Add(expression.Name("charges"), expression.Value(1)),
			idemddb.If(expression.Name("balance").GreaterThanEqual(expression.Value(c.Cents))))
	}
	// The balance does not suffice: the transaction is cancelled, the
	// step's reservation with it.
	_, err := guard.DoTx(e.ctx, g, "order", c, fn)
	var ce *idemddb.TxCanceledError
	if !errors.As(err, &ce) {
		t.Fatalf("DoTx whose condition fails = %v, want a *TxCanceledError", err)
	}
	if sent := e.n.Snapshot(); sent["UpdateItem"] != 0 || sent["TransactWriteItems"] != 1 {
		t.Errorf("the cancelled call sent %s; want the step completed in the call's one TransactWriteItems, no UpdateItem", e.n)
	}
	if e.item(t, "reservation#"+c.ID) != nil {
		t.Errorf("the cancelled transaction's step write was applied")
	}
	e.putAccount(t, "a-step", 100)
	e.n.Reset()
	v, err := guard.DoTx(e.ctx, g, "order", c, fn)
	if err != nil || v != "reserved+charged" {
		t.Fatalf("retry = %q, %v", v, err)
	}
	if stepRuns.Load() != 2 || runs.Load() != 2 {
		t.Errorf("%d step runs, %d runs; the step's record must have been released with the cancelled transaction, so the retry runs it again", stepRuns.Load(), runs.Load())
	}
	if got := e.n.Snapshot(); got["TransactWriteItems"] != 1 || got["UpdateItem"] != 0 {
		t.Errorf("the retry sent %s; want the claims and one TransactWriteItems holding the step's completion", e.n)
	}
	if e.item(t, "reservation#"+c.ID) == nil || e.number(t, "acct#a-step", "charges") != 1 {
		t.Errorf("after the retry: reservation %v, account %v", e.item(t, "reservation#"+c.ID), e.item(t, "acct#a-step"))
	}
}
