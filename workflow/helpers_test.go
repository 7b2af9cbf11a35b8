package workflow_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"testing"
	"time"

	historypb "go.temporal.io/api/history/v1"
	tactivity "go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	tworkflow "go.temporal.io/sdk/workflow"

	"github.com/idemguard/idemguard/activity"
	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/store/memory"
)

// Order is the test workflows' input.
type Order struct {
	OrderID string `json:"order_id"`
	Amount  int    `json:"amount"`
	Note    string `json:"note,omitempty"`
	Fail    bool   `json:"fail,omitempty"`
}

// Receipt is a test activity's result; ChargeID is random per execution.
type Receipt struct {
	ChargeID string `json:"charge_id"`
	Amount   int    `json:"amount"`
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
		l.n = make(map[string]int)
	}
	l.n[name]++
}

func (l *ledger) count(name string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n[name]
}

func newGuard(t testing.TB) *guard.Guard {
	t.Helper()
	g, err := guard.New(memory.New())
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// sideEffect returns an activity that records a side effect under name and
// returns a fresh receipt.
func sideEffect(l *ledger, name string) func(context.Context, Order) (Receipt, error) {
	return func(ctx context.Context, o Order) (Receipt, error) {
		l.add(name)
		return Receipt{ChargeID: randomID(), Amount: o.Amount}, nil
	}
}

func activityCtx(ctx tworkflow.Context) tworkflow.Context {
	return tworkflow.WithActivityOptions(ctx, tworkflow.ActivityOptions{
		StartToCloseTimeout: 10 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: 100 * time.Millisecond, BackoffCoefficient: 1, MaximumAttempts: 3},
	})
}

// scheduledKeys returns, in order, the activity type and stamped key of
// every activity scheduled in h.
func scheduledKeys(t *testing.T, h *historypb.History) [][2]string {
	t.Helper()
	var out [][2]string
	for _, e := range h.Events {
		a := e.GetActivityTaskScheduledEventAttributes()
		if a == nil {
			continue
		}
		key := ""
		if p := a.GetHeader().GetFields()[keyHeaderField]; p != nil {
			if err := converter.GetDefaultDataConverter().FromPayload(p, &key); err != nil {
				t.Fatal(err)
			}
		}
		out = append(out, [2]string{a.GetActivityType().GetName(), key})
	}
	return out
}

// registerCharge registers a guarded Charge activity on r.
func chargeActivity(g *guard.Guard, l *ledger, opts ...activity.Option) (any, tactivity.RegisterOptions) {
	return activity.Must(activity.Wrap(g, sideEffect(l, "charge"), opts...)), tactivity.RegisterOptions{Name: "Charge"}
}

// localActivities returns, in order, the types of the local activities
// recorded in h.
func localActivities(t *testing.T, h *historypb.History) []string {
	t.Helper()
	var out []string
	for _, e := range h.Events {
		m := e.GetMarkerRecordedEventAttributes()
		if m == nil || m.GetMarkerName() != "LocalActivity" {
			continue
		}
		var data map[string]any
		if err := converter.GetDefaultDataConverter().FromPayloads(m.GetDetails()["data"], &data); err != nil {
			t.Fatal(err)
		}
		s, _ := data["ActivityType"].(string)
		out = append(out, s)
	}
	return out
}

// keyHeaderField is the activity header field that carries a stamped key.
const keyHeaderField = "idemguard-key"
