package activity_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	tactivity "go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"

	"github.com/idemguard/idemguard/activity"
	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/testing/temporaltest"
)

// Acceptance 1: the first attempt performs the side effect, the guard
// records it, and then the attempt fails before Temporal hears of its
// success (as when the worker dies or the response is lost). Temporal
// retries; the retry replays; the side effect happened once and the
// workflow gets the first attempt's result.
func TestRetryAfterSideEffectReplays(t *testing.T) {
	c := temporaltest.Client(t, client.Options{})
	for _, tc := range []struct {
		name string
		opts []activity.Option
	}{
		{"input key", nil},
		{"execution scope", []activity.Option{activity.WithExecutionScope()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGuard(t)
			var effects ledger
			guarded := activity.Must(activity.Wrap(g, func(ctx context.Context, o Order) (Receipt, error) {
				effects.add(o.OrderID)
				return newReceipt(ctx, o), nil
			}, tc.opts...))
			var mu sync.Mutex
			var first Receipt // protected by mu
			lossy := func(ctx context.Context, o Order) (Receipt, error) {
				r, err := guarded(ctx, o)
				if err == nil && tactivity.GetInfo(ctx).Attempt == 1 {
					mu.Lock()
					first = r
					mu.Unlock()
					return Receipt{}, errors.New("connection reset before the result reached Temporal")
				}
				return r, err
			}
			tq := temporaltest.Name(t, "tq")
			temporaltest.Worker(t, c, tq, worker.Options{}, func(r worker.Registry) {
				r.RegisterWorkflow(chargeWorkflow)
				r.RegisterActivityWithOptions(lossy, tactivity.RegisterOptions{Name: "Charge"})
			})

			id := temporaltest.Name(t, "wf")
			var got Receipt
			if err := temporaltest.Run(t, c, tq, id, time.Minute, &got, chargeWorkflow, chargeParams{Order: Order{OrderID: "o-1", Amount: 42}}); err != nil {
				t.Fatalf("workflow failed: %v", err)
			}
			if n := effects.count("o-1"); n != 1 {
				t.Errorf("side effects = %d, want 1", n)
			}
			mu.Lock()
			defer mu.Unlock()
			if got != first {
				t.Errorf("workflow result = %+v, want the first attempt's %+v", got, first)
			}
			if got.Attempt != 1 {
				t.Errorf("result was made by attempt %d, want 1", got.Attempt)
			}
			h := temporaltest.History(t, c, id, "")
			for _, e := range h.Events {
				if a := e.GetActivityTaskStartedEventAttributes(); a != nil && a.Attempt != 2 {
					t.Errorf("the activity completed on attempt %d, want 2 (a retry)", a.Attempt)
				}
			}
		})
	}
}

// Acceptance 2: two workflows with the same business key (a JMESPath on the
// input) share one side effect and one result; keyed by execution scope,
// they are two executions.
func TestBusinessKeyAcrossWorkflows(t *testing.T) {
	c := temporaltest.Client(t, client.Options{})
	for _, tc := range []struct {
		name        string
		opts        []activity.Option
		wantEffects int
	}{
		{"jmespath", []activity.Option{activity.WithGuardOptions(guard.WithKeyPath("order_id"))}, 1},
		{"execution-scope", []activity.Option{activity.WithExecutionScope()}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGuard(t)
			var effects ledger
			charge := func(ctx context.Context, o Order) (Receipt, error) {
				effects.add(o.OrderID)
				time.Sleep(300 * time.Millisecond) // let the duplicate arrive while this runs
				return newReceipt(ctx, o), nil
			}
			opts := append([]activity.Option{activity.WithMaxRetryDelay(time.Second)}, tc.opts...)
			tq := temporaltest.Name(t, "tq")
			temporaltest.Worker(t, c, tq, worker.Options{}, func(r worker.Registry) {
				r.RegisterWorkflow(chargeWorkflow)
				r.RegisterActivityWithOptions(activity.Must(activity.Wrap(g, charge, opts...)), tactivity.RegisterOptions{Name: "Charge"})
			})

			// The notes differ, so the whole inputs differ; the order ID is
			// the business key.
			runs := make([]client.WorkflowRun, 2)
			for i, note := range []string{"from checkout", "from the retry button"} {
				runs[i] = temporaltest.Start(t, c, client.StartWorkflowOptions{ID: temporaltest.Name(t, "wf"), TaskQueue: tq},
					chargeWorkflow, chargeParams{Order: Order{OrderID: "o-7", Amount: 10, Note: note}})
			}
			var got [2]Receipt
			for i, run := range runs {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				err := run.Get(ctx, &got[i])
				cancel()
				if err != nil {
					t.Fatalf("workflow %d: %v", i, err)
				}
			}
			if n := effects.count("o-7"); n != tc.wantEffects {
				t.Errorf("side effects = %d, want %d", n, tc.wantEffects)
			}
			if same := got[0] == got[1]; same != (tc.wantEffects == 1) {
				t.Errorf("results %+v and %+v: equal = %v, want %v", got[0], got[1], same, tc.wantEffects == 1)
			}
		})
	}
}

// payments is an activity struct registered the ordinary way; its code
// knows nothing of idemguard.
type payments struct {
	effects ledger
	refunds ledger
}

func (p *payments) Charge(ctx context.Context, o Order) (Receipt, error) {
	p.effects.add(o.OrderID)
	return newReceipt(ctx, o), nil
}

func (p *payments) Refund(ctx context.Context, o Order) (Receipt, error) {
	p.refunds.add(o.OrderID)
	return newReceipt(ctx, o), nil
}

// Acceptance 4: an unmodified activity, registered normally, is guarded
// by the worker interceptor; an activity without a policy is not.
func TestInterceptorGuardsUnmodifiedActivity(t *testing.T) {
	c := temporaltest.Client(t, client.Options{})
	g := newGuard(t)
	p := &payments{}
	tq := temporaltest.Name(t, "tq")
	temporaltest.Worker(t, c, tq, worker.Options{Interceptors: []interceptor.WorkerInterceptor{
		activity.Must(activity.Interceptor(g, activity.Policy{Activity: "Charge", Options: []activity.Option{activity.WithGuardOptions(guard.WithKeyPath("order_id"))}})),
	}}, func(r worker.Registry) {
		r.RegisterWorkflow(chargeWorkflow)
		r.RegisterActivity(p)
	})

	var charges, refunds [2]Receipt
	for i := range 2 {
		o := Order{OrderID: "o-9", Amount: 5, Note: "duplicate " + string(rune('A'+i))}
		if err := temporaltest.Run(t, c, tq, temporaltest.Name(t, "wf"), time.Minute, &charges[i], chargeWorkflow, chargeParams{Order: o}); err != nil {
			t.Fatalf("charge workflow %d: %v", i, err)
		}
		if err := temporaltest.Run(t, c, tq, temporaltest.Name(t, "wf"), time.Minute, &refunds[i], chargeWorkflow, chargeParams{Order: o, Activity: "Refund"}); err != nil {
			t.Fatalf("refund workflow %d: %v", i, err)
		}
	}
	if n := p.effects.count("o-9"); n != 1 {
		t.Errorf("guarded charges ran %d times, want 1", n)
	}
	if charges[0] != charges[1] {
		t.Errorf("charge results differ: %+v, %+v", charges[0], charges[1])
	}
	if n := p.refunds.count("o-9"); n != 2 {
		t.Errorf("unguarded refunds ran %d times, want 2", n)
	}
}

// Acceptance 7 on the server: a payload mismatch fails the activity at once,
// non-retryable, with the documented type, however many attempts the retry
// policy allows.
func TestPayloadMismatchStopsRetries(t *testing.T) {
	c := temporaltest.Client(t, client.Options{})
	g := newGuard(t)
	var effects ledger
	charge := func(ctx context.Context, o Order) (Receipt, error) {
		effects.add(o.OrderID)
		return newReceipt(ctx, o), nil
	}
	tq := temporaltest.Name(t, "tq")
	temporaltest.Worker(t, c, tq, worker.Options{}, func(r worker.Registry) {
		r.RegisterWorkflow(chargeWorkflow)
		r.RegisterActivityWithOptions(activity.Must(activity.Wrap(g, charge,
			activity.WithGuardOptions(guard.WithKeyPath("order_id")),
			activity.WithGuardOptions(guard.WithPayloadValidation("amount")))),
			tactivity.RegisterOptions{Name: "Charge"})
	})

	if err := temporaltest.Run(t, c, tq, temporaltest.Name(t, "wf"), time.Minute, nil, chargeWorkflow,
		chargeParams{Order: Order{OrderID: "o-3", Amount: 10}}); err != nil {
		t.Fatalf("first workflow: %v", err)
	}
	id := temporaltest.Name(t, "wf")
	err := temporaltest.Run(t, c, tq, id, time.Minute, nil, chargeWorkflow,
		chargeParams{Order: Order{OrderID: "o-3", Amount: 99}, MaxAttempts: 5})
	if err == nil {
		t.Fatal("second workflow with the same key and another amount succeeded")
	}
	ae := appError(t, err)
	if ae.Type() != activity.ErrorTypePayloadMismatch || !ae.NonRetryable() {
		t.Errorf("error type %q, non-retryable %v; want %q, true", ae.Type(), ae.NonRetryable(), activity.ErrorTypePayloadMismatch)
	}
	h := temporaltest.History(t, c, id, "")
	for _, e := range h.Events {
		if a := e.GetActivityTaskStartedEventAttributes(); a != nil && a.Attempt != 1 {
			t.Errorf("the activity ran %d attempts, want 1", a.Attempt)
		}
	}
	if n := temporaltest.Count(h, enumspb.EVENT_TYPE_ACTIVITY_TASK_FAILED); n != 1 {
		t.Errorf("%d ActivityTaskFailed events, want 1", n)
	}
	if n := effects.count("o-3"); n != 1 {
		t.Errorf("side effects = %d, want 1", n)
	}
}

// A heartbeating activity that runs for several of its leases (its lease is
// its heartbeat timeout) keeps its key: the guard extends the lease while it
// runs, so a duplicate waits and replays instead of taking over, and the
// heartbeats reach Temporal as before.
func TestLongHeartbeatingActivityKeepsItsKey(t *testing.T) {
	c := temporaltest.Client(t, client.Options{})
	g := newGuard(t)
	var effects ledger
	var heartbeats atomic.Int32
	charge := func(ctx context.Context, o Order) (Receipt, error) {
		effects.add(o.OrderID)
		for range 14 { // 3.5 s, with a 1 s heartbeat timeout
			tactivity.RecordHeartbeat(ctx, heartbeats.Add(1))
			time.Sleep(250 * time.Millisecond)
		}
		return newReceipt(ctx, o), nil
	}
	tq := temporaltest.Name(t, "tq")
	temporaltest.Worker(t, c, tq, worker.Options{}, func(r worker.Registry) {
		r.RegisterWorkflow(chargeWorkflow)
		r.RegisterActivityWithOptions(activity.Must(activity.Wrap(g, charge, activity.WithGuardOptions(guard.WithKeyPath("order_id")))), tactivity.RegisterOptions{Name: "Charge"})
	})
	p := chargeParams{Order: Order{OrderID: "o-long", Amount: 1}, HeartbeatTimeout: time.Second, StartToClose: time.Minute}
	first := temporaltest.Start(t, c, client.StartWorkflowOptions{ID: temporaltest.Name(t, "wf"), TaskQueue: tq}, chargeWorkflow, p)
	for deadline := time.Now().Add(30 * time.Second); effects.count("o-long") == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first activity never started")
		}
	}
	second := temporaltest.Start(t, c, client.StartWorkflowOptions{ID: temporaltest.Name(t, "wf"), TaskQueue: tq}, chargeWorkflow, p)
	var a, b Receipt
	if err := first.Get(t.Context(), &a); err != nil {
		t.Fatalf("first workflow: %v", err)
	}
	if err := second.Get(t.Context(), &b); err != nil {
		t.Fatalf("second workflow: %v", err)
	}
	if n := effects.count("o-long"); n != 1 || a != b {
		t.Errorf("%d side effects, results %+v and %+v; want 1 and equal results", n, a, b)
	}
	if heartbeats.Load() < 14 {
		t.Errorf("%d heartbeats, want 14", heartbeats.Load())
	}
}

// Issue 18's case on the server: a guarded activity of two guard.Steps
// whose second step fails on the first attempt. Temporal retries the
// activity; the retry replays the first step (its side effect does not run
// again, and its result is the first attempt's) and runs the second; the
// workflow completes. Without steps the first side effect runs twice,
// which shows the check can fail.
func TestStepsResumeAfterTemporalRetry(t *testing.T) {
	c := temporaltest.Client(t, client.Options{})
	for _, tc := range stepCases {
		t.Run(tc.name, func(t *testing.T) {
			g := newGuard(t)
			v := &invoice{plain: tc.plain, failFirst: true}
			var opts worker.Options
			fn := any(activity.Must(activity.Wrap(g, v.Send, activity.WithGuardOptions(guard.WithKeyPath("order_id")))))
			if tc.interceptor {
				fn = v.Send
				opts.Interceptors = []interceptor.WorkerInterceptor{activity.Must(activity.Interceptor(g,
					activity.Policy{Activity: "Charge", Options: []activity.Option{activity.WithGuardOptions(guard.WithKeyPath("order_id"))}}))}
			}
			tq := temporaltest.Name(t, "tq")
			temporaltest.Worker(t, c, tq, opts, func(r worker.Registry) {
				r.RegisterWorkflow(chargeWorkflow)
				r.RegisterActivityWithOptions(fn, tactivity.RegisterOptions{Name: "Charge"})
			})

			id := temporaltest.Name(t, "wf")
			var got Receipt
			if err := temporaltest.Run(t, c, tq, id, time.Minute, &got, chargeWorkflow,
				chargeParams{Order: Order{OrderID: "o-inv", Amount: 30}, MaxAttempts: 3}); err != nil {
				t.Fatalf("workflow failed: %v", err)
			}
			if n := v.rendered.Load(); n != tc.wantRendered {
				t.Errorf("the first step's side effect ran %d times, want %d", n, tc.wantRendered)
			}
			if n := v.emailed.Load(); n != 2 {
				t.Errorf("the second step ran %d times, want 2 (failed, then sent)", n)
			}
			if first := v.firstDoc(); (got.ChargeID == first) != (tc.wantRendered == 1) {
				t.Errorf("result %q, first rendering %q: equal = %v, want %v", got.ChargeID, first, got.ChargeID == first, tc.wantRendered == 1)
			}
			h := temporaltest.History(t, c, id, "")
			if n := temporaltest.Count(h, enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED); n != 1 {
				t.Errorf("%d ActivityTaskCompleted events, want 1", n)
			}
			for _, e := range h.Events {
				if a := e.GetActivityTaskStartedEventAttributes(); a != nil && a.Attempt != 2 {
					t.Errorf("the activity completed on attempt %d, want 2 (Temporal's retry)", a.Attempt)
				}
			}
		})
	}
}

// A first attempt that hangs (here on a call that honours its context but
// never answers) and stops heartbeating: Temporal times it out after the
// heartbeat timeout and retries, but the attempt's goroutine still runs,
// and the guard extends its lease while it does. So every retry gets
// IdempotencyInProgress, none takes over at the heartbeat timeout; at the
// hung attempt's start-to-close deadline its context ends, it returns, its
// claim is released, and the next retry runs the activity.
func TestHungAttemptHoldsItsKeyUntilItsDeadline(t *testing.T) {
	c := temporaltest.Client(t, client.Options{})
	g := newGuard(t)
	var mu sync.Mutex
	var started time.Time          // protected by mu: when attempt 1 started
	var ended time.Time            // protected by mu: when attempt 1 returned
	var ran []int32                // protected by mu: attempts whose body ran
	outcomes := map[int32]string{} // protected by mu: each attempt's error type
	charge := activity.Must(activity.Wrap(g, func(ctx context.Context, o Order) (Receipt, error) {
		a := tactivity.GetInfo(ctx).Attempt
		mu.Lock()
		ran = append(ran, a)
		if a == 1 {
			started = time.Now()
		}
		mu.Unlock()
		if a == 1 {
			<-ctx.Done() // hung: no answer, no heartbeat
			mu.Lock()
			ended = time.Now()
			mu.Unlock()
			return Receipt{}, ctx.Err()
		}
		return newReceipt(ctx, o), nil
	}, activity.WithGuardOptions(guard.WithKeyPath("order_id"))))
	observed := func(ctx context.Context, o Order) (Receipt, error) {
		r, err := charge(ctx, o)
		var ae *temporal.ApplicationError
		mu.Lock()
		if errors.As(err, &ae) {
			outcomes[tactivity.GetInfo(ctx).Attempt] = ae.Type()
		}
		mu.Unlock()
		return r, err
	}
	tq := temporaltest.Name(t, "tq")
	temporaltest.Worker(t, c, tq, worker.Options{}, func(r worker.Registry) {
		r.RegisterWorkflow(chargeWorkflow)
		r.RegisterActivityWithOptions(observed, tactivity.RegisterOptions{Name: "Charge"})
	})
	const startToClose = 5 * time.Second
	var got Receipt
	if err := temporaltest.Run(t, c, tq, temporaltest.Name(t, "wf"), time.Minute, &got, chargeWorkflow,
		chargeParams{Order: Order{OrderID: "o-hung", Amount: 1}, HeartbeatTimeout: time.Second, StartToClose: startToClose, MaxAttempts: 30}); err != nil {
		t.Fatalf("workflow: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(ran) != 2 || ran[0] != 1 || got.Attempt != ran[1] {
		t.Fatalf("the body ran in attempts %v and the result came from attempt %d; want the hung attempt 1 and the one that completed", ran, got.Attempt)
	}
	if ended.Sub(started) < startToClose-100*time.Millisecond {
		t.Errorf("the hung attempt returned after %v, want its start-to-close timeout %v", ended.Sub(started), startToClose)
	}
	for a := int32(2); a < got.Attempt; a++ {
		if outcomes[a] != activity.ErrorTypeInProgress {
			t.Errorf("attempt %d ended with %q, want %s while the hung attempt ran", a, outcomes[a], activity.ErrorTypeInProgress)
		}
	}
	if got.Attempt < 3 {
		t.Errorf("the activity completed on attempt %d, want a retry that first found the key in progress", got.Attempt)
	}
}
