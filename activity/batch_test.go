package activity_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	tactivity "go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	tworkflow "go.temporal.io/sdk/workflow"

	"github.com/idemguard/idemguard/activity"
	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/internal/testing/dynamodbtest"
	"github.com/idemguard/idemguard/internal/testing/reqcount"
	"github.com/idemguard/idemguard/internal/testing/temporaltest"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/memory"
)

// Invoice is an item of the batch activities.
type Invoice struct {
	ID     string `json:"id"`
	Amount int    `json:"amount"`
}

// Sent is the result of sending one invoice: the attempt that sent it.
type Sent struct {
	ID      string `json:"id"`
	Attempt int32  `json:"attempt"`
}

// invoices returns n invoices, inv-001 to inv-n.
func invoices(n int) []Invoice {
	in := make([]Invoice, n)
	for i := range in {
		in[i] = Invoice{ID: fmt.Sprintf("inv-%03d", i+1), Amount: 10 * (i + 1)}
	}
	return in
}

// sends is a side-effect ledger: the attempts in which each invoice was
// sent.
type sends struct {
	mu sync.Mutex
	by map[string][]int32 // protected by mu
}

func (s *sends) add(id string, attempt int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.by == nil {
		s.by = map[string][]int32{}
	}
	s.by[id] = append(s.by[id], attempt)
}

func (s *sends) get(id string) []int32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int32(nil), s.by[id]...)
}

func (s *sends) total() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, a := range s.by {
		n += len(a)
	}
	return n
}

// sender returns a send function that records each send in l, and fails
// the invoice failID on attempt 1 (before sending it).
func sender(l *sends, failID string) func(context.Context, Invoice) (Sent, error) {
	return func(ctx context.Context, inv Invoice) (Sent, error) {
		var attempt int32 = 1
		if tactivity.IsActivity(ctx) {
			attempt = tactivity.GetInfo(ctx).Attempt
		}
		if inv.ID == failID && attempt == 1 {
			return Sent{}, errors.New("mail server unavailable")
		}
		l.add(inv.ID, attempt)
		return Sent{ID: inv.ID, Attempt: attempt}, nil
	}
}

// batchParams tells batchWorkflow what to schedule.
type batchParams struct {
	Invoices    []Invoice
	MaxAttempts int32
}

// batchWorkflow runs the SendInvoices activity with a fast retry policy.
func batchWorkflow(ctx tworkflow.Context, p batchParams) ([]Sent, error) {
	ctx = tworkflow.WithActivityOptions(ctx, tworkflow.ActivityOptions{
		StartToCloseTimeout: 2 * time.Minute,
		HeartbeatTimeout:    10 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:    100 * time.Millisecond,
			BackoffCoefficient: 1,
			MaximumAttempts:    p.MaxAttempts,
		},
	})
	var out []Sent
	err := tworkflow.ExecuteActivity(ctx, "SendInvoices", p.Invoices).Get(ctx, &out)
	return out, err
}

// progressDone returns the "done" count in the heartbeat details an earlier
// attempt left, or -1 if there are none.
func progressDone(ctx context.Context) int {
	if !tactivity.HasHeartbeatDetails(ctx) {
		return -1
	}
	var d map[string]any
	if err := tactivity.GetHeartbeatDetails(ctx, &d); err != nil {
		return -1
	}
	n, _ := d["done"].(float64)
	return int(n)
}

// Acceptance 1: a batch of 250 invoices whose activity fails after item 130
// (item 131's send fails on attempt 1), on the Temporal dev server with the
// DynamoDB store. The retry resumes from the heartbeat progress and runs
// only items 131-250; the ledger shows every invoice sent once; the
// workflow gets all 250 results in order.
func TestBatchResumesAfterFailure(t *testing.T) {
	c := temporaltest.Client(t, client.Options{})
	for _, tc := range []struct {
		name        string
		concurrency int // 0: the default
	}{
		{"sequential", 1},
		{"default concurrency", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var requests *reqcount.Counter
			ddb := dynamodbtest.NewClient(t, func(o *dynamodb.Options) { requests = dynamodbtest.CountRequests(o) })
			g, err := guard.New(dynamodbtest.NewStore(t, ddb))
			if err != nil {
				t.Fatal(err)
			}
			var l sends
			opts := []activity.Option{activity.WithGuardOptions(guard.WithKeyPath("id"))}
			if tc.concurrency > 0 {
				opts = append(opts, activity.WithBatchOptions(guard.WithConcurrency(tc.concurrency)))
			}
			var mu sync.Mutex
			resumedAt := map[int32]int{} // protected by mu: heartbeat progress seen by each attempt
			attempt2 := map[string]int{} // protected by mu: requests of attempt 2
			sendInvoices := func(ctx context.Context, invs []Invoice) ([]Sent, error) {
				a := tactivity.GetInfo(ctx).Attempt
				mu.Lock()
				resumedAt[a] = progressDone(ctx)
				mu.Unlock()
				if a == 2 {
					requests.Reset()
				}
				out, err := activity.DoBatch(ctx, g, invs, sender(&l, "inv-131"), opts...)
				if a == 2 {
					mu.Lock()
					attempt2 = requests.Snapshot()
					mu.Unlock()
				}
				return out, err
			}
			tq := temporaltest.Name(t, "tq")
			temporaltest.Worker(t, c, tq, worker.Options{}, func(r worker.Registry) {
				r.RegisterWorkflow(batchWorkflow)
				r.RegisterActivityWithOptions(sendInvoices, tactivity.RegisterOptions{Name: "SendInvoices"})
			})

			in := invoices(250)
			var got []Sent
			if err := temporaltest.Run(t, c, tq, temporaltest.Name(t, "wf"), 2*time.Minute, &got, batchWorkflow, batchParams{Invoices: in, MaxAttempts: 3}); err != nil {
				t.Fatalf("workflow failed: %v", err)
			}
			if len(got) != len(in) {
				t.Fatalf("workflow returned %d results, want %d", len(got), len(in))
			}
			for i, s := range got {
				if s.ID != in[i].ID {
					t.Fatalf("result %d is for %s, want %s: results out of order", i, s.ID, in[i].ID)
				}
			}
			var ranInRetry []int
			for i, inv := range in {
				attempts := l.get(inv.ID)
				if len(attempts) != 1 {
					t.Errorf("%s was sent %d times (attempts %v), want once", inv.ID, len(attempts), attempts)
					continue
				}
				if got[i].Attempt != attempts[0] {
					t.Errorf("result %d says attempt %d sent it, the ledger says %d", i, got[i].Attempt, attempts[0])
				}
				if attempts[0] == 2 {
					ranInRetry = append(ranInRetry, i+1)
				}
				if i < 130 && attempts[0] != 1 {
					t.Errorf("%s (before the failure) was sent by attempt %d, want 1", inv.ID, attempts[0])
				}
			}
			if len(ranInRetry) == 0 || ranInRetry[0] != 131 {
				t.Errorf("the retry ran items %v; want it to start at 131", ranInRetry)
			}
			if tc.concurrency == 1 && (len(ranInRetry) != 120 || ranInRetry[len(ranInRetry)-1] != 250) {
				t.Errorf("the retry ran %d items (%v…); want exactly 131-250", len(ranInRetry), ranInRetry[:min(5, len(ranInRetry))])
			}
			mu.Lock()
			defer mu.Unlock()
			if resumedAt[1] != -1 || resumedAt[2] != 130 {
				t.Errorf("heartbeat progress seen by attempts 1 and 2: %d, %d; want none, 130", resumedAt[1], resumedAt[2])
			}
			t.Logf("attempt 2 (resumed at item %d, ran %d items) sent %v", resumedAt[2], len(ranInRetry), attempt2)
			if b := attempt2["BatchGetItem"]; b < 1 || b > 3 {
				t.Errorf("attempt 2 sent %d BatchGetItem requests, want 1 to 3", b)
			}
			if p := attempt2["PutItem"]; p != len(ranInRetry) {
				t.Errorf("attempt 2 sent %d PutItem requests for %d items run: the done items were claimed again", p, len(ranInRetry))
			}
		})
	}
}

// throttleOnce is a memory store whose first GetMany calls fail as a
// throttled store's do.
type throttleOnce struct {
	*memory.Store
	mu       sync.Mutex
	throttle int // protected by mu: GetMany calls still to throttle
}

func (s *throttleOnce) GetMany(ctx context.Context, keys []string) (map[string]*store.Record, error) {
	s.mu.Lock()
	fail := s.throttle > 0
	if fail {
		s.throttle--
	}
	s.mu.Unlock()
	if fail {
		return nil, fmt.Errorf("injected: %w", store.ErrThrottled)
	}
	return s.Store.GetMany(ctx, keys)
}

// Throttling fails the attempt with a retryable error whose next-retry
// delay lets the store recover; the retry completes the batch.
func TestBatchThrottledRetriesAfterDelay(t *testing.T) {
	c := temporaltest.Client(t, client.Options{})
	s := &throttleOnce{Store: memory.New(), throttle: 1}
	g, err := guard.New(s)
	if err != nil {
		t.Fatal(err)
	}
	var l sends
	var mu sync.Mutex
	var starts []time.Time // protected by mu
	sendInvoices := func(ctx context.Context, invs []Invoice) ([]Sent, error) {
		mu.Lock()
		starts = append(starts, time.Now())
		mu.Unlock()
		return activity.DoBatch(ctx, g, invs, sender(&l, ""), activity.WithGuardOptions(guard.WithKeyPath("id")), activity.WithMaxRetryDelay(1500*time.Millisecond))
	}
	tq := temporaltest.Name(t, "tq")
	temporaltest.Worker(t, c, tq, worker.Options{}, func(r worker.Registry) {
		r.RegisterWorkflow(batchWorkflow)
		r.RegisterActivityWithOptions(sendInvoices, tactivity.RegisterOptions{Name: "SendInvoices"})
	})
	in := invoices(20)
	id := temporaltest.Name(t, "wf")
	var got []Sent
	if err := temporaltest.Run(t, c, tq, id, time.Minute, &got, batchWorkflow, batchParams{Invoices: in, MaxAttempts: 3}); err != nil {
		t.Fatalf("workflow failed: %v", err)
	}
	if len(got) != 20 || got[19].ID != "inv-020" || l.total() != 20 {
		t.Errorf("%d results, %d sends; want 20 and 20", len(got), l.total())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(starts) != 2 {
		t.Fatalf("%d attempts, want 2", len(starts))
	}
	// The retry policy's interval is 100 ms; the throttle delay (capped at
	// 1.5 s) is at least 1.5 s here since ThrottleRetryDelay/2 > 1.5 s.
	if gap := starts[1].Sub(starts[0]); gap < 1200*time.Millisecond {
		t.Errorf("the retry came %v after the throttled attempt; want the throttle delay (1.5 s)", gap)
	}
	h := temporaltest.History(t, c, id, "")
	found := false
	for _, e := range h.Events {
		if a := e.GetActivityTaskStartedEventAttributes(); a != nil {
			found = true
			if typ := a.GetLastFailure().GetApplicationFailureInfo().GetType(); typ != activity.ErrorTypeStoreThrottled {
				t.Errorf("the retried attempt's last failure has type %q, want %q", typ, activity.ErrorTypeStoreThrottled)
			}
		}
	}
	if !found {
		t.Error("no ActivityTaskStarted event in the history")
	}
}

// batchEnv runs SendInvoices, built by mk, in a test activity environment
// with the given heartbeat details, and returns its results, its error and
// the last heartbeat details it recorded.
func batchEnv(t *testing.T, details any, in []Invoice, mk func() func(context.Context, []Invoice) ([]Sent, error)) ([]Sent, error, map[string]any) {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	s.SetLogger(temporaltest.Logger())
	env := s.NewTestActivityEnvironment()
	if details != nil {
		env.SetHeartbeatDetails(details)
	}
	var mu sync.Mutex
	var last map[string]any
	env.SetOnActivityHeartbeatListener(func(_ *tactivity.Info, d converter.EncodedValues) {
		var m map[string]any
		if d.HasValues() && d.Get(&m) == nil {
			mu.Lock()
			last = m
			mu.Unlock()
		}
	})
	env.RegisterActivityWithOptions(mk(), tactivity.RegisterOptions{Name: "SendInvoices"})
	v, err := env.ExecuteActivity("SendInvoices", in)
	var out []Sent
	if err == nil {
		if derr := v.Get(&out); derr != nil {
			t.Fatalf("decoding the result: %v", derr)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	return out, err, last
}

// The heartbeat progress of a failed attempt makes the next one start at
// the first item not done; progress for other items is ignored; done items
// whose records are gone are not run again.
func TestBatchHeartbeatProgress(t *testing.T) {
	in := invoices(20)
	g := newGuard(t)
	var l sends
	mk := func(failID string) func() func(context.Context, []Invoice) ([]Sent, error) {
		return func() func(context.Context, []Invoice) ([]Sent, error) {
			return func(ctx context.Context, invs []Invoice) ([]Sent, error) {
				return activity.DoBatch(ctx, g, invs, sender(&l, failID), activity.WithGuardOptions(guard.WithKeyPath("id")), activity.WithBatchOptions(guard.WithConcurrency(1)))
			}
		}
	}

	_, err, details := batchEnv(t, nil, in, mk("inv-013"))
	if err == nil || l.total() != 12 {
		t.Fatalf("first attempt: %v, %d sends; want the send error after 12 sends", err, l.total())
	}
	if details == nil || details["done"] != float64(12) || details["items"] != float64(20) {
		t.Fatalf("heartbeat details after the failure = %v; want done 12 of 20", details)
	}

	// A retry (attempt 1 again in the test environment, so the send does
	// not fail: use another fail ID) resumes at item 13.
	out, err, _ := batchEnv(t, details, in, mk(""))
	if err != nil || len(out) != 20 {
		t.Fatalf("resumed attempt = %d results, %v", len(out), err)
	}
	for i, s := range out {
		if s.ID != in[i].ID {
			t.Errorf("result %d for %s, want %s", i, s.ID, in[i].ID)
		}
	}
	if l.total() != 20 {
		t.Errorf("%d sends in all, want 20", l.total())
	}

	// Progress for another list of items is ignored.
	other := invoices(20)
	other[0].Amount = 999
	other[0].ID = "other-001"
	g2 := newGuard(t)
	var l2 sends
	out, err, _ = batchEnv(t, details, other, func() func(context.Context, []Invoice) ([]Sent, error) {
		return func(ctx context.Context, invs []Invoice) ([]Sent, error) {
			return activity.DoBatch(ctx, g2, invs, sender(&l2, ""), activity.WithGuardOptions(guard.WithKeyPath("id")))
		}
	})
	if err != nil || len(out) != 20 || l2.total() != 20 {
		t.Errorf("another batch with this progress: %d results, %d sends, %v; want all 20 run", len(out), l2.total(), err)
	}

	// Done items whose records are gone (another store) are not run
	// again: the activity fails, non-retryably.
	var l3 sends
	_, err, _ = batchEnv(t, details, in, func() func(context.Context, []Invoice) ([]Sent, error) {
		g3 := newGuard(t)
		return func(ctx context.Context, invs []Invoice) ([]Sent, error) {
			return activity.DoBatch(ctx, g3, invs, sender(&l3, ""), activity.WithGuardOptions(guard.WithKeyPath("id")))
		}
	})
	if ae := appError(t, err); ae.Type() != activity.ErrorTypeResultUnavailable || !ae.NonRetryable() {
		t.Errorf("resuming without the done items' records: %v; want non-retryable %s", err, activity.ErrorTypeResultUnavailable)
	}
	if n := l3.total(); n != 0 {
		t.Errorf("%d items ran although the batch could not complete", n)
	}
}

func TestBatchErrors(t *testing.T) {
	in := invoices(4)
	t.Run("throttled", func(t *testing.T) {
		g, err := guard.New(&throttleOnce{Store: memory.New(), throttle: 1})
		if err != nil {
			t.Fatal(err)
		}
		var l sends
		_, err, _ = batchEnv(t, nil, in, func() func(context.Context, []Invoice) ([]Sent, error) {
			return func(ctx context.Context, invs []Invoice) ([]Sent, error) {
				return activity.DoBatch(ctx, g, invs, sender(&l, ""))
			}
		})
		ae := appError(t, err)
		if ae.Type() != activity.ErrorTypeStoreThrottled || ae.NonRetryable() {
			t.Errorf("throttled batch: type %q, non-retryable %v; want retryable %s", ae.Type(), ae.NonRetryable(), activity.ErrorTypeStoreThrottled)
		}
		if d := ae.NextRetryDelay(); d < activity.ThrottleRetryDelay/2 || d > activity.ThrottleRetryDelay*3/2 {
			t.Errorf("next-retry delay %v, want %v ± 50%%", d, activity.ThrottleRetryDelay)
		}
		if l.total() != 0 {
			t.Errorf("%d items ran after a throttled lookup", l.total())
		}
	})
	t.Run("in progress", func(t *testing.T) {
		g := newGuard(t)
		if _, _, err := adapt.Obtain(context.Background(), g, "SendInvoices", in[2], guard.WithKeyPath("id"), guard.WithLease(30*time.Second)); err != nil {
			t.Fatal(err)
		}
		var l sends
		_, err, _ := batchEnv(t, nil, in, func() func(context.Context, []Invoice) ([]Sent, error) {
			return func(ctx context.Context, invs []Invoice) ([]Sent, error) {
				return activity.DoBatch(ctx, g, invs, sender(&l, ""), activity.WithGuardOptions(guard.WithKeyPath("id")), activity.WithBatchOptions(guard.WithConcurrency(1)))
			}
		})
		ae := appError(t, err)
		if ae.Type() != activity.ErrorTypeInProgress || ae.NonRetryable() || ae.NextRetryDelay() <= 0 {
			t.Errorf("item held elsewhere: %v (type %q, delay %v); want retryable %s with a delay", err, ae.Type(), ae.NextRetryDelay(), activity.ErrorTypeInProgress)
		}
		if l.total() != 2 {
			t.Errorf("%d items ran, want the 2 before the held one", l.total())
		}
	})
	t.Run("execution scope refused", func(t *testing.T) {
		_, err, _ := batchEnv(t, nil, in, func() func(context.Context, []Invoice) ([]Sent, error) {
			return func(ctx context.Context, invs []Invoice) ([]Sent, error) {
				return activity.DoBatch(ctx, newGuard(t), invs, sender(&sends{}, ""), activity.WithExecutionScope())
			}
		})
		if ae := appError(t, err); ae.Type() != activity.ErrorTypeInvalidOption || !ae.NonRetryable() {
			t.Errorf("WithExecutionScope: %v; want non-retryable %s", err, activity.ErrorTypeInvalidOption)
		}
	})
}

// Outside an activity DoBatch is a plain batch guard.
func TestBatchOutsideActivity(t *testing.T) {
	g := newGuard(t)
	in := invoices(10)
	var l sends
	for range 2 {
		out, err := activity.DoBatch(context.Background(), g, in, sender(&l, ""), activity.WithGuardOptions(guard.WithKeyPath("id")))
		if err != nil || len(out) != 10 {
			t.Fatalf("DoBatch = %d results, %v", len(out), err)
		}
		ids := make([]string, len(out))
		for i, s := range out {
			ids[i] = s.ID
		}
		if !sort.StringsAreSorted(ids) || ids[0] != "inv-001" {
			t.Errorf("results out of order: %v", ids)
		}
	}
	if l.total() != 10 {
		t.Errorf("%d sends over two runs, want 10", l.total())
	}
}

// A batch item whose result the result filter refuses is not done: its
// record was released, so the heartbeat progress does not count it, and
// Temporal's retry runs it again instead of failing it for good with
// IdempotencyResultUnavailable.
func TestBatchFilteredItemRunsAgainOnRetry(t *testing.T) {
	c := temporaltest.Client(t, client.Options{})
	g := newGuard(t)
	var l sends
	pending := func(v any) bool { // inv-001's first answer is "pending": not kept
		s, ok := v.(Sent)
		return !ok || s.ID != "inv-001" || s.Attempt != 1
	}
	var mu sync.Mutex
	resumedAt := map[int32]int{} // protected by mu
	sendInvoices := func(ctx context.Context, invs []Invoice) ([]Sent, error) {
		mu.Lock()
		resumedAt[tactivity.GetInfo(ctx).Attempt] = progressDone(ctx)
		mu.Unlock()
		return activity.DoBatch(ctx, g, invs, sender(&l, "inv-002"),
			activity.WithGuardOptions(guard.WithKeyPath("id")),
			activity.WithGuardOptions(guard.WithResultFilter(pending)),
			activity.WithBatchOptions(guard.WithConcurrency(1)))
	}
	tq := temporaltest.Name(t, "tq")
	temporaltest.Worker(t, c, tq, worker.Options{}, func(r worker.Registry) {
		r.RegisterWorkflow(batchWorkflow)
		r.RegisterActivityWithOptions(sendInvoices, tactivity.RegisterOptions{Name: "SendInvoices"})
	})
	var got []Sent
	if err := temporaltest.Run(t, c, tq, temporaltest.Name(t, "wf"), time.Minute, &got, batchWorkflow,
		batchParams{Invoices: invoices(3), MaxAttempts: 3}); err != nil {
		t.Fatalf("workflow failed: %v", err)
	}
	if len(got) != 3 || got[0].ID != "inv-001" || got[0].Attempt != 2 {
		t.Errorf("results %+v, want inv-001 sent again on attempt 2", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if resumedAt[2] > 0 {
		t.Errorf("attempt 2 resumed past %d items, want 0: the first item's result was filtered", resumedAt[2])
	}
	if s := l.get("inv-001"); !slices.Equal(s, []int32{1, 2}) {
		t.Errorf("inv-001 sent in attempts %v, want [1 2]", s)
	}
}
