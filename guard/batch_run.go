package guard

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"runtime/debug"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	"github.com/idemguard/idemguard/internal/guardhook"
	"github.com/idemguard/idemguard/internal/instrument"
	"github.com/idemguard/idemguard/internal/telemetry"
	"github.com/idemguard/idemguard/store"
)

// How DoBatch runs a batch: bind every key, settle what the cache and one
// bulk lookup can answer, then claim the rest, under the keys bound first,
// through guarded, the path of a single call, in a bounded pool.

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
	panicked error // errGoexit or a *panicError, once a task has
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
	ctx, span := g.span(ctx, telemetry.SpanBatch)
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
	units, tasks := r.bind()

	// Settle what the local cache holds, then what one bulk lookup finds.
	now := g.clock.Now()
	var pending []*batchUnit
	for _, u := range units {
		if g.cache != nil {
			if rec, ok := g.cache.get(u.key, now); ok && r.settle(ctx, u, rec, -1, now) {
				continue
			}
		}
		pending = append(pending, u)
	}
	pending, lookedUp, found = r.lookup(ctx, span, pending)

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

// bind derives every item's key before anything runs (fn may change its
// input) and groups the items by key. It returns the units and a task per
// unit (to be filled in) or per unkeyed item, in the input order of their
// first items. Items whose key cannot be derived are finished here.
func (r *batchRun[In, Out]) bind() (units []*batchUnit, tasks []batchTask) {
	r.items = make([]batchItem, len(r.inputs))
	byKey := make(map[string]*batchUnit)
	for i, in := range r.inputs {
		c := r.c
		if r.b.itemKey != nil {
			ci := *r.c
			ci.explicitKey, ci.hasKey = r.b.itemKey(any(in)), true
			c = &ci
		}
		d, err := r.g.derive(c, r.scope, in)
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
				tasks = append(tasks, batchTask{unit: u})
			}
			u.idx = append(u.idx, i)
			u.known = u.known || i < r.b.resume
		}
	}
	return units, tasks
}

// lookup reads the records of pending units with the store's BatchGetter,
// if it has one, settles the units they answer, and returns the others. If
// the lookup is throttled (or the context ends) it fails the units it did
// not answer instead: claims would only add to the store's load. A unit
// resumed past is looked up under the previous key secrets too.
func (r *batchRun[In, Out]) lookup(ctx context.Context, span trace.Span, pending []*batchUnit) (rest []*batchUnit, lookedUp, found int) {
	g := r.g
	bg, ok := g.store.(store.BatchGetter)
	if !ok || len(pending) == 0 {
		return pending, 0, 0
	}
	keys := make([]string, 0, len(pending))
	for _, u := range pending {
		keys = append(keys, u.key)
		for _, p := range r.previous(u) {
			keys = append(keys, p.key)
		}
	}
	var recs map[string]*store.Record
	err := g.timed(ctx, "get_many", func() (err error) {
		recs, err = bg.GetMany(ctx, keys)
		return err
	})
	if errors.Is(err, store.ErrSkip) {
		return pending, 0, 0
	}
	now := g.clock.Now()
	get := func(key string) (*store.Record, error) { return recs[key], nil }
	if err != nil && (ctx.Err() != nil || isContextError(err) || errors.Is(err, store.ErrThrottled)) {
		recordError(span, err)
		for _, u := range pending {
			if rec, prev, _ := r.found(u, get); r.answered(u, rec) && r.settle(ctx, u, rec, prev, now) {
				continue
			}
			uerr := ctx.Err()
			if uerr == nil {
				uerr = &storeError{Op: "get_many", Key: u.key, Err: err}
			}
			r.finishUnit(u, uerr)
		}
		return nil, len(keys), len(recs)
	}
	if err != nil {
		// One corrupt item, say: the claims find out key by key.
		g.log(ctx, slog.LevelWarn, "idemguard: batch lookup failed; claiming the items it did not return one by one", &derived{scope: r.scope}, slog.Any("error", err))
		if span.IsRecording() {
			span.AddEvent("idemguard.batch.lookup_failed", trace.WithAttributes(telemetry.ErrorTypeKey.String(errorType(err))))
		}
	}
	for _, u := range pending {
		// Without an error, an absent record means there is none.
		if rec, prev, _ := r.found(u, get); (err == nil || r.answered(u, rec)) && r.settle(ctx, u, rec, prev, now) {
			continue
		}
		rest = append(rest, u)
	}
	return rest, len(keys), len(recs)
}

// previous returns the keys under the previous key secrets that u is
// looked up under: those of a unit resumed past, whose record may have
// been written before the rotation (a unit to claim is looked up there by
// its claim).
func (r *batchRun[In, Out]) previous(u *batchUnit) []derivedKey {
	if !u.known {
		return nil
	}
	return r.items[u.idx[0]].d.previous
}

// found returns u's record, read with get: the one under u's key, unless
// it is not completed and one under a previous key secret (r.previous)
// is, which is returned with its index (else -1).
func (r *batchRun[In, Out]) found(u *batchUnit, get func(key string) (*store.Record, error)) (*store.Record, int, error) {
	rec, err := get(u.key)
	if err != nil || (rec != nil && rec.Status == store.StatusCompleted) {
		return rec, -1, err
	}
	for j, p := range r.previous(u) {
		prec, err := get(p.key)
		if err != nil {
			return nil, -1, err
		}
		if prec != nil && prec.Status == store.StatusCompleted {
			return prec, j, nil
		}
	}
	return rec, -1, nil
}

// answered reports whether rec, found for u by a lookup that failed part
// way, settles u: a completed record does; a record in progress does
// unless a previous key's record may have gone unanswered.
func (r *batchRun[In, Out]) answered(u *batchUnit, rec *store.Record) bool {
	return rec != nil && (rec.Status == store.StatusCompleted || len(r.previous(u)) == 0)
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
// outcome; it reports false, settling nothing, when u needs a claim. prev
// is the index of the previous key secret rec was found under, or -1.
func (r *batchRun[In, Out]) settle(ctx context.Context, u *batchUnit, rec *store.Record, prev int, now time.Time) bool {
	if rec != nil && rec.Status == store.StatusCompleted && (u.known || rec.Live(now)) {
		if prev < 0 && rec.Live(now) {
			r.g.remember(rec)
		}
		for _, i := range u.idx {
			it := r.items[i]
			v, out, err := replay[Out](ctx, it.c, &it.d, underCurrent(&it.d, rec, prev), OutcomeReplayed)
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
// it reads the record with the store's Get, under the previous key
// secrets too.
func (r *batchRun[In, Out]) read(ctx context.Context, u *batchUnit) {
	rec, prev, err := r.found(u, func(key string) (*store.Record, error) {
		var rec *store.Record
		err := r.g.timed(ctx, "get", func() (err error) {
			rec, err = r.g.store.Get(ctx, key)
			return err
		})
		switch {
		case errors.Is(err, store.ErrNotFound):
			return nil, nil
		case err != nil && ctx.Err() != nil:
			return nil, ctx.Err()
		case err != nil:
			return nil, &storeError{Op: "get", Key: key, Err: err}
		}
		return rec, nil
	})
	if err != nil {
		r.finishUnit(u, err)
		return
	}
	r.settle(ctx, u, rec, prev, r.g.clock.Now())
}

// underCurrent returns rec, found under the previous key secret prev (if
// prev >= 0), as the replay of d checks it: with d's payload hash when it
// was written for d's payload, so that only another payload is refused.
func underCurrent(d *derived, rec *store.Record, prev int) *store.Record {
	if prev < 0 || d.validate == "" || validate(d, rec, d.previous[prev].payloadHash) != nil {
		return rec
	}
	cp := *rec
	cp.PayloadHash = d.payloadHash
	return &cp
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
		lead := r.claim(ctx, g.lead)
		if lead.Outcome != 0 {
			lead.Outcome = OutcomeShared
		}
		for _, i := range g.shares {
			r.finish(i, lead, false)
		}
	}
}

// claim runs keyed item i through the single-call path under the key bind
// derived for it, not one derived again now: fn may have changed the input
// since (inputs can share a pointer), and the item must be claimed under
// the key it was looked up, grouped and reported by, or a rerun of the
// batch would not find its record.
func (r *batchRun[In, Out]) claim(ctx context.Context, i int) ItemResult[Out] {
	in, it := r.inputs[i], &r.items[i]
	v, out, err := guarded(ctx, &request{g: r.g, c: it.c, d: it.d, label: r.scope}, nil, func(ctx context.Context, _ txn) (Out, error) { return r.fn(ctx, in) })
	res := ItemResult[Out]{Value: v, Outcome: out, Err: err}
	r.finish(i, res, true)
	return res
}

// execute runs item i through the single-call path with config c, deriving
// its key: for a disabled guard, and for items bind found no key for.
func (r *batchRun[In, Out]) execute(ctx context.Context, i int, c *config) ItemResult[Out] {
	in := r.inputs[i]
	v, out, err := execute(ctx, &request{g: r.g, c: c, label: r.scope}, in, func(ctx context.Context, _ txn) (Out, error) { return r.fn(ctx, in) })
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
	return r.stopped || r.panicked != nil || ctx.Err() != nil
}

// notStarted is the error of an item the batch did not start.
func (r *batchRun[In, Out]) notStarted(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return ErrBatchStopped
}

// pool runs tasks in order, at most r.b.concurrency at a time. A panic in
// a task stops the batch and continues in the caller, as a *panicError
// with the task's stack, once the running tasks have finished.
func (r *batchRun[In, Out]) pool(ctx context.Context, tasks []batchTask) {
	var eg errgroup.Group
	eg.SetLimit(r.b.concurrency)
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
		eg.Go(func() error {
			if r.halted(ctx) { // checked again once the task has a place
				skip(t)
				return nil
			}
			finished := false
			defer func() {
				if !finished {
					r.panicking(recover(), debug.Stack())
				}
			}()
			t.run(ctx)
			finished = true
			return nil
		})
	}
	eg.Wait()
	r.mu.Lock()
	p := r.panicked
	r.mu.Unlock()
	switch {
	case p == errGoexit:
		// runtime.Goexit: the items that have no outcome get errGoexit.
		for i := range r.res {
			if r.res[i].Outcome == 0 && r.res[i].Err == nil {
				r.res[i].Err = errGoexit
			}
		}
	case p != nil:
		panic(p)
	}
}

// panicking records the first panic (value, stack) or runtime.Goexit (nil)
// of a task.
func (r *batchRun[In, Out]) panicking(value any, stack []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.panicked != nil {
		return
	}
	if value == nil {
		r.panicked = errGoexit
		return
	}
	r.panicked = &panicError{Value: value, Stack: stack}
}

// end ends the batch span with the item counts and counts the items that
// no execute call counted.
func (r *batchRun[In, Out]) end(ctx context.Context, span trace.Span, lookedUp, found int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.g.tel.Metering() {
		for label, n := range r.direct {
			r.g.tel.Calls.Add(ctx, int64(n), instrument.Scoped(r.scope, label), metric.WithAttributes(r.g.tel.StoreAttr))
		}
		for label, n := range r.counts {
			if n > 0 {
				r.g.tel.BatchItems.Add(ctx, int64(n), instrument.Scoped(r.scope, label), metric.WithAttributes(r.g.tel.StoreAttr))
			}
		}
	}
	if span.IsRecording() {
		attrs := []attribute.KeyValue{
			telemetry.ScopeKey.String(r.scope), r.g.tel.StoreAttr,
			telemetry.BatchItemsKey.Int(len(r.inputs)),
			telemetry.BatchLookupKeysKey.Int(lookedUp),
			telemetry.BatchLookupFoundKey.Int(found),
		}
		for _, o := range telemetry.BatchOutcomes() {
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
//     [WithConcurrency] at a time (default 8): claim,
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
// own retries, the items it did not answer fail with a [ErrStore] error
// matching it, without claims being sent to a store that is already
// refusing requests: try the batch again later.
//
// Options are those of Do ([SharedOption]) plus the batch options
// [WithConcurrency], [WithItemKey] and [WithStopOnError]. [WithKey] does
// not compile here, since it would give every item one key. An invalid
// option is reported as every item's error. If fn panics, the items
// running at that moment finish, no other item starts, and the panic
// continues in DoBatch's caller; the panicking item's record is released.
func DoBatch[In, Out any](ctx context.Context, g *Guard, scope string, inputs []In, fn func(context.Context, In) (Out, error), opts ...BatchOption) []ItemResult[Out] {
	res := make([]ItemResult[Out], len(inputs))
	if len(inputs) == 0 {
		return res
	}
	b, err := g.batchWith(scope, reflect.TypeFor[In](), opts)
	if err != nil {
		for i := range res {
			res[i].Err = err
		}
		return res
	}
	r := &batchRun[In, Out]{g: g, c: &b.calls, b: b, scope: scope, inputs: inputs, fn: fn, res: res}
	r.run(ctx)
	return res
}

// batchWith returns the settings of a batch of inputs of type in.
func (g *Guard) batchWith(scope string, in reflect.Type, opts []BatchOption) (*batchConfig, error) {
	if scope == "" {
		return nil, invalidOption("empty scope")
	}
	b := &batchConfig{calls: g.cfg, concurrency: guardhook.DefaultConcurrency}
	for _, o := range opts {
		o.applyBatch(b)
	}
	if err := cmp.Or(b.err, b.calls.err); err != nil {
		return nil, err
	}
	switch {
	case b.calls.hasKey:
		// Only an adapter's lifted option gets here (guardhook.AsBatchOption).
		return nil, invalidOption("WithKey would give every item of a batch the same key; use WithItemKey")
	case b.itemKey != nil && b.itemKeyType != in:
		return nil, invalidOption("WithItemKey takes %v, but the batch's inputs are %v", b.itemKeyType, in)
	}
	return b, nil
}
