package guard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/telemetry"
)

// DefaultConcurrency is how many items of a batch [DoBatch] runs at once
// unless [WithConcurrency] says otherwise.
const DefaultConcurrency = 8

// ErrBatchStopped is the error of a batch item that [DoBatch] did not start
// because an earlier item failed and the batch runs with
// [WithStopOnError]. The function did not run for the item; running the
// batch again is safe.
var ErrBatchStopped = errors.New("idemguard: batch stopped before this item ran")

// ItemResult is the outcome of one item of a batch run by [DoBatch]: what
// [Execute] would have returned for the item alone.
type ItemResult[T any] struct {
	// Value is the item's result: the function's, or the one stored by an
	// earlier call with the item's key.
	Value T
	// Outcome says how Value was obtained: executed, replayed (from the
	// bulk lookup, the cache, or the claim), shared (a duplicate of another
	// item in the batch, or of a concurrent call in this process) or
	// unguarded. It is zero when the item got no outcome; Err says why.
	Outcome Outcome
	// Err is the item's error: the function's, a guard error as [Do]
	// returns it, [ErrBatchStopped], or the context's error for an item
	// the batch did not start before its context ended.
	Err error
}

// DoBatch runs fn at most once per key for every input of a batch, as [Do]
// runs it for one, and returns each input's outcome, in input order. One
// item's failure does not affect the others' results.
//
// Each input's key is derived as Do derives it, within scope: from the
// whole input, the part [WithKeyPath] selects, or the selection a
// [WithItemKey] function returns. Then:
//
//  1. Items whose record completed earlier are replayed without running.
//     When the store implements [store.BatchGetter] they are found with one
//     bulk lookup, which the store splits into as few requests as its
//     limits allow (100 keys per DynamoDB BatchGetItem), and cost no
//     writes; the stored outcome is checked against the item's payload
//     ([WithPayloadValidation]) exactly as on a single call's replay.
//  2. The other items go through Do's path one by one, at most
//     [WithConcurrency] at a time (default [DefaultConcurrency]): claim,
//     run under a lease that is extended while fn runs, complete or
//     release. Each gets its own idemguard.execute span under the batch's
//     idemguard.batch span, and the same errors as a single call.
//     Without a BatchGetter (or if its lookup fails other than by
//     throttling) every item goes this way, which is correct but costs a
//     write per completed item.
//  3. Inputs with the same key in one batch run once: the first runs, the
//     others share its outcome ([OutcomeShared]); one whose payload hash
//     differs gets [ErrPayloadMismatch].
//
// If the bulk lookup is throttled ([store.ErrThrottled]) after the store's
// own retries, the items it did not answer fail with a [*StoreError]
// matching it, without claims being sent to a store that is already
// refusing requests: try the batch again later.
//
// Options are those of Do plus the batch options [WithConcurrency],
// [WithItemKey], [WithStopOnError], [WithResume] and [WithItemDone].
// [WithKey] is refused, since it would give every item one key. An invalid
// option is reported as every item's error. If fn panics, the items
// running at that moment finish, no other item starts, and the panic
// continues in DoBatch's caller; the panicking item's record is released.
func DoBatch[In, Out any](ctx context.Context, g *Guard, scope string, inputs []In, fn func(context.Context, In) (Out, error), opts ...Option) []ItemResult[Out] {
	res := make([]ItemResult[Out], len(inputs))
	if len(inputs) == 0 {
		return res
	}
	c, b, err := g.batchWith(scope, reflect.TypeFor[In](), opts)
	if err != nil {
		for i := range res {
			res[i].Err = err
		}
		return res
	}
	r := &batchRun[In, Out]{g: g, c: c, b: b, scope: scope, inputs: inputs, fn: fn, res: res}
	r.run(ctx)
	return res
}

// batchConfig holds the batch options.
type batchConfig struct {
	concurrency int
	itemKey     func(any) any // nil: keys come from the inputs
	itemKeyType reflect.Type  // the input type itemKey takes
	stopOnError bool
	resume      int
	onItem      func(index int, outcome Outcome, err error)
	err         error // the first invalid option
}

func (b *batchConfig) fail(err error) {
	if b.err == nil {
		b.err = err
	}
}

// batchOption is an [Option] that only [DoBatch] reads; everything else
// ignores it.
type batchOption func(*batchConfig)

func (batchOption) apply(*config) {}

// WithConcurrency sets how many items of a batch run at once (default
// [DefaultConcurrency]); n must be at least 1. It bounds the functions
// running and their claims, not the bulk lookup. Only [DoBatch] reads it.
func WithConcurrency(n int) Option {
	return batchOption(func(b *batchConfig) {
		if n < 1 {
			b.fail(invalidOption("concurrency must be at least 1, got %d", n))
			return
		}
		b.concurrency = n
	})
}

// WithItemKey derives each batch item's key from what key returns for it
// instead of from the item itself; the key path ([WithKeyPath]) is not
// applied to it, while payload validation still reads the item. It is the
// batch form of [WithKey]. In must be the batch's input type. Only
// [DoBatch] reads it.
func WithItemKey[In any](key func(In) any) Option {
	return batchOption(func(b *batchConfig) {
		if key == nil {
			b.fail(invalidOption("nil item key function"))
			return
		}
		b.itemKeyType = reflect.TypeFor[In]()
		b.itemKey = func(v any) any {
			in, _ := v.(In) // the type is checked once per batch
			return key(in)
		}
	})
}

// WithStopOnError makes a batch start no more items once one has failed:
// items running at that moment finish, and those not started get
// [ErrBatchStopped]. Items finish in no fixed order, so which items ran
// depends on timing. Use it when the whole batch will be retried anyway,
// as a Temporal activity is. Only [DoBatch] reads it.
func WithStopOnError() Option {
	return batchOption(func(b *batchConfig) { b.stopOnError = true })
}

// WithResume tells a batch that its first done items completed in an
// earlier attempt of the same batch, as recorded by the caller (a
// checkpoint, Temporal heartbeat details). Those items are never run again:
// their stored outcomes are replayed, even past their TTL, and one whose
// record is gone (or held by another claim) fails with
// [ErrResultUnavailable]. A duplicate of such an item later in the batch is
// treated the same way. Items run unguarded (an empty key selection) keep
// no record and run again. Only [DoBatch] reads it.
func WithResume(done int) Option {
	return batchOption(func(b *batchConfig) {
		if done < 0 {
			b.fail(invalidOption("resume point must not be negative, got %d", done))
			return
		}
		b.resume = done
	})
}

// WithItemDone sets a function that a batch calls once for each item as
// soon as the item has its outcome, with the item's index in the inputs and
// its outcome and error (see [ItemResult]). Calls come in the order items
// finish, not in input order, and never two at once; a slow function slows
// the batch. Use it to report progress. Only [DoBatch] reads it.
func WithItemDone(fn func(index int, outcome Outcome, err error)) Option {
	return batchOption(func(b *batchConfig) { b.onItem = fn })
}

// batchWith returns the call config and batch config of a batch of inputs
// of type in.
func (g *Guard) batchWith(scope string, in reflect.Type, opts []Option) (*config, *batchConfig, error) {
	b := &batchConfig{concurrency: DefaultConcurrency}
	rest := make([]Option, 0, len(opts))
	for _, o := range opts {
		if bo, ok := o.(batchOption); ok {
			bo(b)
			continue
		}
		rest = append(rest, o)
	}
	if b.err != nil {
		return nil, nil, b.err
	}
	c, err := g.with(scope, rest)
	if err != nil {
		return nil, nil, err
	}
	if c.hasKey {
		return nil, nil, invalidOption("WithKey would give every item of a batch the same key; use WithItemKey")
	}
	if b.itemKey != nil && b.itemKeyType != in {
		return nil, nil, invalidOption("WithItemKey takes %v, but the batch's inputs are %v", b.itemKeyType, in)
	}
	return c, b, nil
}

// batchRun is one call of DoBatch.
type batchRun[In, Out any] struct {
	g      *Guard
	c      *config
	b      *batchConfig
	scope  string
	inputs []In
	fn     func(context.Context, In) (Out, error)
	res    []ItemResult[Out] // each element written once, by the item's goroutine, before wg.Wait returns

	items []batchItem // derived keys, by input index

	mu       sync.Mutex     // protects the fields below and serialises onItem
	counts   map[string]int // items by telemetry outcome label
	direct   map[string]int // those not counted by an execute call
	failed   int
	stopped  bool
	panicked any
	hasPanic bool
}

// batchItem is an input's key, bound before anything runs.
type batchItem struct {
	c *config // the batch's config, or a copy carrying the item's key
	d derived
}

// batchUnit is the items of a batch that share a key.
type batchUnit struct {
	key   string
	idx   []int // in input order
	known bool  // an item lies before the resume point: the key completed earlier
}

// notRun labels items the batch did not start, on the batch span.
const notRun = telemetry.OutcomeNotRun

func (r *batchRun[In, Out]) run(ctx context.Context) {
	g := r.g
	r.counts, r.direct = make(map[string]int), make(map[string]int)
	ctx, span := g.tel.Tracer.Start(ctx, telemetry.SpanBatch)
	var lookedUp, found int
	defer func() { r.end(ctx, span, lookedUp, found) }()

	if g.disabled {
		tasks := make([]batchTask, len(r.inputs))
		for i := range r.inputs {
			tasks[i] = batchTask{idx: []int{i}, run: func(ctx context.Context) { r.execute(ctx, i, r.c) }}
		}
		r.pool(ctx, tasks)
		return
	}

	// Bind every key before anything runs: fn may change its input.
	r.items = make([]batchItem, len(r.inputs))
	var units []*batchUnit
	byKey := make(map[string]*batchUnit)
	var tasks []batchTask // in input order of their first item
	for i, in := range r.inputs {
		c := r.c
		if r.b.itemKey != nil {
			ci := *r.c
			ci.explicitKey, ci.hasKey = r.b.itemKey(any(in)), true
			c = &ci
		}
		d, err := c.derive(r.scope, in)
		r.items[i] = batchItem{c: c, d: d}
		switch {
		case err != nil:
			r.finish(i, ItemResult[Out]{Err: err}, false)
		case d.key == "":
			// Unguarded, or ErrKeyMissing: execute decides and says so.
			tasks = append(tasks, batchTask{idx: []int{i}, run: func(ctx context.Context) { r.execute(ctx, i, c) }})
		default:
			u := byKey[d.key]
			if u == nil {
				u = &batchUnit{key: d.key}
				byKey[d.key] = u
				units = append(units, u)
				tasks = append(tasks, batchTask{unit: u}) // filled in below if it needs one
			}
			u.idx = append(u.idx, i)
			u.known = u.known || i < r.b.resume
		}
	}

	// Settle what the local cache holds, then look the rest up in bulk.
	now := r.c.clock.Now()
	var pending []*batchUnit
	for _, u := range units {
		if g.cache != nil {
			if rec, ok := g.cache.Get(u.key); ok && r.settle(ctx, u, rec, now) {
				continue
			}
		}
		pending = append(pending, u)
	}
	trusted := false // an absent record means there is none
	if bg, ok := g.store.(store.BatchGetter); ok && len(pending) > 0 {
		keys := make([]string, len(pending))
		for i, u := range pending {
			keys[i] = u.key
		}
		start := time.Now()
		recs, err := bg.GetMany(ctx, keys)
		g.timeStore(ctx, "get_many", start)
		now = r.c.clock.Now()
		switch {
		case errors.Is(err, store.ErrSkip):
		case err != nil && (ctx.Err() != nil || isContextError(err) || errors.Is(err, store.ErrThrottled)):
			// Try again later: the caller has gone, or the store is
			// refusing requests and claims would only add to them.
			lookedUp, found = len(keys), len(recs)
			recordError(span, err)
			for _, u := range pending {
				if rec := recs[u.key]; rec != nil && r.settle(ctx, u, rec, now) {
					continue
				}
				uerr := ctx.Err()
				if uerr == nil {
					uerr = &StoreError{Op: "get_many", Key: u.key, Err: err}
				}
				r.finishUnit(u, uerr)
			}
			pending = nil
		default:
			lookedUp, found = len(keys), len(recs)
			trusted = err == nil
			if err != nil {
				// One corrupt item, say: the claims find out per key.
				g.log(ctx, slog.LevelWarn, "idemguard: batch lookup failed; claiming the items it did not return one by one", r.scope+"#", slog.Any("error", err))
				if span.IsRecording() {
					span.AddEvent("idemguard.batch.lookup_failed", trace.WithAttributes(telemetry.ErrorTypeKey.String(errorType(err))))
				}
			}
			rest := pending[:0]
			for _, u := range pending {
				if rec := recs[u.key]; (rec != nil || trusted) && r.settle(ctx, u, rec, now) {
					continue
				}
				rest = append(rest, u)
			}
			pending = rest
		}
	}
	// What is left needs a claim, or, for a unit resumed past without an
	// answer from the lookup, a read of its record.
	need := make(map[*batchUnit]bool, len(pending))
	for _, u := range pending {
		need[u] = true
	}
	out := tasks[:0]
	for _, t := range tasks {
		switch u := t.unit; {
		case u == nil:
			out = append(out, t)
		case !need[u]:
		case u.known:
			out = append(out, batchTask{unit: u, idx: u.idx, run: func(ctx context.Context) { r.read(ctx, u) }})
		default:
			out = append(out, batchTask{unit: u, idx: u.idx, run: func(ctx context.Context) { r.claimUnit(ctx, u) }})
		}
	}
	r.pool(ctx, out)
}

// batchTask is work for the pool: one unit's claims or read, or one
// unkeyed item.
type batchTask struct {
	unit *batchUnit
	idx  []int // the items it settles
	run  func(context.Context)
}

// settle replays rec to every item of u if it holds an outcome u may
// replay, or fails u's items if u was resumed past and rec cannot give its
// outcome; it reports false, settling nothing, when u needs a claim.
func (r *batchRun[In, Out]) settle(ctx context.Context, u *batchUnit, rec *store.Record, now time.Time) bool {
	if rec != nil && rec.Status == store.StatusCompleted && (u.known || rec.Live(now)) {
		if rec.Live(now) {
			r.g.remember(rec)
		}
		for _, i := range u.idx {
			it := r.items[i]
			v, out, err := replay[Out](ctx, it.c, it.d, rec, OutcomeReplayed)
			r.finish(i, ItemResult[Out]{Value: v, Outcome: out, Err: err}, false)
		}
		return true
	}
	if !u.known {
		return false
	}
	why := "it has no record"
	if rec != nil {
		why = "its record is " + rec.Status.String() + " under another claim"
	}
	r.finishUnit(u, fmt.Errorf("%w (key %s): the batch resumed past this item, but %s", ErrResultUnavailable, u.key, why))
	return true
}

// finishUnit gives every item of u the error err.
func (r *batchRun[In, Out]) finishUnit(u *batchUnit, err error) {
	for _, i := range u.idx {
		r.finish(i, ItemResult[Out]{Err: err}, false)
	}
}

// read settles a unit resumed past when the bulk lookup could not answer:
// it reads the record with the store's Get.
func (r *batchRun[In, Out]) read(ctx context.Context, u *batchUnit) {
	start := time.Now()
	rec, err := r.g.store.Get(ctx, u.key)
	r.g.timeStore(ctx, "get", start)
	switch {
	case errors.Is(err, store.ErrNotFound):
		rec = nil
	case err != nil:
		if ctx.Err() != nil {
			err = ctx.Err()
		} else {
			err = &StoreError{Op: "get", Key: u.key, Err: err}
		}
		r.finishUnit(u, err)
		return
	}
	r.settle(ctx, u, rec, r.c.clock.Now())
}

// claimUnit runs u's items through the single-call path: the first item of
// each payload runs (or replays, or waits) as Do would, and the items with
// the same payload share its outcome. Payloads are taken one after another,
// so a second payload meets the first one's record, as it would in
// sequential calls.
func (r *batchRun[In, Out]) claimUnit(ctx context.Context, u *batchUnit) {
	type group struct {
		lead   int
		shares []int
	}
	var groups []*group
	byHash := make(map[string]*group, 1)
	for _, i := range u.idx {
		ph := r.items[i].d.payloadHash
		if g := byHash[ph]; g != nil {
			g.shares = append(g.shares, i)
			continue
		}
		g := &group{lead: i}
		byHash[ph] = g
		groups = append(groups, g)
	}
	for n, g := range groups {
		if n > 0 && r.halted(ctx) {
			err := r.notStarted(ctx)
			for _, g := range groups[n:] {
				for _, i := range append([]int{g.lead}, g.shares...) {
					r.finish(i, ItemResult[Out]{Err: err}, false)
				}
			}
			return
		}
		lead := r.execute(ctx, g.lead, r.items[g.lead].c)
		if lead.Outcome != 0 {
			lead.Outcome = OutcomeShared
		}
		for _, i := range g.shares {
			r.finish(i, lead, false)
		}
	}
}

// execute runs item i through the single-call path with config c.
func (r *batchRun[In, Out]) execute(ctx context.Context, i int, c *config) ItemResult[Out] {
	in := r.inputs[i]
	v, out, err := execute(ctx, r.g, c, r.scope, in, func(ctx context.Context) (Out, error) { return r.fn(ctx, in) })
	res := ItemResult[Out]{Value: v, Outcome: out, Err: err}
	r.finish(i, res, true)
	return res
}

// finish records item i's outcome. viaExecute says an execute call has
// counted it in the calls metric already.
func (r *batchRun[In, Out]) finish(i int, res ItemResult[Out], viaExecute bool) {
	r.res[i] = res
	label := outcomeLabel(res.Outcome, res.Err)
	if errors.Is(res.Err, ErrBatchStopped) || (res.Outcome == 0 && isContextError(res.Err) && !viaExecute) {
		label = notRun
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.counts[label]++
	if !viaExecute && label != notRun {
		r.direct[label]++
	}
	if res.Err != nil {
		r.failed++
		if r.b.stopOnError {
			r.stopped = true
		}
	}
	if r.b.onItem != nil {
		r.b.onItem(i, res.Outcome, res.Err)
	}
}

// halted reports whether no more items may start.
func (r *batchRun[In, Out]) halted(ctx context.Context) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stopped || r.hasPanic || ctx.Err() != nil
}

// notStarted is the error of an item the batch did not start.
func (r *batchRun[In, Out]) notStarted(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return ErrBatchStopped
}

// pool runs tasks in order, at most r.b.concurrency at a time. A panic in
// a task stops the batch and continues in the caller once the running
// tasks have finished.
func (r *batchRun[In, Out]) pool(ctx context.Context, tasks []batchTask) {
	sem := make(chan struct{}, r.b.concurrency)
	var wg sync.WaitGroup
	skip := func(t batchTask) {
		err := r.notStarted(ctx)
		for _, i := range t.idx {
			r.finish(i, ItemResult[Out]{Err: err}, false)
		}
	}
	for _, t := range tasks {
		if r.halted(ctx) {
			skip(t)
			continue
		}
		acquired := false
		select {
		case sem <- struct{}{}:
			acquired = true
		case <-ctx.Done():
		}
		if r.halted(ctx) {
			if acquired {
				<-sem
			}
			skip(t)
			continue
		}
		wg.Add(1)
		go func() {
			finished := false
			defer func() {
				if !finished {
					p := recover()
					r.mu.Lock()
					if !r.hasPanic {
						if p == nil {
							// runtime.Goexit: the items of the task that
							// have no outcome get errGoexit.
							p = errGoexit
						}
						r.panicked, r.hasPanic = p, true
					}
					r.mu.Unlock()
				}
				<-sem
				wg.Done()
			}()
			t.run(ctx)
			finished = true
		}()
	}
	wg.Wait()
	r.mu.Lock()
	p, ok := r.panicked, r.hasPanic
	r.mu.Unlock()
	if ok {
		if p == errGoexit {
			for i := range r.res {
				if r.res[i].Outcome == 0 && r.res[i].Err == nil {
					r.res[i].Err = errGoexit
				}
			}
			return
		}
		panic(p)
	}
}

// end ends the batch span with the item counts and counts the items that
// no execute call counted.
func (r *batchRun[In, Out]) end(ctx context.Context, span trace.Span, lookedUp, found int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for label, n := range r.direct {
		r.g.tel.Calls.Add(ctx, int64(n), r.g.tel.CallOption(r.scope, label))
	}
	if span.IsRecording() {
		attrs := []attribute.KeyValue{
			telemetry.ScopeKey.String(r.scope), r.g.tel.StoreAttr(),
			telemetry.BatchItemsKey.Int(len(r.inputs)),
			telemetry.BatchLookupKeysKey.Int(lookedUp),
			telemetry.BatchLookupFoundKey.Int(found),
		}
		for _, o := range telemetry.BatchOutcomes {
			attrs = append(attrs, telemetry.BatchOutcomeKey(o).Int(r.counts[o]))
		}
		if r.b.resume > 0 {
			attrs = append(attrs, telemetry.BatchResumedKey.Int(min(r.b.resume, len(r.inputs))))
		}
		attrs = append(attrs, r.c.spanAttrs...)
		span.SetAttributes(attrs...)
		if r.failed > 0 {
			span.SetStatus(codes.Error, fmt.Sprintf("%d of %d items failed", r.failed, len(r.inputs)))
		}
	}
	span.End()
}
