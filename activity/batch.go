package activity

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	tactivity "go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/store"
)

// ThrottleRetryDelay is the next-retry delay [DoBatch] asks of Temporal,
// with ±50% jitter, when the store throttled the batch: long enough for a
// DynamoDB table to recover capacity, and spread so that many throttled
// activities do not come back at once. [WithMaxRetryDelay] caps it.
const ThrottleRetryDelay = 5 * time.Second

// DoBatch runs fn once per item of items inside a Temporal activity, each
// item guarded by its own idempotency record (guard.DoBatch), and returns
// the results in item order. Call it from the activity that receives the
// slice:
//
//	func SendInvoices(ctx context.Context, invoices []Invoice) ([]Receipt, error) {
//		return activity.DoBatch(ctx, g, invoices, sendInvoice,
//			activity.WithGuardOptions(guard.WithKeyPath("invoice_id")))
//	}
//
// Items whose records completed earlier (in an earlier attempt, or through
// other calls with the same scope and key) are replayed in bulk without
// running; the others run at most adapt.DefaultConcurrency at a time
// (guard.WithConcurrency through [WithBatchOptions] changes it).
//
// DoBatch records its progress in the activity's heartbeat details: the
// number of leading items that have completed. When an item fails, DoBatch
// starts no more items, lets the running ones finish, records the progress
// and returns the first failed item's error, so Temporal retries the
// activity; the retry reads the progress and skips straight to the
// remaining items, replaying the done items' stored results with one bulk
// read for the final, ordered result. Done items are never run again: one
// whose record is gone by then (past its TTL and deleted) fails with
// IdempotencyResultUnavailable, so give the records a TTL
// (guard.WithTTL) longer than the activity's retries may take. Progress is
// a hint, checked against a fingerprint of the items; the records are what
// keep items from running twice, so an attempt that crashed before
// heartbeating loses no correctness, only the skip. An item whose result
// the result filter refused (guard.WithResultFilter) kept no record and is
// not done: the retry runs it again. DoBatch owns the
// activity's heartbeat details, and heartbeats at least every half
// heartbeat timeout while items run; fn should not record heartbeats of its
// own.
//
// Errors are Temporal errors, as [TemporalError] makes them, with the
// failed item's index in the message of guard errors; the activity's own
// errors are returned as fn returned them. A store that throttles the
// batch's lookup or claims gives a retryable IdempotencyStoreThrottled
// error whose next-retry delay is [ThrottleRetryDelay], jittered. Return
// per-item business outcomes that must not fail the batch (a bounced
// address) as values in Out, not as errors.
//
// Keys: each item's key is derived from the item, within the activity
// type's scope: all of it, the part guard.WithKeyPath selects, or what a
// guard.WithItemKey function ([WithBatchOptions]) returns. [WithExecutionScope] cannot key items
// (it names the whole activity execution) and is refused; a key the
// workflow stamped for the activity is ignored for the same reason.
// [WithDataConverter], [WithStoredFailures], [WithMaxRetryDelay] and
// [WithGuardOptions] apply as for [Wrap]. adapt.WithResume,
// guard.WithStopOnError and adapt.WithItemDone are set by DoBatch.
//
// Outside an activity (in a unit test with a plain context) DoBatch works
// without heartbeats, under the scope of fn's name.
func DoBatch[In, Out any](ctx context.Context, g *guard.Guard, items []In, fn func(context.Context, In) (Out, error), opts ...Option) ([]Out, error) {
	if g == nil {
		return nil, temporal.NewNonRetryableApplicationError("idemguard/activity: DoBatch: nil guard", ErrorTypeInvalidOption, nil)
	}
	cfg := newConfig(opts)
	if cfg.executionScope {
		return nil, temporal.NewNonRetryableApplicationError(
			"idemguard/activity: DoBatch: WithExecutionScope names the whole activity execution and cannot key its items; key them by content (WithKeyPath, guard.WithItemKey)",
			ErrorTypeInvalidOption, nil)
	}
	if err := cfg.validate(g); err != nil {
		return nil, TemporalError(err)
	}
	r := &runner{g: g, cfg: cfg, name: Name(fn)}
	cl := r.prepare(ctx, PayloadCodec{DataConverter: activityConverter(ctx, cfg.dc)}, false)

	p := newProgress(ctx, batchFingerprint(cl.scope, items), len(items))
	bopts := append([]guard.BatchOption(nil), cfg.batchOpts...)
	for _, o := range cl.opts {
		bopts = append(bopts, adapt.Lift(o))
	}
	bopts = append(bopts, adapt.WithResume(p.mark), guard.WithStopOnError(), adapt.WithItemDone(p.itemDone))
	// Each item runs as a guarded call: a guarded function it calls is a
	// call of its own, not a claim of the item's key. The heartbeats stop
	// when DoBatch returns, or re-panics an item's panic.
	res := func() []guard.ItemResult[Out] {
		defer p.keepAlive()()
		return guard.DoBatch(ctx, g, cl.scope, items, func(ctx context.Context, in In) (Out, error) {
			return fn(withCall(ctx, false), in)
		}, bopts...)
	}()

	var failed, stopped int
	first := -1
	for i, it := range res {
		switch {
		case it.Err == nil:
		case errors.Is(it.Err, guard.ErrBatchStopped):
			stopped++
		default:
			failed++
			if first < 0 {
				first = i
			}
		}
	}
	if first < 0 {
		out := make([]Out, len(res))
		for i, it := range res {
			out[i] = it.Value
		}
		return out, nil
	}
	err := res[first].Err
	if tactivity.IsActivity(ctx) {
		tactivity.GetLogger(ctx).Warn("idemguard: batch item failed; the activity fails so that Temporal retries it from the recorded progress",
			"item", first, "items", len(items), "failed", failed, "not_started", stopped, "progress", p.done(), "error", err)
	}
	return nil, batchError(err, first, len(items), cfg.maxRetryDelay, g.ClockSkew())
}

// batchError turns the error of item i of n into the activity's error;
// skew is the guard's clock-skew tolerance.
func batchError(err error, i, n int, maxDelay, skew time.Duration) error {
	if errors.Is(err, store.ErrThrottled) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		return temporal.NewApplicationErrorWithOptions(
			fmt.Sprintf("batch item at index %d (of %d): %v", i, n, err), ErrorTypeStoreThrottled,
			temporal.ApplicationErrorOptions{NextRetryDelay: throttleDelay(maxDelay), Cause: err})
	}
	if te := temporalError(err, maxDelay, skew); te == err {
		return err // the activity's own error, or a context error
	}
	return temporalError(fmt.Errorf("batch item at index %d (of %d): %w", i, n, err), maxDelay, skew)
}

// throttleDelay is ThrottleRetryDelay with ±50% jitter, capped by maxDelay
// if positive.
func throttleDelay(maxDelay time.Duration) time.Duration {
	d := ThrottleRetryDelay/2 + rand.N(ThrottleRetryDelay)
	if maxDelay > 0 {
		d = min(d, maxDelay)
	}
	return d
}

// batchFingerprint identifies a batch's items, so that progress recorded
// for one list of items is never applied to another.
func batchFingerprint[In any](scope string, items []In) string {
	h := sha256.New()
	h.Write([]byte(scope))
	h.Write([]byte{0})
	if err := json.NewEncoder(h).Encode(items); err != nil {
		fmt.Fprintf(h, "unencodable %T × %d", items, len(items))
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// batchProgress is DoBatch's heartbeat details.
type batchProgress struct {
	// Batch is the fingerprint of the items.
	Batch string `json:"idemguard_batch"`
	// Items is how many items the batch has.
	Items int `json:"items"`
	// Done is how many leading items have completed.
	Done int `json:"done"`
}

// progress tracks the leading items that have completed and records them
// in heartbeats.
type progress struct {
	ctx       context.Context
	fp        string
	heartbeat bool          // running in an activity
	every     time.Duration // keep-alive interval; 0: none

	mu   sync.Mutex
	ok   []bool // protected by mu: items that completed
	mark int    // protected by mu: items [0, mark) completed
	sent int    // protected by mu: the mark last recorded
}

// newProgress reads the progress an earlier attempt recorded for the batch
// with fingerprint fp and n items.
func newProgress(ctx context.Context, fp string, n int) *progress {
	p := &progress{ctx: ctx, fp: fp, ok: make([]bool, n)}
	if !tactivity.IsActivity(ctx) {
		return p
	}
	p.heartbeat = true
	if hb := tactivity.GetInfo(ctx).HeartbeatTimeout; hb > 0 {
		p.every = hb / 2
	}
	if tactivity.HasHeartbeatDetails(ctx) {
		var last batchProgress
		if err := tactivity.GetHeartbeatDetails(ctx, &last); err == nil && last.Batch == fp && last.Items == n && last.Done > 0 && last.Done <= n {
			p.mark, p.sent = last.Done, last.Done
			for i := range last.Done {
				p.ok[i] = true
			}
		}
	}
	return p
}

// itemDone is the batch's adapt.WithItemDone function. Only an item with a
// recorded outcome (or one that keeps none, run unguarded) is done: one
// whose result the result filter refused, or that failed, runs again on
// the next attempt.
func (p *progress) itemDone(i int, outcome guard.Outcome, err error) {
	switch {
	case err != nil:
		return
	case outcome == guard.OutcomeExecuted, outcome == guard.OutcomeReplayed,
		outcome == guard.OutcomeShared, outcome == guard.OutcomeUnguarded:
	default:
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ok[i] = true
	for p.mark < len(p.ok) && p.ok[p.mark] {
		p.mark++
	}
	if p.mark > p.sent {
		p.record()
	}
}

// record heartbeats the current mark; p.mu is held.
func (p *progress) record() {
	p.sent = p.mark
	if p.heartbeat {
		tactivity.RecordHeartbeat(p.ctx, batchProgress{Batch: p.fp, Items: len(p.ok), Done: p.mark})
	}
}

// done returns the current mark.
func (p *progress) done() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mark
}

// keepAlive heartbeats the current progress every half heartbeat timeout
// until the returned function is called, so that an item running longer
// than the heartbeat timeout does not time the activity out.
func (p *progress) keepAlive() (stop func()) {
	if !p.heartbeat || p.every <= 0 {
		return func() {}
	}
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(p.every)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				p.mu.Lock()
				p.record()
				p.mu.Unlock()
			case <-quit:
				return
			case <-p.ctx.Done():
				return
			}
		}
	}()
	return func() { close(quit); wg.Wait() }
}
