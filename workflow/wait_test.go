package workflow_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/idemguard/idemguard/activity"
	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/testing/postgrestest"
	"github.com/idemguard/idemguard/internal/testing/redistest"
	"github.com/idemguard/idemguard/internal/testing/temporaltest"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/memory"
	"github.com/idemguard/idemguard/workflow"
)

// watchedStore is a store that pushes completions (store.Watcher) and
// tells the test when a key is watched: a duplicate waits for its holder
// through the guard's waiter.
type watchedStore struct {
	store.Store
	watched chan string
}

func (w *watchedStore) Watch(ctx context.Context, key string) (store.Subscription, error) {
	sub, err := w.Store.(store.Watcher).Watch(ctx, key)
	if err == nil {
		select {
		case w.watched <- key:
		default:
		}
	}
	return sub, err
}

// pushingStores returns, per store that pushes completions, a function
// making a fresh one. Redis and PostgreSQL come from scripts/harness.sh;
// without them their subtests skip, or fail when CI=true.
func pushingStores() []struct {
	name string
	make func(t *testing.T) store.Store
} {
	return []struct {
		name string
		make func(t *testing.T) store.Store
	}{
		{"memory", func(t *testing.T) store.Store { return memory.New() }},
		{"redis", func(t *testing.T) store.Store { return redistest.NewStore(t, redistest.NewClient(t)) }},
		{"postgres", func(t *testing.T) store.Store { return postgrestest.NewStore(t, postgrestest.NewPool(t)) }},
	}
}

// claims returns how many claim local activities h recorded.
func claims(t *testing.T, h *historypb.History) int {
	t.Helper()
	n := 0
	for _, la := range localActivities(t, h) {
		if la == "IdempotencyClaim" {
			n++
		}
	}
	return n
}

// sleeps returns how many timers h started before its last claim: the
// sleeps of a duplicate that waited (the body's lease extensions sleep on
// timers too, after the claim).
func sleeps(t *testing.T, h *historypb.History) int {
	t.Helper()
	n, before := 0, 0
	for _, e := range h.Events {
		switch {
		case e.GetEventType() == enumspb.EVENT_TYPE_TIMER_STARTED:
			n++
		case e.GetMarkerRecordedEventAttributes() != nil:
			if las := localActivities(t, &historypb.History{Events: []*historypb.HistoryEvent{e}}); len(las) == 1 && las[0] == "IdempotencyClaim" {
				before = n
			}
		}
	}
	return before
}

// waitClaimed waits until workflow id has recorded a local activity.
func waitClaimed(t *testing.T, c client.Client, id string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); temporaltest.Count(temporaltest.History(t, c, id, ""), enumspb.EVENT_TYPE_MARKER_RECORDED) == 0; {
		if time.Now().After(deadline) {
			t.Fatalf("%s never claimed its key", id)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitWaiting waits until the duplicate id waits for its key: the key is
// watched (it waits in its claim's wait slice), or, failing that, its
// first claim is recorded (it sleeps on a timer).
func waitWaiting(t *testing.T, c client.Client, s *watchedStore, id string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; {
		select {
		case <-s.watched:
			return
		case <-time.After(200 * time.Millisecond):
		}
		if temporaltest.Count(temporaltest.History(t, c, id, ""), enumspb.EVENT_TYPE_MARKER_RECORDED) > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the duplicate %s never waited", id)
		}
	}
}

// A duplicate workflow learns of its holder's outcome the moment the store
// pushes it, on every store that pushes: within its first claim's wait
// slice it returns the holder's result, or, the holder having failed and
// released the key, claims it and runs the body; its history holds that
// one claim and no timer (a duplicate that polled on workflow timers had
// slept at least once and claimed again). A terminated holder's key is
// taken over at its lease end within the slice. The histories replay.
func TestDuplicateWakesAtTheHoldersOutcome(t *testing.T) {
	c := temporaltest.Client(t, client.Options{})
	for _, st := range pushingStores() {
		t.Run(st.name, func(t *testing.T) {
			s := &watchedStore{Store: st.make(t), watched: make(chan string, 1)}
			const lease = 2 * time.Second
			g, err := guard.New(s, guard.WithLease(lease))
			if err != nil {
				t.Fatal(err)
			}
			var ships ledger
			tq := shipWorker(t, c, g, &ships)
			// A workflow task timeout of a minute gives slices of 15 s
			// (half the claim's 30 s start-to-close timeout): the holder's
			// outcome falls in the first, however loaded the machine.
			dup := client.StartWorkflowOptions{TaskQueue: tq, WorkflowTaskTimeout: time.Minute}
			guarded := workflow.MustWrap(g, shipOrder, workflow.WithGuardOptions(guard.WithKeyPath("order_id")))
			var histories []*historypb.History

			// holdThen starts a holder of o's key that waits for its
			// release signal, a duplicate of it once it holds the key, and
			// ends the holder with end once the duplicate waits; it returns
			// the duplicate's result and history.
			holdThen := func(name string, o Order, end func(holderID string)) (Receipt, *historypb.History, error) {
				t.Helper()
				ho := o
				ho.Note = "hold"
				idA, idB := temporaltest.Name(t, name+"-holder"), temporaltest.Name(t, name+"-dup")
				temporaltest.Start(t, c, client.StartWorkflowOptions{ID: idA, TaskQueue: tq}, "shipOrder", ho)
				waitClaimed(t, c, idA)
				select { // a watch left from the last case (a re-subscription)
				case <-s.watched:
				default:
				}
				dup.ID = idB
				runB := temporaltest.Start(t, c, dup, "shipOrder", Order{OrderID: o.OrderID, Amount: o.Amount})
				waitWaiting(t, c, s, idB)
				end(idA)
				ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
				defer cancel()
				var r Receipt
				err := runB.Get(ctx, &r)
				h := temporaltest.History(t, c, idB, "")
				histories = append(histories, temporaltest.History(t, c, idA, ""), h)
				return r, h, err
			}
			release := func(id string) {
				if err := c.SignalWorkflow(t.Context(), id, "", "release", nil); err != nil {
					t.Fatal(err)
				}
			}
			slept := func(what string, h *historypb.History) {
				t.Helper()
				if n, timers := claims(t, h), sleeps(t, h); n != 1 || timers != 0 {
					t.Errorf("%s: %d claims and %d sleeps; want 1 claim that waited for the holder's outcome, and no sleep", what, n, timers)
				}
			}

			// The holder completes: the duplicate replays its result.
			r, h, err := holdThen("completed", Order{OrderID: "o-pushed", Amount: 1}, release)
			if err != nil || r.ChargeID == "" || ships.count("ship") != 1 {
				t.Fatalf("duplicate of a completed holder: %+v, %v after %d shipments; want the holder's receipt after 1", r, err, ships.count("ship"))
			}
			slept("duplicate of a completed holder", h)

			// The holder fails and releases the key: the duplicate runs
			// the body.
			_, h, err = holdThen("released", Order{OrderID: "o-released", Amount: 1, Fail: true}, release)
			if err != nil || ships.count("ship") != 3 {
				t.Fatalf("duplicate of a released holder: %v after %d shipments; want its own run (3 shipments in all)", err, ships.count("ship"))
			}
			slept("duplicate of a released holder", h)

			// The holder is terminated and its claim lapses: the duplicate
			// takes the key over at its lease end (2 s, plus the guard's
			// clock skew of 1 s) and runs the body.
			_, h, err = holdThen("terminated", Order{OrderID: "o-terminated", Amount: 1}, func(id string) {
				if err := c.TerminateWorkflow(t.Context(), id, "", "test"); err != nil {
					t.Fatal(err)
				}
			})
			if err != nil || ships.count("ship") != 4 {
				t.Fatalf("duplicate of a terminated holder: %v after %d shipments; want its own run (4 shipments in all)", err, ships.count("ship"))
			}
			slept("duplicate of a terminated holder", h)

			// guard.WithWait(0) still fails at once, without waiting.
			select {
			case <-s.watched:
			default:
			}
			rejectTQ := shipWorker(t, c, g, &ships, workflow.WithGuardOptions(guard.WithWait(0)))
			idA := temporaltest.Name(t, "rejected-holder")
			temporaltest.Start(t, c, client.StartWorkflowOptions{ID: idA, TaskQueue: tq}, "shipOrder", Order{OrderID: "o-rejected", Note: "hold"})
			waitClaimed(t, c, idA)
			idR := temporaltest.Name(t, "rejected")
			err = temporaltest.Run(t, c, rejectTQ, idR, time.Minute, nil, "shipOrder", Order{OrderID: "o-rejected"})
			var ae *temporal.ApplicationError
			if !errors.As(err, &ae) || ae.Type() != activity.ErrorTypeInProgress {
				t.Errorf("duplicate under guard.WithWait(0): %v; want %s", err, activity.ErrorTypeInProgress)
			}
			select {
			case key := <-s.watched:
				t.Errorf("the duplicate under guard.WithWait(0) watched %s; want it to fail without waiting", key)
			default:
			}
			release(idA)

			if err := replay(t, guarded, histories...); err != nil {
				t.Errorf("replaying: %v", err)
			}
		})
	}
}

// A duplicate that waited, recorded before claims waited in slices (a
// claim and a timer of one, two and four seconds, and a claim that found
// the holder's result), replays: a claim that finds the key held is followed by a
// timer as before, so histories of duplicates in flight across the
// upgrade stay deterministic.
func TestDuplicateRecordedBeforeSlicesReplays(t *testing.T) {
	f, err := os.Open("testdata/duplicate-polled.json")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h, err := client.HistoryFromJSON(f, client.HistoryJSONOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n, timers := claims(t, h), temporaltest.Count(h, enumspb.EVENT_TYPE_TIMER_STARTED); n != 4 || timers != 3 {
		t.Fatalf("the recorded history holds %d claims and %d timers; want 4 and 3", n, timers)
	}
	g := newGuard(t)
	guarded := workflow.MustWrap(g, shipOrder, workflow.WithGuardOptions(guard.WithKeyPath("order_id")))
	if err := replay(t, guarded, h); err != nil {
		t.Errorf("replaying: %v", err)
	}
}
