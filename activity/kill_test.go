package activity_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	tactivity "go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/idemguard/idemguard/activity"
	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/internal/testing/dynamodbtest"
	"github.com/idemguard/idemguard/internal/testing/temporaltest"
	"github.com/idemguard/idemguard/store"
	idemddb "github.com/idemguard/idemguard/store/dynamodb"
)

// The helper worker process: the test binary run again with these
// variables set (see TestMain).
const (
	helperEnv       = "IDEMGUARD_TEST_HELPER"
	helperQueueEnv  = "IDEMGUARD_TEST_TASK_QUEUE"
	helperTableEnv  = "IDEMGUARD_TEST_TABLE"
	helperLedgerEnv = "IDEMGUARD_TEST_LEDGER"
)

// helperMain runs a worker whose guarded Charge activity blocks, heartbeating,
// after it logged its start: it is killed before it does the side effect.
func helperMain() int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "helper worker:", err)
		return 2
	}
	c, err := client.Dial(client.Options{HostPort: os.Getenv(temporaltest.AddressEnv), Logger: temporaltest.Logger()})
	if err != nil {
		return fail(err)
	}
	defer c.Close()
	s, err := idemddb.New(dynamodb.New(dynamodbtest.Options(os.Getenv(dynamodbtest.EndpointEnv))), os.Getenv(helperTableEnv))
	if err != nil {
		return fail(err)
	}
	g, err := guard.New(s)
	if err != nil {
		return fail(err)
	}
	w := worker.New(c, os.Getenv(helperQueueEnv), worker.Options{})
	w.RegisterWorkflow(chargeWorkflow)
	w.RegisterActivityWithOptions(activity.Must(activity.Wrap(g, fileCharge(os.Getenv(helperLedgerEnv), true))), tactivity.RegisterOptions{Name: "Charge"})
	if err := w.Run(worker.InterruptCh()); err != nil {
		return fail(err)
	}
	return 0
}

// fileCharge is a charge whose starts and side effects are appended to a
// ledger file, one write per line with O_APPEND, so that no process loses
// or overwrites another's entries. A blocking charge heartbeats until its
// context ends and never does the side effect.
func fileCharge(path string, block bool) func(context.Context, Order) (Receipt, error) {
	return func(ctx context.Context, o Order) (Receipt, error) {
		key, _ := guard.KeyFromContext(ctx)
		attempt := tactivity.GetInfo(ctx).Attempt
		if err := appendLine(path, fmt.Sprintf("start pid=%d attempt=%d at=%d key=%s", os.Getpid(), attempt, time.Now().UnixMilli(), key)); err != nil {
			return Receipt{}, err
		}
		for block {
			tactivity.RecordHeartbeat(ctx)
			select {
			case <-ctx.Done():
				return Receipt{}, ctx.Err()
			case <-time.After(200 * time.Millisecond):
			}
		}
		if err := appendLine(path, fmt.Sprintf("effect pid=%d attempt=%d order=%s", os.Getpid(), attempt, o.OrderID)); err != nil {
			return Receipt{}, err
		}
		r := newReceipt(ctx, o)
		r.Worker = strconv.Itoa(os.Getpid())
		return r, nil
	}
}

func appendLine(path, line string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	_, err = f.WriteString(line + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// ledgerLine is a parsed ledger line: its kind ("start", "effect") and its
// key=value fields.
type ledgerLine struct {
	kind   string
	fields map[string]string
}

func readLedger(t *testing.T, path string) []ledgerLine {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var lines []ledgerLine
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		parts := strings.Fields(sc.Text())
		l := ledgerLine{kind: parts[0], fields: map[string]string{}}
		for _, p := range parts[1:] {
			k, v, _ := strings.Cut(p, "=")
			l.fields[k] = v
		}
		lines = append(lines, l)
	}
	return lines
}

// Acceptance 3: a worker process is killed (SIGKILL) while its guarded
// activity runs. Another worker takes over once the lease lapses; the side
// effect, which the killed attempt had not yet done, happens once; and the
// killed attempt's claim can never write the record again (fencing).
func TestWorkerKilledMidActivity(t *testing.T) {
	c := temporaltest.Client(t, client.Options{})
	ddb := dynamodbtest.NewClient(t)
	table := dynamodbtest.NewTable(t, ddb)
	s, err := idemddb.New(ddb, table)
	if err != nil {
		t.Fatal(err)
	}
	ledgerPath := filepath.Join(t.TempDir(), "ledger")
	tq := temporaltest.Name(t, "tq")

	// The first worker: another process, which blocks inside the activity.
	helperLog, err := os.Create(filepath.Join(t.TempDir(), "helper.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=worker", helperQueueEnv+"="+tq, helperTableEnv+"="+table, helperLedgerEnv+"="+ledgerPath)
	cmd.Stdout, cmd.Stderr = helperLog, helperLog
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	t.Cleanup(func() {
		if !killed {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	helperPID := strconv.Itoa(cmd.Process.Pid)

	run := temporaltest.Start(t, c, client.StartWorkflowOptions{ID: temporaltest.Name(t, "wf"), TaskQueue: tq}, chargeWorkflow,
		chargeParams{Order: Order{OrderID: "o-kill", Amount: 7}, HeartbeatTimeout: 2 * time.Second, StartToClose: time.Minute})

	var key string
	for deadline := time.Now().Add(time.Minute); key == ""; {
		for _, l := range readLedger(t, ledgerPath) {
			if l.kind == "start" && l.fields["pid"] == helperPID {
				key = l.fields["key"]
			}
		}
		if key == "" {
			if time.Now().After(deadline) {
				b, _ := os.ReadFile(helperLog.Name())
				t.Fatalf("the helper worker never started the activity; its log:\n%s", b)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	killed = true

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	zombie, err := s.Get(ctx, key)
	if err != nil {
		t.Fatalf("reading the killed attempt's record: %v", err)
	}
	if zombie.Status != store.StatusInProgress {
		t.Fatalf("the killed attempt's record is %v, want INPROGRESS", zombie.Status)
	}

	// The second worker: this process, whose activity completes.
	g, err := guard.New(s)
	if err != nil {
		t.Fatal(err)
	}
	temporaltest.Worker(t, c, tq, worker.Options{}, func(r worker.Registry) {
		r.RegisterWorkflow(chargeWorkflow)
		r.RegisterActivityWithOptions(activity.Must(activity.Wrap(g, fileCharge(ledgerPath, false))), tactivity.RegisterOptions{Name: "Charge"})
	})
	var got Receipt
	if err := run.Get(ctx, &got); err != nil {
		t.Fatalf("workflow failed: %v", err)
	}

	self := strconv.Itoa(os.Getpid())
	var effects, takeovers []ledgerLine
	for _, l := range readLedger(t, ledgerPath) {
		switch {
		case l.kind == "effect":
			effects = append(effects, l)
		case l.kind == "start" && l.fields["pid"] == self:
			takeovers = append(takeovers, l)
		}
	}
	if len(effects) != 1 || effects[0].fields["pid"] != self {
		t.Fatalf("side effects %v, want exactly one, by the second worker (pid %s)", effects, self)
	}
	if len(takeovers) != 1 {
		t.Fatalf("the second worker started the body %d times, want 1", len(takeovers))
	}
	if at, _ := strconv.ParseInt(takeovers[0].fields["at"], 10, 64); at < zombie.LeaseExpiresAt.UnixMilli() {
		t.Errorf("the second worker ran the body at %d ms, before the killed attempt's lease lapsed at %d ms",
			at, zombie.LeaseExpiresAt.UnixMilli())
	}
	if got.Worker != self {
		t.Errorf("result made by worker %s, want %s", got.Worker, self)
	}

	done, err := s.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if done.Status != store.StatusCompleted || done.Token == zombie.Token {
		t.Fatalf("final record: status %v, token %s (killed attempt's %s); want COMPLETED under a new token", done.Status, done.Token, zombie.Token)
	}
	var stored Receipt
	if err := (activity.PayloadCodec{}).Unmarshal(done.Result, &stored); err != nil || stored != got {
		t.Errorf("stored result %+v (%v), want the workflow's %+v", stored, err, got)
	}

	// Fencing: every write with the killed attempt's token is refused, and
	// the record stays as the second worker left it.
	forged := &store.Record{Key: key, Status: store.StatusCompleted, Token: zombie.Token, Result: []byte("forged"), ExpiresAt: time.Now().Add(time.Hour)}
	if err := s.Complete(ctx, forged); !errors.Is(err, store.ErrTokenMismatch) {
		t.Errorf("Complete with the killed attempt's token: %v, want ErrTokenMismatch", err)
	}
	if err := s.Extend(ctx, key, zombie.Token, time.Now().Add(time.Hour), time.Now().Add(2*time.Hour)); !errors.Is(err, store.ErrTokenMismatch) {
		t.Errorf("Extend with the killed attempt's token: %v, want ErrTokenMismatch", err)
	}
	if err := s.Release(ctx, key, zombie.Token); !errors.Is(err, store.ErrTokenMismatch) {
		t.Errorf("Release with the killed attempt's token: %v, want ErrTokenMismatch", err)
	}
	zombieClaim := adapt.Claim{Key: key, Token: zombie.Token, LeaseExpiresAt: zombie.LeaseExpiresAt}
	if _, err := adapt.Complete(ctx, g, zombieClaim, store.ResultValue, []byte("forged")); !errors.Is(err, guard.ErrLeaseLost) {
		t.Errorf("guard Complete with the killed attempt's claim: %v, want ErrLeaseLost", err)
	}
	after, err := s.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if after.Token != done.Token || !bytes.Equal(after.Result, done.Result) || after.Status != store.StatusCompleted {
		t.Errorf("the record changed after the killed attempt's writes: %+v", after)
	}
}
