package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/idemguard/idemguard/internal/testing/testenv"
)

// TestMain makes this test binary a consumer when the driver starts it as
// one.
func TestMain(m *testing.M) {
	if raw := os.Getenv(consumerEnv); raw != "" {
		os.Exit(consumerMain(raw))
	}
	os.Exit(m.Run())
}

// The example against the harness's redis-server: consumer processes (this
// test binary again) are SIGKILLed mid-handler and before an ack, their
// orders are redelivered, and every order's effects happen once.
func TestConsumer(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Addr = testenv.Require(t, AddrEnv, "redis-server")
	cfg.Orders = 120
	cfg.Command = []string{os.Args[0], "-test.run=^$"}
	var out bytes.Buffer
	ok, err := Run(context.Background(), &out, cfg)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		t.Fatal("an order's effects did not happen exactly once")
	}
	for _, want := range []string{
		"in the handler of order", "after publishing order",
		"stock reserved: 120 orders, 120 once, 0 more than once",
		"cards charged:  120 orders, 120 once, 0 more than once",
		"e-mails sent:   120 orders, 120 once, 0 more than once",
		"for 120 orders, 120 under one UUID each",
		"ran once: every order's stock reserved, card charged and e-mail sent exactly once",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the report lacks %q", want)
		}
	}
}
