package payment

import (
	"context"
	"testing"
)

// The provider charges once per idempotency key, answers a repeated key
// with the first receipt, counts both, and refuses a charge without a key.
func TestProviderDeduplicatesOnKey(t *testing.T) {
	ctx := context.Background()
	var p Provider
	o := NewOrder("order-", 4200)
	first, err := p.Charge(ctx, o, "k1")
	if err != nil {
		t.Fatal(err)
	}
	again, err := p.Charge(ctx, o, "k1")
	if err != nil || again != first {
		t.Errorf("same key: %+v, %v; want the first receipt %+v", again, err, first)
	}
	other, err := p.Charge(ctx, o, "k2")
	if err != nil || other.ChargeID == first.ChargeID {
		t.Errorf("another key: %+v, %v; want a new charge", other, err)
	}
	if _, err := p.Charge(ctx, o, ""); err == nil {
		t.Error("a charge without an idempotency key was accepted")
	}
	if r, c := p.Requests(o.OrderID), p.Charges(o.OrderID); r != 3 || c != 2 {
		t.Errorf("%d requests, %d charges; want 3 and 2", r, c)
	}
	if got, want := first.String(), "ch_"+o.OrderID+"_1, 42.00 EUR"; got != want {
		t.Errorf("receipt prints as %q, want %q", got, want)
	}
	if NewOrder("order-", 1).OrderID == NewOrder("order-", 1).OrderID {
		t.Error("two new orders share an ID")
	}
}
