// Command quickstart shows idemguard's main job with no servers: a payment
// is charged once although the worker crashes after charging and the job is
// retried, and although the queue delivers it twice.
//
//	go run ./examples/quickstart
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/store/memory"
)

// Payment is the job: what the key is derived from.
type Payment struct {
	OrderID  string `json:"order_id"`
	Amount   int    `json:"amount"`
	Currency string `json:"currency"`
}

// Receipt is the result that is stored and replayed.
type Receipt struct {
	ChargeID string `json:"charge_id"`
	Amount   int    `json:"amount"`
}

// provider stands in for a payment provider; it counts real charges.
type provider struct{ charges atomic.Int64 }

func (p *provider) charge(ctx context.Context, pay Payment) Receipt {
	n := p.charges.Add(1)
	return Receipt{ChargeID: fmt.Sprintf("ch_%s_%d", pay.OrderID, n), Amount: pay.Amount}
}

var errCrash = errors.New("worker crashed after charging, before acknowledging")

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out io.Writer) error {
	g, err := guard.New(memory.New(), guard.WithKeyPath("order_id"))
	if err != nil {
		return err
	}
	p := &provider{}
	pay := Payment{OrderID: "order-42", Amount: 4200, Currency: "EUR"}

	// Attempt 1 charges, then "crashes" before the queue hears of success:
	// the guard records the charge, the job fails, the queue retries.
	attempt := 0
	job := func(ctx context.Context, pay Payment) (Receipt, error) {
		return guard.Do(ctx, g, "charge", pay, func(ctx context.Context) (Receipt, error) {
			return p.charge(ctx, pay), nil
		})
	}
	deliver := func(label string) (Receipt, error) {
		attempt++
		r, err := job(ctx, pay)
		if err == nil && attempt == 1 {
			err = errCrash // the side effect and its record are done; the ack is lost
		}
		fmt.Fprintf(out, "%-26s receipt=%s err=%v\n", label, r.ChargeID, err)
		return r, err
	}

	first, _ := deliver("attempt 1")
	retry, err := deliver("attempt 2 (retry)")
	if err != nil {
		return err
	}
	dup, err := deliver("duplicate delivery")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "charges made: %d\n", p.charges.Load())
	if p.charges.Load() != 1 || retry != first || dup != first {
		return fmt.Errorf("charged %d times; receipts %v %v %v", p.charges.Load(), first, retry, dup)
	}
	return nil
}
