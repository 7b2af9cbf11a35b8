package dynamodb_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/internal/testing/dynamodbtest"
	"github.com/idemguard/idemguard/store"
	idemddb "github.com/idemguard/idemguard/store/dynamodb"
)

// The child process of TestDoTxKilledBeforeCommit: it runs one DoTx whose
// writes are added, announces "READY" on stdout at the point named by
// IDEMGUARD_TX_KILL_AT and blocks there until it is killed. Run alone,
// without the parent's environment, it does nothing.
func TestDoTxKilledChild(t *testing.T) {
	at := os.Getenv("IDEMGUARD_TX_KILL_AT")
	if at == "" {
		return
	}
	ready := func() {
		fmt.Println("READY")
		select {} // until SIGKILL
	}
	base, err := idemddb.New(dynamodbtest.NewClient(t), os.Getenv("IDEMGUARD_TX_TABLE"))
	if err != nil {
		t.Fatal(err)
	}
	var s store.Store = base
	if at == "commit" {
		s = &completeHook{Store: base, after: ready}
	}
	g, err := guard.New(s)
	if err != nil {
		t.Fatal(err)
	}
	e := &txEnv{biz: os.Getenv("IDEMGUARD_TX_BIZ")}
	c := charge{ID: os.Getenv("IDEMGUARD_TX_CHARGE"), Account: "a-killed", Cents: 10}
	_, err = guard.DoTx(context.Background(), g, "charge", c, func(ctx context.Context, w *idemddb.TxWrites) (int, error) {
		if err := e.charge(w, c, "child"); err != nil {
			return 0, err
		}
		if at == "function" {
			ready()
		}
		return 1, nil
	}, guard.WithLease(time.Minute))
	t.Fatalf("DoTx returned (%v) instead of blocking until killed", err)
}

// completeHook is the store whose transactions call after once the
// completion is added, before the commit.
type completeHook struct {
	*idemddb.Store
	after func()
}

func (h *completeHook) Begin(ctx context.Context) (store.Tx[*idemddb.TxWrites], error) {
	tx, err := h.Store.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &completeHookTx{Tx: tx, after: h.after}, nil
}

type completeHookTx struct {
	store.Tx[*idemddb.TxWrites]
	after func()
}

func (t *completeHookTx) Complete(ctx context.Context, rec *store.Record) error {
	err := t.Tx.Complete(ctx, rec)
	if err == nil {
		t.after()
	}
	return err
}

// Acceptance: a process killed (SIGKILL) after its function added its
// writes and before the commit — inside the function, or with the
// completion added too — has sent nothing of them; the retry, once the
// dead process's lease has lapsed, runs the function and commits once.
func TestDoTxKilledBeforeCommit(t *testing.T) {
	for _, at := range []string{"function", "commit"} {
		t.Run(at, func(t *testing.T) {
			e := newTxEnv(t)
			c := charge{ID: "c-killed-" + at, Account: "a-killed", Cents: 10}
			cmd := exec.Command(os.Args[0], "-test.run=^TestDoTxKilledChild$", "-test.count=1")
			cmd.Env = append(os.Environ(), "IDEMGUARD_TX_KILL_AT="+at, "IDEMGUARD_TX_TABLE="+e.table,
				"IDEMGUARD_TX_BIZ="+e.biz, "IDEMGUARD_TX_CHARGE="+c.ID)
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
						t.Fatal("the child exited before adding its writes")
					}
					if l == "READY" {
						break wait
					}
					t.Logf("child: %s", l)
				case <-deadline:
					t.Fatal("the child did not add its writes within a minute")
				}
			}
			held := e.record(t, "charge", c)
			if held == nil || held.Status != store.StatusInProgress {
				t.Fatalf("before the kill the record is %+v, want the child's claim in progress", held)
			}
			if e.item(t, "charge#"+c.ID) != nil {
				t.Fatal("the child's writes are visible before its commit")
			}
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_ = cmd.Wait()
			if e.item(t, "charge#"+c.ID) != nil || e.item(t, "acct#a-killed") != nil {
				t.Fatal("the killed child's writes were applied")
			}

			// A retry one lease and the skew later, on its clock.
			var runs atomic.Int32
			retry := e.guard(t, nil, adapt.WithClock(offsetClock(time.Minute+adapt.DefaultClockSkew+time.Second)))
			fn := func(ctx context.Context, w *idemddb.TxWrites) (int, error) {
				runs.Add(1)
				return 2, e.charge(w, c, "retry")
			}
			for range 2 {
				if v, err := guard.DoTx(e.ctx, retry, "charge", c, fn); err != nil || v != 2 {
					t.Fatalf("retry after the kill = %d, %v", v, err)
				}
			}
			it := e.item(t, "charge#"+c.ID)
			if it == nil || it["writer"].(*types.AttributeValueMemberS).Value != "retry" || e.number(t, "acct#a-killed", "charges") != 1 || runs.Load() != 1 {
				t.Errorf("after the kill and two retries: charge %v, account %v, %d runs; want the retry's charge once, 1 run",
					it, e.item(t, "acct#a-killed"), runs.Load())
			}
		})
	}
}
