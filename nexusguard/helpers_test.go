package nexusguard_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nexus-rpc/sdk-go/nexus"
	"go.temporal.io/sdk/temporal"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/memory"
)

// The test service and its operation.
const (
	service   = "payments"
	operation = "charge"
)

// Order is the test operations' input.
type Order struct {
	OrderID string `json:"order_id"`
	Amount  int    `json:"amount"`
}

// Receipt is the test operations' result. ChargeID is random per run of
// the handler, so equal receipts come from one run.
type Receipt struct {
	ChargeID string `json:"charge_id"`
	OrderID  string `json:"order_id"`
	Amount   int    `json:"amount"`
	Worker   string `json:"worker,omitempty"`
}

func randomID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ledger counts side effects by name.
type ledger struct {
	mu sync.Mutex
	n  map[string]int // protected by mu
}

func (l *ledger) add(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n == nil {
		l.n = map[string]int{}
	}
	l.n[name]++
}

// distinct returns the number of names counted.
func (l *ledger) distinct() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.n)
}

func (l *ledger) count(name string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n[name]
}

// charge is a sync handler that charges (counted in l under the order ID)
// and returns a fresh receipt.
func charge(l *ledger) func(context.Context, Order, nexus.StartOperationOptions) (Receipt, error) {
	return func(ctx context.Context, o Order, _ nexus.StartOperationOptions) (Receipt, error) {
		l.add(o.OrderID)
		return Receipt{ChargeID: "ch_" + randomID(), OrderID: o.OrderID, Amount: o.Amount}, nil
	}
}

// handlerContext is the context the Nexus machinery gives a handler of
// the test operation.
func handlerContext() context.Context {
	return nexus.WithHandlerContext(context.Background(), nexus.HandlerInfo{Service: service, Operation: operation, Header: nexus.Header{}})
}

// start is the options of a start request with request ID id.
func start(id string) nexus.StartOperationOptions {
	return nexus.StartOperationOptions{RequestID: id, Header: nexus.Header{}}
}

func newGuard(t testing.TB, opts ...guard.Option) *guard.Guard {
	t.Helper()
	return newGuardOn(t, memory.New(), opts...)
}

func newGuardOn(t testing.TB, s store.Store, opts ...guard.Option) *guard.Guard {
	t.Helper()
	g, err := guard.New(s, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// handlerError returns the *nexus.HandlerError err is, failing the test
// unless err is one at the top (where the SDK looks for it), of type typ
// and with the retryability the type's retry behaviour gives.
func handlerError(t testing.TB, err error, typ nexus.HandlerErrorType, retryable bool) *nexus.HandlerError {
	t.Helper()
	he, ok := err.(*nexus.HandlerError)
	if !ok {
		t.Fatalf("error %v (%T) is not a *nexus.HandlerError", err, err)
	}
	if he.Type != typ || he.Retryable() != retryable {
		t.Fatalf("handler error %v: type %s, retryable %v; want %s, %v", he, he.Type, he.Retryable(), typ, retryable)
	}
	return he
}

// cause returns the Temporal application error a handler error carries,
// failing the test if it has none of type typ.
func cause(t testing.TB, he *nexus.HandlerError, typ string) *temporal.ApplicationError {
	t.Helper()
	var ae *temporal.ApplicationError
	if !errors.As(he.Cause, &ae) || ae.Type() != typ {
		t.Fatalf("handler error %v: cause %v (%T), want an application error of type %s", he, he.Cause, he.Cause, typ)
	}
	return ae
}

// failingStore fails every claim with err.
type failingStore struct {
	store.Store
	err error
}

func (s failingStore) Acquire(context.Context, *store.Record, time.Time) (*store.Record, error) {
	return nil, s.err
}
