package nexusguard_test

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
	"github.com/nexus-rpc/sdk-go/nexus"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/testing/dynamodbtest"
	"github.com/idemguard/idemguard/internal/testing/temporaltest"
	"github.com/idemguard/idemguard/nexusguard"
	"github.com/idemguard/idemguard/store"
	idemddb "github.com/idemguard/idemguard/store/dynamodb"
)

// The helper worker process: the test binary run again with these
// variables set (see TestMain).
const (
	helperEnv       = "IDEMGUARD_TEST_NEXUS_HELPER" // "wrap" or "interceptor"
	helperQueueEnv  = "IDEMGUARD_TEST_TASK_QUEUE"
	helperTableEnv  = "IDEMGUARD_TEST_TABLE"
	helperLedgerEnv = "IDEMGUARD_TEST_LEDGER"
)

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(helperMain())
	}
	os.Exit(m.Run())
}

// helperMain runs a worker whose guarded charge handler charges (a line in
// the ledger), and which kills itself (SIGKILL) as soon as the guard has
// recorded the result, before the worker answers the start request.
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
	die := nexusguard.WithGuardOptions(guard.WithOutcomeHook(func(_ context.Context, key string, _ *store.Record, out guard.Outcome) {
		if out == guard.OutcomeExecuted {
			appendLine(os.Getenv(helperLedgerEnv), "recorded pid="+strconv.Itoa(os.Getpid())+" key="+key)
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
	}))
	svc, ics := syncService(g, fileCharge(os.Getenv(helperLedgerEnv)), os.Getenv(helperEnv) == "interceptor", die)
	w := worker.New(c, os.Getenv(helperQueueEnv), worker.Options{Interceptors: ics})
	w.RegisterWorkflow(callerWorkflow)
	w.RegisterNexusService(svc)
	if err := w.Run(worker.InterruptCh()); err != nil {
		return fail(err)
	}
	return 0
}

// fileCharge is a charge handler whose side effects are appended to a
// ledger file, one write per line with O_APPEND, so that no process loses
// or overwrites another's lines. Its receipt names its process.
func fileCharge(path string) func(context.Context, Order, nexus.StartOperationOptions) (Receipt, error) {
	return func(ctx context.Context, o Order, opts nexus.StartOperationOptions) (Receipt, error) {
		if err := appendLine(path, fmt.Sprintf("effect pid=%d request=%s order=%s", os.Getpid(), opts.RequestID, o.OrderID)); err != nil {
			return Receipt{}, err
		}
		return Receipt{ChargeID: "ch_" + randomID(), OrderID: o.OrderID, Amount: o.Amount, Worker: strconv.Itoa(os.Getpid())}, nil
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

// readLedger returns the ledger's lines, split into their kind and their
// key=value fields.
func readLedger(t *testing.T, path string) (lines []map[string]string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		parts := strings.Fields(sc.Text())
		l := map[string]string{"kind": parts[0]}
		for _, p := range parts[1:] {
			k, v, _ := strings.Cut(p, "=")
			l[k] = v
		}
		lines = append(lines, l)
	}
	return lines
}

// A worker process charges, the guard records the receipt, and the
// process is killed (SIGKILL) before it answers the start request. The
// caller's Nexus machinery resends the start once the request times out;
// another worker gets it and replays the receipt the killed one recorded:
// the card is charged once, and the caller gets the killed worker's
// receipt.
func TestDevServerWorkerKilledAfterEffect(t *testing.T) {
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			c := temporaltest.Client(t, client.Options{})
			ddb := dynamodbtest.NewClient(t)
			table := dynamodbtest.NewTable(t, ddb)
			s, err := idemddb.New(ddb, table)
			if err != nil {
				t.Fatal(err)
			}
			ledgerPath := filepath.Join(t.TempDir(), "ledger")
			tq := temporaltest.Name(t, "tq")
			ep, _ := newEndpoint(t, c, tq)

			mode := "wrap"
			if p.interceptor {
				mode = "interceptor"
			}
			helperLog, err := os.Create(filepath.Join(t.TempDir(), "helper.log"))
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), helperEnv+"="+mode, helperQueueEnv+"="+tq, helperTableEnv+"="+table, helperLedgerEnv+"="+ledgerPath)
			cmd.Stdout, cmd.Stderr = helperLog, helperLog
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan struct{})
			go func() { cmd.Wait(); close(exited) }()
			t.Cleanup(func() {
				cmd.Process.Kill()
				<-exited
			})
			helperPID := strconv.Itoa(cmd.Process.Pid)

			o := Order{OrderID: "o-" + randomID(), Amount: 9}
			run := temporaltest.Start(t, c, client.StartWorkflowOptions{ID: temporaltest.Name(t, "caller"), TaskQueue: tq}, callerWorkflow, callParams{ep, operation, o})
			select {
			case <-exited:
			case <-time.After(time.Minute):
				b, _ := os.ReadFile(helperLog.Name())
				t.Fatalf("the helper worker never recorded a charge; its log:\n%s", b)
			}

			// The second worker: this process.
			svc, ics := syncService(newGuardOn(t, s), fileCharge(ledgerPath), p.interceptor)
			temporaltest.Worker(t, c, tq, worker.Options{Interceptors: ics}, func(r worker.Registry) {
				r.RegisterWorkflow(callerWorkflow)
				r.RegisterNexusService(svc)
			})
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			var got Receipt
			if err := run.Get(ctx, &got); err != nil {
				t.Fatalf("caller workflow: %v", err)
			}

			var effects, recorded []map[string]string
			for _, l := range readLedger(t, ledgerPath) {
				switch l["kind"] {
				case "effect":
					effects = append(effects, l)
				case "recorded":
					recorded = append(recorded, l)
				}
			}
			if len(effects) != 1 || effects[0]["pid"] != helperPID || len(recorded) != 1 {
				t.Fatalf("effects %v, recorded %v; want one charge, by the killed worker (pid %s), recorded", effects, recorded, helperPID)
			}
			if got.Worker != helperPID || got.OrderID != o.OrderID {
				t.Errorf("the caller got %+v, want the killed worker's receipt (pid %s) replayed", got, helperPID)
			}
		})
	}
}
