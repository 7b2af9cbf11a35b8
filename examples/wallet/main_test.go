package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/idemguard/idemguard/internal/testing/testenv"
)

// The example against the harness's DynamoDB Local: every charge is
// applied once though each is delivered several times, one first attempt
// crashes before its commit and one charge is refused until a top-up; the
// balances and charge counts check out.
func TestWallet(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Endpoint = testenv.Require(t, EndpointEnv, "DynamoDB Local")
	cfg.Charges = 30
	var out bytes.Buffer
	ok, err := Run(context.Background(), &out, cfg)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		t.Fatal("the invariant does not hold")
	}
	for _, want := range []string{
		"invariant holds: every balance is its opening balance and top-ups less its charges, each charge applied exactly once",
		"ch-0001: an instance crashed after adding its writes",
		"ch-0030 refused", "nothing written, the key released",
		"ch-0030 after a top-up of 2000.00: 1 receipt(s)",
		"(1 crashed), 30 charges applied",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the report lacks %q", want)
		}
	}
}
