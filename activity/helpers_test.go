package activity_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"sync"
	"testing"
	"time"

	tactivity "go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	tworkflow "go.temporal.io/sdk/workflow"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/store/memory"
)

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(helperMain())
	}
	os.Exit(m.Run())
}

// Order is the test activities' input.
type Order struct {
	OrderID string `json:"order_id"`
	Amount  int    `json:"amount"`
	Note    string `json:"note,omitempty"`
}

// Receipt is the test activities' result. ChargeID is random per
// execution, so equal receipts come from one execution.
type Receipt struct {
	ChargeID string `json:"charge_id"`
	Amount   int    `json:"amount"`
	Note     string `json:"note,omitempty"`
	Attempt  int32  `json:"attempt"`
	Worker   string `json:"worker,omitempty"`
}

func randomID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// newReceipt is what a charge returns: a fresh charge ID.
func newReceipt(ctx context.Context, o Order) Receipt {
	r := Receipt{ChargeID: randomID(), Amount: o.Amount, Note: o.Note}
	if tactivity.IsActivity(ctx) {
		r.Attempt = tactivity.GetInfo(ctx).Attempt
	}
	return r
}

// ledger counts side effects, by order ID.
type ledger struct {
	mu sync.Mutex
	n  map[string]int // protected by mu
}

func (l *ledger) add(orderID string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n == nil {
		l.n = make(map[string]int)
	}
	l.n[orderID]++
}

func (l *ledger) count(orderID string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n[orderID]
}

func newGuard(t testing.TB, opts ...guard.Option) *guard.Guard {
	t.Helper()
	g, err := guard.New(memory.New(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// chargeParams tells chargeWorkflow what to schedule.
type chargeParams struct {
	Order            Order
	Activity         string // activity type; default "Charge"
	MaxAttempts      int32
	StartToClose     time.Duration
	HeartbeatTimeout time.Duration
}

// chargeWorkflow runs one charge activity with a fast retry policy and
// returns its receipt.
func chargeWorkflow(ctx tworkflow.Context, p chargeParams) (Receipt, error) {
	if p.Activity == "" {
		p.Activity = "Charge"
	}
	if p.StartToClose == 0 {
		p.StartToClose = 10 * time.Second
	}
	ctx = tworkflow.WithActivityOptions(ctx, tworkflow.ActivityOptions{
		StartToCloseTimeout: p.StartToClose,
		HeartbeatTimeout:    p.HeartbeatTimeout,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:    100 * time.Millisecond,
			BackoffCoefficient: 1,
			MaximumAttempts:    p.MaxAttempts,
		},
	})
	var r Receipt
	err := tworkflow.ExecuteActivity(ctx, p.Activity, p.Order).Get(ctx, &r)
	return r, err
}

// appError returns the application error in err's chain, failing the test
// if there is none.
func appError(t testing.TB, err error) *temporal.ApplicationError {
	t.Helper()
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) {
		t.Fatalf("error %v (%T) holds no application error", err, err)
	}
	return ae
}
