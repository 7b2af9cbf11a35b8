package postgres_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/internal/testing/postgrestest"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/postgres"
)

// Crashes, zombies and lost answers in the transactional guard.

// hookStore is the store with hooks around its transactions' steps and
// its Release, to stop or fault a call at a chosen point.
type hookStore struct {
	*postgres.Store
	afterComplete func()                                               // after Tx.Complete succeeded
	commit        func(ctx context.Context, tx store.Tx[pgx.Tx]) error // replaces Tx.Commit
	release       func(ctx context.Context, key, token string) error
}

func (h *hookStore) Begin(ctx context.Context) (store.Tx[pgx.Tx], error) {
	tx, err := h.Store.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &hookTx{Tx: tx, h: h}, nil
}

func (h *hookStore) Release(ctx context.Context, key, token string) error {
	if h.release != nil {
		return h.release(ctx, key, token)
	}
	return h.Store.Release(ctx, key, token)
}

type hookTx struct {
	store.Tx[pgx.Tx]
	h *hookStore
}

func (t *hookTx) Complete(ctx context.Context, rec *store.Record) error {
	err := t.Tx.Complete(ctx, rec)
	if err == nil && t.h.afterComplete != nil {
		t.h.afterComplete()
	}
	return err
}

func (t *hookTx) Commit(ctx context.Context) error {
	if t.h.commit != nil {
		return t.h.commit(ctx, t.Tx)
	}
	return t.Tx.Commit(ctx)
}

// The child process of TestDoTxKilledBeforeCommit: it runs one DoTx whose
// business write is made, announces "READY" on stdout at the point named
// by IDEMGUARD_TX_KILL_AT and blocks there until it is killed. Run alone,
// without the parent's environment, it does nothing.
func TestDoTxKilledChild(t *testing.T) {
	at := os.Getenv("IDEMGUARD_TX_KILL_AT")
	if at == "" {
		return
	}
	pool, err := pgxpool.New(context.Background(), postgrestest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	base, err := postgres.New(pool, postgres.WithTable(os.Getenv("IDEMGUARD_TX_TABLE")))
	if err != nil {
		t.Fatal(err)
	}
	ready := func() {
		fmt.Println("READY")
		select {} // until SIGKILL
	}
	h := &hookStore{Store: base}
	if at == "commit" {
		h.afterComplete = ready
	}
	g, err := guard.New(h)
	if err != nil {
		t.Fatal(err)
	}
	in := transfer{ID: os.Getenv("IDEMGUARD_TX_TRANSFER")}
	_, err = guard.DoTx(context.Background(), g, "move", in, func(ctx context.Context, tx pgx.Tx) (int, error) {
		if _, err := tx.Exec(ctx, `INSERT INTO "`+os.Getenv("IDEMGUARD_TX_EFFECTS")+`" (transfer, writer) VALUES ($1, 'child')`, in.ID); err != nil {
			return 0, err
		}
		if at == "function" {
			ready()
		}
		return 1, nil
	}, guard.WithLease(time.Minute))
	t.Fatalf("DoTx returned (%v) instead of blocking until killed", err)
}

// Acceptance: a process killed (SIGKILL) after its business write and
// before the commit — inside the function, or with the completion written
// too — leaves nothing committed; the retry, once the dead process's lease
// has lapsed, runs the function, and the business write exists once.
func TestDoTxKilledBeforeCommit(t *testing.T) {
	for _, at := range []string{"function", "commit"} {
		t.Run(at, func(t *testing.T) {
			e := newEffects(t, nil)
			in := transfer{ID: "t-killed-" + at}
			cmd := exec.Command(os.Args[0], "-test.run=^TestDoTxKilledChild$", "-test.count=1")
			cmd.Env = append(os.Environ(), "IDEMGUARD_TX_KILL_AT="+at, "IDEMGUARD_TX_TABLE="+e.fixture.table,
				"IDEMGUARD_TX_EFFECTS="+e.table, "IDEMGUARD_TX_TRANSFER="+in.ID)
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
			lines := make(chan string)
			go func() {
				sc := bufio.NewScanner(out)
				for sc.Scan() {
					lines <- sc.Text()
				}
				close(lines)
			}()
			deadline := time.After(time.Minute)
		wait:
			for {
				select {
				case l, ok := <-lines:
					if !ok {
						t.Fatal("the child exited before its business write")
					}
					if l == "READY" {
						break wait
					}
					t.Logf("child: %s", l)
				case <-deadline:
					t.Fatal("the child did not reach its business write within a minute")
				}
			}
			// The child has written and not committed.
			held := e.record(t, "move", in)
			if held == nil || held.Status != store.StatusInProgress {
				t.Fatalf("before the kill the record is %+v, want the child's claim in progress", held)
			}
			if n := e.total(t, in.ID); n != 0 {
				t.Fatalf("the child's uncommitted write is visible: %d rows", n)
			}
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_ = cmd.Wait()

			// A retry one lease and the skew later, on its clock.
			var runs atomic.Int32
			retry := e.guard(t, nil, adapt.WithClock(offsetClock(time.Minute+adapt.DefaultClockSkew+time.Second)))
			fn := func(ctx context.Context, tx pgx.Tx) (int, error) {
				runs.Add(1)
				return 2, e.write(ctx, tx, in.ID, "retry")
			}
			for range 2 {
				if v, err := guard.DoTx(e.ctx, retry, "move", in, fn); err != nil || v != 2 {
					t.Fatalf("retry after the kill = %d, %v", v, err)
				}
			}
			if got := e.count(t, in.ID); got["retry"] != 1 || got["child"] != 0 || runs.Load() != 1 {
				t.Errorf("after the kill and two retries: rows by writer %v, %d runs; want retry=1 only, 1 run", got, runs.Load())
			}
		})
	}
}

// Acceptance: a zombie — a holder paused past its lease and the guard's
// clock skew — has its claim taken over mid-transaction. Its completion
// matches no row, its business write is rolled back with it, and it gets
// ErrLeaseLost; the new holder's write is the one that exists.
func TestDoTxZombieRolledBack(t *testing.T) {
	e := newEffects(t, nil)
	in := transfer{ID: "t-zombie"}
	const lease = time.Minute
	zombie := e.guard(t, nil)
	// The taker's clock is a lease and the skew ahead: the zombie's lease
	// has lapsed for it, as it would after a real pause.
	taker := e.guard(t, nil, adapt.WithClock(offsetClock(lease+adapt.DefaultClockSkew+time.Second)))

	written, resume := make(chan struct{}), make(chan struct{})
	zerr := make(chan error, 1)
	go func() {
		_, err := guard.DoTx(e.ctx, zombie, "move", in, func(ctx context.Context, tx pgx.Tx) (int, error) {
			if err := e.write(ctx, tx, in.ID, "zombie"); err != nil {
				return 0, err
			}
			close(written)
			<-resume // the pause
			return 1, nil
		}, guard.WithLease(lease))
		zerr <- err
	}()
	select {
	case <-written:
	case err := <-zerr:
		t.Fatalf("the zombie's call ended before its write: %v", err)
	}
	v, err := guard.DoTx(e.ctx, taker, "move", in, func(ctx context.Context, tx pgx.Tx) (int, error) {
		return 2, e.write(ctx, tx, in.ID, "taker")
	}, guard.WithLease(lease))
	if err != nil || v != 2 {
		t.Fatalf("the taker's call = %d, %v; want it to take the lapsed claim over and run", v, err)
	}
	close(resume)
	if err := <-zerr; !errors.Is(err, guard.ErrLeaseLost) {
		t.Fatalf("the zombie's call = %v, want ErrLeaseLost", err)
	}
	if got := e.count(t, in.ID); got["taker"] != 1 || got["zombie"] != 0 {
		t.Errorf("rows by writer %v; want the taker's only", got)
	}
	if rec := e.record(t, "move", in); rec == nil || rec.Status != store.StatusCompleted || string(rec.Result) != "2" {
		t.Errorf("record = %+v, want the taker's completion", rec)
	}
	checkIdle(t, e.pool)
}

var errAnswerLost = errors.New("connection reset by peer (simulated: the commit's answer was lost)")

// A commit whose answer is lost: the guard reads the record to learn
// whether it committed. Committed: the call succeeds, and a retry
// replays. Not committed: the claim is released, the call fails, and a
// retry runs the function, whose write then exists once.
func TestDoTxLostCommitAnswer(t *testing.T) {
	for _, committed := range []bool{true, false} {
		t.Run(fmt.Sprintf("committed=%v", committed), func(t *testing.T) {
			e := newEffects(t, nil)
			h := &hookStore{Store: e.s}
			h.commit = func(ctx context.Context, tx store.Tx[pgx.Tx]) error {
				h.commit = nil // the retry commits normally
				end := tx.Rollback
				if committed {
					end = tx.Commit
				}
				if err := end(ctx); err != nil {
					t.Errorf("ending the transaction: %v", err)
				}
				return errAnswerLost
			}
			g := e.guard(t, h)
			in := transfer{ID: fmt.Sprintf("t-lost-%v", committed)}
			var runs atomic.Int32
			fn := func(ctx context.Context, tx pgx.Tx) (int, error) {
				runs.Add(1)
				return 9, e.write(ctx, tx, in.ID, "w")
			}
			v, err := guard.DoTx(e.ctx, g, "move", in, fn)
			var se *adapt.StoreError
			switch {
			case committed && (err != nil || v != 9):
				t.Fatalf("DoTx whose commit landed = %d, %v; want 9 (the record says it committed)", v, err)
			case !committed && !errors.As(err, &se):
				t.Fatalf("DoTx whose commit did not land = %v, want a *adapt.StoreError", err)
			}
			if !committed {
				if rec := e.record(t, "move", in); rec != nil {
					t.Errorf("the uncommitted call left %+v, want the claim released", rec)
				}
			}
			if v, err := guard.DoTx(e.ctx, g, "move", in, fn); err != nil || v != 9 {
				t.Fatalf("retry = %d, %v", v, err)
			}
			wantRuns := map[bool]int32{true: 1, false: 2}[committed]
			if n := e.total(t, in.ID); n != 1 || runs.Load() != wantRuns {
				t.Errorf("%d rows after %d runs; want 1 row, %d runs", n, runs.Load(), wantRuns)
			}
			checkIdle(t, e.pool)
		})
	}
}

// The commit's answer is lost while the commit is still in progress on the
// server (a client timeout during a slow commit, a synchronous standby
// that is late to acknowledge): the guard reads the record before the
// commit is visible, sees its claim still in progress and releases it —
// and the release waits on the row lock the committing transaction holds.
// When the commit lands, the release must not delete the completed
// record, or the retry would run the function a second time. The store's
// Release deletes only a record in progress.
func TestDoTxCommitLandsDuringRelease(t *testing.T) {
	e, _, err, retry := commitLandsDuringRelease(t)
	t.Logf("DoTx after the lost answer: %v", err)
	rec := e.record(t, "move", transfer{ID: "t-commit-during-release"})
	if rec == nil || rec.Status != store.StatusCompleted {
		t.Fatalf("after the commit landed the record is %+v, want COMPLETED: the release deleted it", rec)
	}
	if v, runs, err := retry(); err != nil || v != 4 || runs != 1 {
		t.Fatalf("retry = %d, %v after %d runs; want the stored 4, 1 run", v, err, runs)
	}
	if n := e.total(t, "t-commit-during-release"); n != 1 {
		t.Errorf("%d rows; want 1", n)
	}
	checkIdle(t, e.pool)
}

// commitLandsDuringRelease runs the call of TestDoTxCommitLandsDuringRelease
// and returns its result, and a retry that reports the function's runs.
func commitLandsDuringRelease(t *testing.T) (e *effects, v int, err error, retry func() (int, int32, error)) {
	e = newEffects(t, nil)
	h := &hookStore{Store: e.s}
	var pending store.Tx[pgx.Tx]
	h.commit = func(ctx context.Context, tx store.Tx[pgx.Tx]) error {
		h.commit = nil
		pending = tx // sent, not yet answered
		return errAnswerLost
	}
	var releases atomic.Int32
	h.release = func(ctx context.Context, key, token string) error {
		releases.Add(1)
		if pending == nil {
			return e.s.Release(ctx, key, token)
		}
		done := make(chan error, 1)
		go func() { done <- e.s.Release(ctx, key, token) }()
		waitForLockWait(t, e.fixture, `DELETE FROM "`+e.fixture.table+`"`)
		if err := pending.Commit(ctx); err != nil { // the commit lands
			t.Errorf("the pending commit: %v", err)
		}
		pending = nil
		return <-done
	}
	g := e.guard(t, h)
	in := transfer{ID: "t-commit-during-release"}
	var runs atomic.Int32
	fn := func(ctx context.Context, tx pgx.Tx) (int, error) {
		runs.Add(1)
		return 4, e.write(ctx, tx, in.ID, "w")
	}
	v, err = guard.DoTx(e.ctx, g, "move", in, fn)
	if releases.Load() != 1 {
		t.Fatalf("the guard released %d times (error %v); the test expects its one release after the lost answer", releases.Load(), err)
	}
	return e, v, err, func() (int, int32, error) {
		v, err := guard.DoTx(e.ctx, g, "move", in, fn)
		return v, runs.Load(), err
	}
}

// waitForLockWait waits until a statement holding text (the statement, or
// the part of it, a CTE, that must wait) waits for
// a lock on the server.
func waitForLockWait(t *testing.T, f *fixture, text string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		var n int
		err := f.pool.QueryRow(f.ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND strpos(query, $1) > 0`, text).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("no statement %q waited for a lock within 30s", strings.TrimSpace(text))
}
