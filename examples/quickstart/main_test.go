package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/idemguard/idemguard/examples/internal/payment"
	"github.com/idemguard/idemguard/internal/testing/testenv"
)

// env returns a getenv that sees only the named variables of the real
// environment, so that a test decides which servers the quickstart finds.
func env(names ...string) func(string) string {
	return func(k string) string {
		for _, n := range names {
			if k == n {
				return os.Getenv(k)
			}
		}
		return ""
	}
}

// The variables that locate the cached Temporal CLI.
var cliEnv = []string{"IDEMGUARD_TOOLS_DIR", "XDG_CACHE_HOME"}

// requireEnv returns the variable's value, skipping the test when it is
// unset, or failing it when CI=true.
func requireEnv(t *testing.T, name string) string {
	t.Helper()
	return testenv.Require(t, name, "server at "+name)
}

// quickstartRun runs the quickstart's main logic and checks what every run
// must show: one charge and the same receipt for both workflows of the
// crash story; a second charge request without guard.Step and one with it
// in the error story; and the trace tree of attempts that executed, failed
// and replayed.
func quickstartRun(t *testing.T, cfg config) *result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	start := time.Now()
	res, err := quickstart(ctx, &out, cfg)
	t.Logf("ran in %v:\n%s", time.Since(start).Round(time.Millisecond), out.String())
	if err != nil {
		t.Fatalf("quickstart: %v", err)
	}
	if res.Requests != 1 || res.Charges != 1 {
		t.Errorf("charge requests = %d, charges = %d; want 1 and 1", res.Requests, res.Charges)
	}
	if !strings.Contains(out.String(), "charge requests: 1, charges made: 1\n") {
		t.Errorf("output lacks the charge counts of 1")
	}
	if len(res.Receipts) != 2 || res.Receipts[0] != res.Receipts[1] || res.Receipts[0].ChargeID == "" {
		t.Errorf("receipts = %+v, want two equal ones", res.Receipts)
	}
	for name, c := range map[string]struct {
		got      checkoutResult
		requests int
	}{"without steps": {res.Plain, 2}, "with steps": {res.Steps, 1}} {
		if c.got.Requests != c.requests || c.got.Charges != 1 || c.got.Emails != 1 || c.got.Receipt.ChargeID == "" {
			t.Errorf("checkout %s: %+v; want %d charge requests, 1 charge, 1 e-mail and a receipt", name, c.got, c.requests)
		}
	}
	for _, want := range []string{
		"without guard.Step  charge requests: 2, charges made: 1, receipts e-mailed: 1\n",
		"with guard.Step     charge requests: 1, charges made: 1, receipts e-mailed: 1\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
	for _, want := range []string{
		"RunWorkflow:Payment  workflow=pay-order-",
		"StartActivity:Charge",
		"├─ RunActivity:Charge  error: " + payment.ErrCrash.Error(),
		"idemguard.execute  attempt=1  outcome=executed",
		"├─ idemguard.acquire",
		"└─ idemguard.complete",
		"idemguard.execute  attempt=2  outcome=replayed",
		"RunWorkflow:Purchase  workflow=checkout-order-",
		"├─ RunActivity:Checkout  error: " + errMailDown.Error(),
		"idemguard.execute  attempt=1  outcome=error  error: " + errMailDown.Error(),
		"└─ idemguard.release",
		"idemguard.execute  step=charge  attempt=1  outcome=executed",
		"idemguard.execute  step=email  attempt=1  outcome=error",
		"idemguard.execute  step=charge  attempt=2  outcome=replayed",
		"idemguard.execute  step=email  attempt=2  outcome=executed",
	} {
		if !strings.Contains(res.Tree, want) {
			t.Errorf("trace tree lacks %q:\n%s", want, res.Tree)
		}
	}
	if !strings.Contains(out.String(), "trace of the guarded calls:\n"+res.Tree) {
		t.Errorf("the tree is not printed")
	}
	return res
}

// With no servers and no CLI, the quickstart runs on the SDK's in-process
// test environment and the memory store.
func TestInProcess(t *testing.T) {
	res := quickstartRun(t, config{Temporal: "testsuite", Getenv: env()})
	if !strings.Contains(res.Temporal, "go.temporal.io/sdk/testsuite") || !strings.HasPrefix(res.Store, "memory") {
		t.Errorf("ran on %q with %q, want the test environment and the memory store", res.Temporal, res.Store)
	}
}

// `go run ./examples/quickstart` with no servers running: whatever this
// machine offers (the cached CLI after `make test`, else the test
// environment), it works.
func TestAutoWithoutServers(t *testing.T) {
	res := quickstartRun(t, config{Temporal: "auto", Getenv: env(cliEnv...)})
	if strings.Contains(res.Temporal, addressEnv) {
		t.Errorf("ran on %q, want a server of its own", res.Temporal)
	}
}

// The dev server the quickstart starts from the Temporal CLI that
// scripts/harness.sh caches, and stops at the end.
func TestDevServerFromCLI(t *testing.T) {
	cli := findCLI(env(cliEnv...))
	if cli == "" {
		testenv.Missing(t, "no Temporal CLI at "+cachedCLI(env(cliEnv...))+"; make tools (scripts/harness.sh) installs it")
	}
	res := quickstartRun(t, config{Temporal: "cli", Getenv: env(cliEnv...)})
	if !strings.Contains(res.Temporal, "dev server started from the Temporal CLI") {
		t.Errorf("ran on %q", res.Temporal)
	}
}

// The harness's Temporal server and redis-server, as named by the
// environment: Redis keeps the records.
func TestServerAndRedis(t *testing.T) {
	addr := requireEnv(t, addressEnv)
	redisAddr := requireEnv(t, redisAddrEnv)
	res := quickstartRun(t, config{Temporal: "auto", Getenv: env(addressEnv, redisAddrEnv)})
	if !strings.Contains(res.Temporal, addr) || !strings.HasPrefix(res.Store, "Redis at "+redisAddr+" (IDEMGUARD_REDIS_ADDR)") {
		t.Errorf("ran on %q with %q, want the server at %s and Redis at %s", res.Temporal, res.Store, addr, redisAddr)
	}
}

// The harness's Temporal server and DynamoDB Local, as named by the
// environment.
func TestServerAndDynamoDB(t *testing.T) {
	addr := requireEnv(t, addressEnv)
	requireEnv(t, endpointEnv)
	res := quickstartRun(t, config{Temporal: "auto", Getenv: env(addressEnv, endpointEnv)})
	if !strings.Contains(res.Temporal, addr) || !strings.HasPrefix(res.Store, "DynamoDB table "+defaultTable) {
		t.Errorf("ran on %q with %q, want the server at %s and DynamoDB", res.Temporal, res.Store, addr)
	}
}
