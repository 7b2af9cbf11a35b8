package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/idemguard/idemguard/internal/testing/testenv"
)

// TestMain makes this test binary a ledger worker when the driver starts
// it as one.
func TestMain(m *testing.M) {
	if raw := os.Getenv(workerEnv); raw != "" {
		os.Exit(workerMain(raw))
	}
	os.Exit(m.Run())
}

// The example against the harness's PostgreSQL: worker processes (this
// test binary again) are SIGKILLed after a transfer's writes and before its
// commit, and one is frozen mid-transfer until its transfer is taken over;
// the ledger's invariant holds.
func TestLedger(t *testing.T) {
	cfg := DefaultConfig()
	cfg.URL = testenv.Require(t, URLEnv, "PostgreSQL server")
	cfg.Transfers = 200
	cfg.Kills = 4
	cfg.Command = []string{os.Args[0], "-test.run=^$"}
	var out bytes.Buffer
	ok, err := Run(context.Background(), &out, cfg)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	if !ok || !strings.Contains(out.String(), "invariant holds: no money created or lost, each transfer applied exactly once") {
		t.Fatal("the invariant line is missing")
	}
	for _, want := range []string{"4 workers SIGKILLed", "1 frozen mid-transfer", "0 of those transactions committed", "200 once, 0 more than once"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the report lacks %q", want)
		}
	}
}
