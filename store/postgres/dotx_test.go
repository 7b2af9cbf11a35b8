package postgres_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/postgres"
)

// The transactional guard end to end on the real server: guard.DoTx
// over guard.DoTx over Store.Begin.

// effects is a business table without a unique constraint: a write to it
// is not idempotent by itself, so its row count says how many times a
// guarded function's writes committed.
type effects struct {
	*fixture
	table string
}

func newEffects(t *testing.T, adjust func(*pgxpool.Config)) *effects {
	t.Helper()
	e := &effects{fixture: newFixtureWith(t, adjust)}
	e.table = e.fixture.table + "_effects"
	e.exec(t, `CREATE TABLE "`+e.table+`" (transfer text NOT NULL, writer text NOT NULL)`)
	t.Cleanup(func() { _, _ = e.pool.Exec(context.Background(), `DROP TABLE IF EXISTS "`+e.table+`"`) })
	e.n.Reset()
	return e
}

// write is the guarded function's business write.
func (e *effects) write(ctx context.Context, tx pgx.Tx, transfer, writer string) error {
	_, err := tx.Exec(ctx, `INSERT INTO "`+e.table+`" (transfer, writer) VALUES ($1, $2)`, transfer, writer)
	return err
}

// count returns the committed rows of transfer, by writer.
func (e *effects) count(t *testing.T, transfer string) map[string]int {
	t.Helper()
	rows, err := e.pool.Query(e.ctx, `SELECT writer, count(*) FROM "`+e.table+`" WHERE transfer = $1 GROUP BY writer`, transfer)
	if err != nil {
		t.Fatal(err)
	}
	m, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (kv struct {
		w string
		n int
	}, err error) {
		err = r.Scan(&kv.w, &kv.n)
		return kv, err
	})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, kv := range m {
		out[kv.w] = kv.n
	}
	return out
}

func (e *effects) total(t *testing.T, transfer string) int {
	t.Helper()
	n := 0
	for _, c := range e.count(t, transfer) {
		n += c
	}
	return n
}

func (e *effects) guard(t *testing.T, s store.Store, opts ...guard.Option) *guard.Guard {
	t.Helper()
	if s == nil {
		s = e.s
	}
	g, err := guard.New(s, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// record returns the record of the key the guard derives for input in
// scope, or nil.
func (e *effects) record(t *testing.T, scope string, input any, opts ...guard.CallOption) *store.Record {
	t.Helper()
	key, _, err := e.guard(t, nil).Key(scope, input, opts...)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := e.s.Get(e.ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// offsetClock is the system clock moved by a fixed offset: a guard on it
// sees another guard's lease lapse that much sooner.
type offsetClock time.Duration

func (c offsetClock) Now() time.Time { return time.Now().Add(time.Duration(c)) }
func (offsetClock) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}

type transfer struct {
	ID     string `json:"id"`
	Amount int    `json:"amount"`
}

// The function's write and the completion commit together; a replay never
// begins a transaction and returns the stored result. The round trips of
// the transactional path, counted by the tracer: the claim's statement, BEGIN,
// the function's statement, the completion's UPDATE and COMMIT.
func TestDoTxCommitsTogether(t *testing.T) {
	e := newEffects(t, nil)
	g := e.guard(t, nil)
	in := transfer{ID: "t-1", Amount: 100}
	var runs atomic.Int32
	fn := func(ctx context.Context, tx pgx.Tx) (string, error) {
		runs.Add(1)
		return "receipt-1", e.write(ctx, tx, in.ID, "first")
	}
	e.n.Reset()
	v, err := guard.DoTx(e.ctx, g, "move", in, fn)
	if err != nil || v != "receipt-1" {
		t.Fatalf("DoTx = %q, %v", v, err)
	}
	want := map[string]int{"WITH": 1, "BEGIN": 1, "INSERT": 1, "UPDATE": 1, "COMMIT": 1}
	if got := e.n.Snapshot(); !sameCounts(got, want) {
		t.Errorf("first call sent %s; want WITH=1 BEGIN=1 INSERT=1 UPDATE=1 COMMIT=1 (5 round trips: 4 + the function's one)", e.n)
	}
	t.Logf("transactional first call: %s", e.n)
	if got := e.total(t, in.ID); got != 1 {
		t.Errorf("%d committed business rows, want 1", got)
	}
	rec := e.record(t, "move", in)
	if rec == nil || rec.Status != store.StatusCompleted || string(rec.Result) != `"receipt-1"` {
		t.Fatalf("record = %+v, want COMPLETED with the receipt", rec)
	}
	checkIdle(t, e.pool)

	e.n.Reset()
	v, err = guard.DoTx(e.ctx, g, "move", in, fn)
	if err != nil || v != "receipt-1" || runs.Load() != 1 {
		t.Fatalf("replay = %q, %v after %d runs; want the stored receipt, 1 run", v, err, runs.Load())
	}
	if got := e.n.Snapshot(); e.n.Total() != 1 || got["WITH"] != 1 || got["BEGIN"] != 0 {
		t.Errorf("replay sent %s; want the claim's WITH only, no BEGIN", e.n)
	}

	cached := e.guard(t, nil, guard.WithCache(16, 0))
	_, _ = guard.DoTx(e.ctx, cached, "move", in, fn)
	e.n.Reset()
	if v, err = guard.DoTx(e.ctx, cached, "move", in, fn); err != nil || v != "receipt-1" || e.n.Total() != 0 {
		t.Errorf("cached replay = %q, %v, sent %s; want the receipt and no round trip", v, err, e.n)
	}
	if runs.Load() != 1 || e.total(t, in.ID) != 1 {
		t.Errorf("after the replays: %d runs, %d rows; want 1 and 1", runs.Load(), e.total(t, in.ID))
	}
}

func sameCounts(got, want map[string]int) bool {
	if len(got) != len(want) {
		return false
	}
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}

// checkIdle fails if a call kept a pool connection.
func checkIdle(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	if n := pool.Stat().AcquiredConns(); n != 0 {
		t.Errorf("%d pool connections still acquired after the call", n)
	}
}

// Below the tracer: with every statement prepared on the connection, a
// transactional first call is 5 network exchanges (the claim's pipeline,
// BEGIN, the function's INSERT, the UPDATE, COMMIT) and a replay 1.
func TestDoTxNetworkRoundTrips(t *testing.T) {
	var w *wire
	e := newEffects(t, func(c *pgxpool.Config) {
		c.MaxConns = 2 // the transaction's, and the lease keeper's
		w = countWire(c)
	})
	g := e.guard(t, nil)
	call := func(id string) {
		t.Helper()
		in := transfer{ID: id}
		if _, err := guard.DoTx(e.ctx, g, "move", in, func(ctx context.Context, tx pgx.Tx) (int, error) {
			return 1, e.write(ctx, tx, id, "w")
		}); err != nil {
			t.Fatalf("DoTx: %v", err)
		}
	}
	// Warm both connections' statement caches.
	for _, id := range []string{"warm-1", "warm-2", "warm-3", "warm-4"} {
		call(id)
	}
	w.reset()
	call("t-2")
	if got := w.count(); got != 5 {
		t.Errorf("a transactional first call took %d network exchanges, want 5", got)
	}
	w.reset()
	call("t-2")
	if got := w.count(); got != 1 {
		t.Errorf("a replay took %d network exchanges, want 1", got)
	}
}

// A function that fails has its writes rolled back and the key released:
// the retry runs it again, at once. A definite error is recorded and
// replayed, and its writes are rolled back all the same.
func TestDoTxFailureRollsBack(t *testing.T) {
	e := newEffects(t, nil)
	errDeclined := errors.New("card declined")
	g := e.guard(t, nil)
	in := transfer{ID: "t-fail"}
	var runs atomic.Int32
	fail := true
	fn := func(ctx context.Context, tx pgx.Tx) (int, error) {
		runs.Add(1)
		if err := e.write(ctx, tx, in.ID, "w"); err != nil {
			return 0, err
		}
		if fail {
			return 0, errors.New("downstream unavailable")
		}
		return 7, nil
	}
	if _, err := guard.DoTx(e.ctx, g, "move", in, fn); err == nil || err.Error() != "downstream unavailable" {
		t.Fatalf("failing DoTx = %v, want the function's error", err)
	}
	if n := e.total(t, in.ID); n != 0 {
		t.Errorf("the failed call committed %d business rows", n)
	}
	if rec := e.record(t, "move", in); rec != nil {
		t.Errorf("the failed call left a record: %+v", rec)
	}
	fail = false
	if v, err := guard.DoTx(e.ctx, g, "move", in, fn); err != nil || v != 7 || runs.Load() != 2 {
		t.Fatalf("retry = %d, %v after %d runs; want 7 from a second run", v, err, runs.Load())
	}
	if n := e.total(t, in.ID); n != 1 {
		t.Errorf("after the retry: %d business rows, want 1", n)
	}
	checkIdle(t, e.pool)

	def := transfer{ID: "t-declined"}
	var defRuns atomic.Int32
	declined := func(ctx context.Context, tx pgx.Tx) (int, error) {
		defRuns.Add(1)
		if err := e.write(ctx, tx, def.ID, "w"); err != nil {
			return 0, err
		}
		return 0, errDeclined
	}
	isDef := guard.WithDefiniteErrors(func(err error) bool { return errors.Is(err, errDeclined) })
	if _, err := guard.DoTx(e.ctx, g, "move", def, declined, isDef); !errors.Is(err, errDeclined) {
		t.Fatalf("DoTx with a definite error = %v", err)
	}
	if n := e.total(t, def.ID); n != 0 {
		t.Errorf("the definite error's call committed %d business rows, want 0", n)
	}
	rec := e.record(t, "move", def)
	if rec == nil || rec.Status != store.StatusCompleted || rec.ResultKind != store.ResultError {
		t.Fatalf("record of the definite error = %+v, want COMPLETED with an error", rec)
	}
	_, err := guard.DoTx(e.ctx, g, "move", def, declined, isDef)
	var re *adapt.ReplayedError
	if !errors.As(err, &re) || re.Message != errDeclined.Error() || defRuns.Load() != 1 {
		t.Errorf("replay of the definite error = %v after %d runs; want the recorded error, no run", err, defRuns.Load())
	}
	checkIdle(t, e.pool)
}

// A panic rolls back and releases, and goes on in the caller.
func TestDoTxPanicRollsBack(t *testing.T) {
	e := newEffects(t, nil)
	g := e.guard(t, nil)
	in := transfer{ID: "t-panic"}
	func() {
		defer func() {
			if r := recover(); r != "kaboom" {
				t.Errorf("recovered %v, want the function's panic", r)
			}
		}()
		_, _ = guard.DoTx(e.ctx, g, "move", in, func(ctx context.Context, tx pgx.Tx) (int, error) {
			if err := e.write(ctx, tx, in.ID, "w"); err != nil {
				t.Error(err)
			}
			panic("kaboom")
		})
	}()
	if n := e.total(t, in.ID); n != 0 {
		t.Errorf("the panicking call committed %d rows", n)
	}
	if rec := e.record(t, "move", in); rec != nil {
		t.Errorf("the panicking call left a record: %+v", rec)
	}
	checkIdle(t, e.pool)
}

// The function cannot end the guard's transaction: Commit and Rollback
// return ErrTxOwned and change nothing; a COMMIT sent as SQL makes the
// completion fail instead of committing apart from the writes.
func TestDoTxFunctionCannotEndTransaction(t *testing.T) {
	e := newEffects(t, nil)
	g := e.guard(t, nil)
	in := transfer{ID: "t-owned"}
	v, err := guard.DoTx(e.ctx, g, "move", in, func(ctx context.Context, tx pgx.Tx) (int, error) {
		if err := e.write(ctx, tx, in.ID, "w"); err != nil {
			return 0, err
		}
		if err := tx.Commit(ctx); !errors.Is(err, postgres.ErrTxOwned) {
			t.Errorf("the function's Commit = %v, want ErrTxOwned", err)
		}
		if err := tx.Rollback(ctx); !errors.Is(err, postgres.ErrTxOwned) {
			t.Errorf("the function's Rollback = %v, want ErrTxOwned", err)
		}
		// A savepoint is the function's own to end.
		sp, err := tx.Begin(ctx)
		if err != nil {
			return 0, err
		}
		if err := e.write(ctx, sp, in.ID, "undone"); err != nil {
			return 0, err
		}
		return 3, sp.Rollback(ctx)
	})
	if err != nil || v != 3 {
		t.Fatalf("DoTx = %d, %v", v, err)
	}
	if got := e.count(t, in.ID); got["w"] != 1 || got["undone"] != 0 {
		t.Errorf("committed rows by writer %v; want w=1 and the savepoint's row rolled back", got)
	}

	raw := transfer{ID: "t-raw-commit"}
	_, err = guard.DoTx(e.ctx, g, "move", raw, func(ctx context.Context, tx pgx.Tx) (int, error) {
		_, err := tx.Exec(ctx, "COMMIT")
		return 1, err
	})
	var se *adapt.StoreError
	if !errors.As(err, &se) {
		t.Errorf("DoTx whose function sent COMMIT = %v, want a *adapt.StoreError from the completion", err)
	}
	if rec := e.record(t, "move", raw); rec != nil && rec.Status == store.StatusCompleted {
		t.Errorf("the completion committed on its own: %+v", rec)
	}
	checkIdle(t, e.pool)
}

// An unguarded call (an empty key selection, with the key not required)
// runs the function in a transaction of its own, with no record.
func TestDoTxUnguardedRunsInTransaction(t *testing.T) {
	e := newEffects(t, nil)
	g := e.guard(t, nil)
	e.n.Reset()
	v, err := guard.DoTx(e.ctx, g, "move", map[string]any{"note": "x"}, func(ctx context.Context, tx pgx.Tx) (int, error) {
		return 5, e.write(ctx, tx, "t-unguarded", "w")
	}, guard.WithKeyPath("id"), guard.WithRequireKey(false))
	if err != nil || v != 5 {
		t.Fatalf("DoTx = %d, %v", v, err)
	}
	if got := e.n.Snapshot(); !sameCounts(got, map[string]int{"BEGIN": 1, "INSERT": 1, "COMMIT": 1}) {
		t.Errorf("unguarded call sent %s; want BEGIN=1 INSERT=1 COMMIT=1", e.n)
	}
	if n := e.total(t, "t-unguarded"); n != 1 {
		t.Errorf("%d rows, want 1", n)
	}
}

func TestWrapTx(t *testing.T) {
	e := newEffects(t, nil)
	g := e.guard(t, nil)
	var runs atomic.Int32
	move, err := guard.WrapTx(g, "move", func(ctx context.Context, tx pgx.Tx, in transfer) (string, error) {
		runs.Add(1)
		return "r-" + in.ID, e.write(ctx, tx, in.ID, "w")
	}, guard.WithKeyPath("id"))
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if v, err := move(e.ctx, transfer{ID: "t-wrap", Amount: 1}); err != nil || v != "r-t-wrap" {
			t.Fatalf("wrapped call = %q, %v", v, err)
		}
	}
	if runs.Load() != 1 || e.total(t, "t-wrap") != 1 {
		t.Errorf("3 wrapped calls: %d runs, %d rows; want 1 and 1", runs.Load(), e.total(t, "t-wrap"))
	}
	if _, err := guard.WrapTx(g, "", func(context.Context, pgx.Tx, transfer) (int, error) { return 0, nil }); !errors.Is(err, guard.ErrInvalidOption) {
		t.Errorf("WrapTx with an empty scope = %v, want ErrInvalidOption", err)
	}
	if _, err := guard.WrapTx(g, "move", func(context.Context, pgx.Tx, transfer) (int, error) { return 0, nil }, guard.WithKeyPath("[")); !errors.Is(err, guard.ErrInvalidOption) {
		t.Errorf("WrapTx with a bad key path = %v, want ErrInvalidOption", err)
	}
	mem, err := guard.New(plainStore{e.s})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := guard.WrapTx(mem, "move", func(context.Context, pgx.Tx, transfer) (int, error) { return 0, nil }); !errors.Is(err, guard.ErrInvalidOption) {
		t.Errorf("WrapTx on a store without transactions = %v, want ErrInvalidOption", err)
	}
}

// plainStore hides the store's optional interfaces.
type plainStore struct{ store.Store }
