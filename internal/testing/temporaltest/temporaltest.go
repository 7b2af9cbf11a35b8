// Package temporaltest connects tests to the Temporal dev server the test
// harness starts: a client from the environment, a worker per test on a
// task queue of its own, and helpers to run workflows and read their
// histories.
//
// Tests that need the server call [Client], which reads the server's
// host:port from IDEMGUARD_TEMPORAL_ADDRESS (namespace "default"). When it
// is unset the test is skipped, or fails if CI=true, so that a CI run
// without the server cannot pass silently. scripts/harness.sh starts the
// server and sets the variable:
//
//	scripts/harness.sh run go test -race ./activity/... ./workflow/...
package temporaltest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"

	"github.com/idemguard/idemguard/activity"
	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/testing/testenv"
)

// AddressEnv is the environment variable that holds the dev server's
// host:port.
const AddressEnv = testenv.TemporalAddress

// Address returns the dev server's host:port from [AddressEnv]. If it is
// unset, Address skips the test, or fails it when CI is "true".
func Address(t testing.TB) string {
	t.Helper()
	return testenv.Require(t, AddressEnv, "Temporal dev server")
}

// Logger is a quiet SDK logger: errors only, to stderr, so that expected
// activity failures in tests do not flood the output.
func Logger() log.Logger {
	return log.NewStructuredLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})))
}

// Client returns a client for the dev server (see [Address]) with opts,
// closed when the test ends. HostPort, Namespace and Logger are filled in
// when empty.
func Client(t testing.TB, opts client.Options) client.Client {
	t.Helper()
	if opts.HostPort == "" {
		opts.HostPort = Address(t)
	}
	if opts.Namespace == "" {
		opts.Namespace = "default"
	}
	if opts.Logger == nil {
		opts.Logger = Logger()
	}
	c, err := client.Dial(opts)
	if err != nil {
		t.Fatalf("dialing the Temporal dev server at %s: %v", opts.HostPort, err)
	}
	t.Cleanup(c.Close)
	return c
}

var unsafe = regexp.MustCompile(`[^a-zA-Z0-9_.-]+`)

// Name returns a name unique to this call, derived from the test's name: a
// task queue or workflow ID that no other test or run shares.
func Name(t testing.TB, prefix string) string {
	var b [4]byte
	rand.Read(b[:])
	return prefix + "-" + unsafe.ReplaceAllString(t.Name(), "-") + "-" + hex.EncodeToString(b[:])
}

// Worker starts a worker on taskQueue with opts, after register has
// registered workflows and activities on it, and stops it when the test
// ends.
func Worker(t testing.TB, c client.Client, taskQueue string, opts worker.Options, register func(worker.Registry)) worker.Worker {
	t.Helper()
	w := worker.New(c, taskQueue, opts)
	register(w)
	if err := w.Start(); err != nil {
		t.Fatalf("starting the worker: %v", err)
	}
	t.Cleanup(w.Stop)
	return w
}

// Run starts workflow wf with args on taskQueue under workflow ID id and
// waits up to timeout for its result, which it decodes into result (which
// may be nil). It returns the workflow's error.
func Run(t testing.TB, c client.Client, taskQueue, id string, timeout time.Duration, result any, wf any, args ...any) error {
	t.Helper()
	run := Start(t, c, client.StartWorkflowOptions{ID: id, TaskQueue: taskQueue}, wf, args...)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return run.Get(ctx, result)
}

// Start starts workflow wf with args and opts, failing the test if it cannot.
func Start(t testing.TB, c client.Client, opts client.StartWorkflowOptions, wf any, args ...any) client.WorkflowRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	run, err := c.ExecuteWorkflow(ctx, opts, wf, args...)
	if err != nil {
		t.Fatalf("starting workflow %s: %v", opts.ID, err)
	}
	return run
}

// History returns the closed workflow's history.
func History(t testing.TB, c client.Client, id, runID string) *historypb.History {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	it := c.GetWorkflowHistory(ctx, id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	h := &historypb.History{}
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			t.Fatalf("reading the history of %s: %v", id, err)
		}
		h.Events = append(h.Events, e)
	}
	return h
}

// Count returns the number of events of type et in h.
func Count(h *historypb.History, et enumspb.EventType) int {
	n := 0
	for _, e := range h.Events {
		if e.GetEventType() == et {
			n++
		}
	}
	return n
}

// GuardError returns err, the error of a guarded activity or workflow,
// wrapping the guard error its application error type stands for:
// activity.ErrorTypeInProgress as guard.ErrInProgress,
// ErrorTypePayloadMismatch as guard.ErrPayloadMismatch and
// ErrorTypeLeaseLost as guard.ErrLeaseLost, for suites that tell the
// guard's refusals apart (guardtest.RunComposition). Other errors are
// returned as they are.
func GuardError(err error) error {
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) {
		return err
	}
	for typ, sentinel := range map[string]error{
		activity.ErrorTypeInProgress:      guard.ErrInProgress,
		activity.ErrorTypePayloadMismatch: guard.ErrPayloadMismatch,
		activity.ErrorTypeLeaseLost:       guard.ErrLeaseLost,
	} {
		if ae.Type() == typ {
			return fmt.Errorf("%w: %w", err, sentinel)
		}
	}
	return err
}
