package main

import (
	"context"
	"errors"
	"sync"

	tactivity "go.temporal.io/sdk/activity"
	tworkflow "go.temporal.io/sdk/workflow"

	"github.com/idemguard/idemguard/examples/internal/payment"
	"github.com/idemguard/idemguard/guard"
)

// The second story: an error after the side effect. A checkout charges the
// card and then e-mails the receipt, and the mail server is down for the
// activity's first attempt. The activity returns the error, which releases
// its key, and Temporal's retry runs the activity again, charge included.
// Checkout charges again and relies on the provider to deduplicate the
// request on guard.KeyFromContext; CheckoutInSteps runs each side effect as
// a guard.Step, so that the retry replays the charge and runs only the
// e-mail.

// errMailDown is what the mail server answers on an activity's first
// attempt.
var errMailDown = errors.New("mail server unavailable")

// Mailer stands in for the mail server that sends receipts. It fails every
// activity's first attempt, and counts the receipts it sent, per order.
type Mailer struct {
	mu   sync.Mutex
	sent map[string]int // order ID -> receipts sent; protected by mu
}

// Send e-mails receipt r for order o.
func (m *Mailer) Send(ctx context.Context, o payment.Order, r payment.Receipt) error {
	if tactivity.IsActivity(ctx) && tactivity.GetInfo(ctx).Attempt == 1 {
		return errMailDown
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.sent == nil {
		m.sent = map[string]int{}
	}
	m.sent[o.OrderID]++
	return nil
}

// Sent returns the number of receipts sent for an order.
func (m *Mailer) Sent(orderID string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.sent[orderID]
}

// Checkouts holds the checkout activities' dependencies.
type Checkouts struct {
	Provider *payment.Provider
	Mailer   *Mailer
}

// Checkout charges the order and e-mails the receipt, in one guarded
// activity. When the e-mail fails, the retry charges again: the provider
// sees a second request, which it answers from the first charge only
// because the request carries the same idempotency key.
func (c *Checkouts) Checkout(ctx context.Context, o payment.Order) (payment.Receipt, error) {
	key, _ := guard.KeyFromContext(ctx)
	r, err := c.Provider.Charge(ctx, o, key)
	if err != nil {
		return payment.Receipt{}, err
	}
	return r, c.Mailer.Send(ctx, o, r)
}

// CheckoutInSteps is Checkout with each side effect a guard.Step: when the
// e-mail fails, the retry replays the charge step's recorded receipt and
// runs only the e-mail. The provider sees one request.
func (c *Checkouts) CheckoutInSteps(ctx context.Context, o payment.Order) (payment.Receipt, error) {
	r, err := guard.Step(ctx, "charge", func(ctx context.Context) (payment.Receipt, error) {
		key, _ := guard.KeyFromContext(ctx) // the step's own key
		return c.Provider.Charge(ctx, o, key)
	})
	if err != nil {
		return payment.Receipt{}, err
	}
	_, err = guard.Step(ctx, "email", func(ctx context.Context) (struct{}, error) {
		return struct{}{}, c.Mailer.Send(ctx, o, r)
	})
	return r, err
}

// PurchaseRequest is the Purchase workflow's input.
type PurchaseRequest struct {
	Order payment.Order
	// Steps picks CheckoutInSteps instead of Checkout.
	Steps bool
}

// Purchase is the second story's workflow: it checks the order out and
// returns the receipt.
func Purchase(ctx tworkflow.Context, req PurchaseRequest) (payment.Receipt, error) {
	ctx = tworkflow.WithActivityOptions(ctx, payment.ActivityOptions)
	var c *Checkouts
	checkout := c.Checkout
	if req.Steps {
		checkout = c.CheckoutInSteps
	}
	var r payment.Receipt
	err := tworkflow.ExecuteActivity(ctx, checkout, req.Order).Get(ctx, &r)
	return r, err
}
