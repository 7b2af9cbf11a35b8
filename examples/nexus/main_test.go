package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/idemguard/idemguard/internal/testing/testenv"
)

func unique(prefix string) string {
	var b [4]byte
	rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}

// The example against the harness's Temporal dev server: a caller
// namespace and a handler namespace it registers, an endpoint between
// them; every operation's first start fails after its side effect, and
// every card is charged once, every stock reserved once.
func TestNexus(t *testing.T) {
	cfg, err := parseConfig(nil, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	cfg.TemporalAddress = testenv.Require(t, "IDEMGUARD_TEMPORAL_ADDRESS", "Temporal dev server")
	cfg.Endpoint = unique("payments-test")
	cfg.TaskQueue = unique("payments-test")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	sum, err := run(ctx, cfg, &out)
	t.Logf("output:\n%s", out.String())
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if len(sum.Checkouts) != cfg.Orders {
		t.Fatalf("%d orders checked out, want %d", len(sum.Checkouts), cfg.Orders)
	}
	e := sum.Effects
	for order, c := range sum.Checkouts {
		if n := e.Count(e.Charges, order); n != 1 || c.Receipt.ChargeID == "" {
			t.Errorf("order %s: charged %d times, receipt %q; want once", order, n, c.Receipt.ChargeID)
		}
		if n := e.Count(e.Reservations, order); n != 1 || c.Shipment.Tracking == "" {
			t.Errorf("order %s: reserved %d times, tracking %q; want once", order, n, c.Shipment.Tracking)
		}
		// Each operation's first start failed after its side effect:
		// the second replayed the step.
		if a, b := e.Count(e.Starts, Charge+" "+order), e.Count(e.Starts, Fulfil+" "+order); a != 2 || b != 2 {
			t.Errorf("order %s: charge started %d times, fulfil %d; want 2 each", order, a, b)
		}
	}
	if !strings.Contains(out.String(), "orders: 3, charges: 3, reservations: 3") {
		t.Errorf("output lacks the summary line")
	}
}
