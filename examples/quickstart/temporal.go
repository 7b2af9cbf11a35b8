package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
)

// addressEnv names a running Temporal server; scripts/harness.sh sets it.
const addressEnv = "IDEMGUARD_TEMPORAL_ADDRESS"

// cliVersion is the Temporal CLI that scripts/harness.sh caches.
const cliVersion = "v1.5.1"

// temporalRun runs workflows on one kind of Temporal.
type temporalRun struct {
	desc string
	// execute runs workflow wf with arg under workflowID and decodes its
	// result into result.
	execute func(ctx context.Context, workflowID string, wf, arg, result any) error

	closeOnce sync.Once
	closers   []func() // run in reverse order by close
}

func (t *temporalRun) close() {
	t.closeOnce.Do(func() {
		for i := len(t.closers) - 1; i >= 0; i-- {
			t.closers[i]()
		}
	})
}

// startTemporal picks a Temporal as the package documentation describes.
func startTemporal(ctx context.Context, cfg config, w *workerSetup) (*temporalRun, error) {
	mode := cfg.Temporal
	switch mode {
	case "testsuite":
		return inProcess(w, "the Temporal SDK's in-process test environment (go.temporal.io/sdk/testsuite)"), nil
	case "cli":
		cli := findCLI(cfg.Getenv)
		if cli == "" {
			return nil, fmt.Errorf("no Temporal CLI: neither %s nor temporal on PATH", cachedCLI(cfg.Getenv))
		}
		return devServer(ctx, cli, w)
	case "auto", "":
	default:
		return onServer(ctx, mode, "Temporal server at "+mode, w)
	}

	if addr := cfg.Getenv(addressEnv); addr != "" {
		return onServer(ctx, addr, fmt.Sprintf("Temporal server at %s (%s)", addr, addressEnv), w)
	}
	why := "no Temporal server named and no Temporal CLI found"
	if cli := findCLI(cfg.Getenv); cli != "" {
		t, err := devServer(ctx, cli, w)
		if err == nil {
			return t, nil
		}
		why = "the dev server did not start: " + err.Error()
	}
	return inProcess(w, "the Temporal SDK's in-process test environment (go.temporal.io/sdk/testsuite; "+why+")"), nil
}

// cachedCLI is where scripts/harness.sh keeps the Temporal CLI.
func cachedCLI(getenv func(string) string) string {
	dir := getenv("IDEMGUARD_TOOLS_DIR")
	if dir == "" {
		cache := getenv("XDG_CACHE_HOME")
		if cache == "" {
			home, _ := os.UserHomeDir()
			cache = filepath.Join(home, ".cache")
		}
		dir = filepath.Join(cache, "idemguard")
	}
	return filepath.Join(dir, "temporal-cli-"+cliVersion, "temporal")
}

// findCLI returns the path of a Temporal CLI on this machine, or "".
func findCLI(getenv func(string) string) string {
	if p := cachedCLI(getenv); isExecutable(p) {
		return p
	}
	if p, err := exec.LookPath("temporal"); err == nil {
		return p
	}
	return ""
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// quietLogger silences the SDK's logs (it logs nothing above error): the
// first attempts' failures are expected and are shown in the trace instead.
func quietLogger() tlog.Logger {
	return tlog.NewStructuredLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError + 1})))
}

func taskQueue() string {
	var b [4]byte
	rand.Read(b[:])
	return "quickstart-" + hex.EncodeToString(b[:])
}

// onServer runs a worker against the server at addr (namespace "default").
func onServer(ctx context.Context, addr, desc string, w *workerSetup) (*temporalRun, error) {
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := client.DialContext(dctx, client.Options{
		HostPort:     addr,
		Logger:       quietLogger(),
		Interceptors: []interceptor.ClientInterceptor{w.tracing}, // its worker half goes to workers too
	})
	if err != nil {
		return nil, fmt.Errorf("connecting to Temporal at %s: %w", addr, err)
	}
	t := &temporalRun{desc: desc}
	t.closers = append(t.closers, c.Close)
	if err := startWorker(t, c, w); err != nil {
		t.close()
		return nil, err
	}
	return t, nil
}

func startWorker(t *temporalRun, c client.Client, w *workerSetup) error {
	queue := taskQueue()
	wk := worker.New(c, queue, worker.Options{Interceptors: w.interceptors})
	w.register(wk)
	if err := wk.Start(); err != nil {
		return fmt.Errorf("starting the worker: %w", err)
	}
	t.closers = append(t.closers, wk.Stop)
	t.execute = func(ctx context.Context, id string, wf, arg, result any) error {
		run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: queue}, wf, arg)
		if err != nil {
			return err
		}
		return run.Get(ctx, result)
	}
	return nil
}

// devServer starts `temporal server start-dev` from cli on a free loopback
// port, in memory and without its UI, and runs a worker against it. The
// server is stopped by close.
func devServer(ctx context.Context, cli string, w *workerSetup) (*temporalRun, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	var logs bytes.Buffer
	cmd := exec.Command(cli, "server", "start-dev", "--headless",
		"--ip", "127.0.0.1", "--port", strconv.Itoa(port), "--http-port", "0", "--metrics-port", "0",
		"--dynamic-config-value", "frontend.enableServerVersionCheck=false", // no calls home
		"--log-level", "error")
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	stop := func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	}

	// Wait until it answers, or exits, for at most 30 s.
	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			conn.Close()
			break
		}
		select {
		case <-exited:
			return nil, fmt.Errorf("%s exited: %s", cli, strings.TrimSpace(logs.String()))
		case <-ctx.Done():
			stop()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			stop()
			return nil, errors.New("the dev server did not answer within 30 s")
		}
	}

	desc := fmt.Sprintf("a dev server started from the Temporal CLI (%s) on %s", cli, addr)
	t, err := onServer(ctx, addr, desc, w)
	if err != nil {
		stop()
		return nil, err
	}
	t.closers = append([]func(){stop}, t.closers...) // stopped last
	return t, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// inProcess runs each workflow in a fresh test environment of the SDK:
// the real workflow, activity, interceptors and guard, with the server's
// scheduling and retries (and their timers) simulated in this process.
func inProcess(w *workerSetup, desc string) *temporalRun {
	var suite testsuite.WorkflowTestSuite
	suite.SetLogger(quietLogger())
	return &temporalRun{
		desc: desc,
		execute: func(ctx context.Context, id string, wf, arg, result any) error {
			env := suite.NewTestWorkflowEnvironment()
			env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: id})
			env.SetWorkerOptions(worker.Options{Interceptors: append([]interceptor.WorkerInterceptor{w.tracing}, w.interceptors...)})
			w.register(env)
			env.ExecuteWorkflow(wf, arg)
			if err := env.GetWorkflowError(); err != nil {
				return err
			}
			return env.GetWorkflowResult(result)
		},
	}
}
