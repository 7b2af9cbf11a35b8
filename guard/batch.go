package guard

import (
	"cmp"
	"context"
	"reflect"

	"github.com/idemguard/idemguard/internal/guardhook"
)

// ItemResult is the outcome of one item of a batch run by [DoBatch]: what
// [Do] would have returned for the item alone, and how it was obtained.
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
	r := &batchRun[In, Out]{g: g, c: &b.call, b: b, scope: scope, inputs: inputs, fn: fn, res: res}
	r.run(ctx)
	return res
}

// batchConfig holds a batch's call settings and batch options.
type batchConfig struct {
	call        config
	concurrency int
	itemKey     func(any) any // nil: keys come from the inputs
	itemKeyType reflect.Type  // the input type itemKey takes
	stopOnError bool
	resume      int
	onItem      func(index int, outcome Outcome, err error)
	invalid
}

// batchOption is a [BatchOption] of DoBatch's own.
type batchOption func(*batchConfig)

func (f batchOption) applyBatch(b *batchConfig) { f(b) }

// WithConcurrency sets how many items of a batch run at once (default
// 8); n must be at least 1. It bounds the functions
// running and their claims, not the bulk lookup.
func WithConcurrency(n int) BatchOption {
	return batchOption(func(b *batchConfig) {
		if b.check(n >= 1, "concurrency must be at least 1, got %d", n) {
			b.concurrency = n
		}
	})
}

// WithItemKey derives each batch item's key from what key returns for it
// instead of from the item itself; the key path ([WithKeyPath]) is not
// applied to it, while payload validation still reads the item. It is the
// batch form of [WithKey]. In must be the batch's input type.
func WithItemKey[In any](key func(In) any) BatchOption {
	return batchOption(func(b *batchConfig) {
		if !b.check(key != nil, "nil item key function") {
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
// as a Temporal activity is.
func WithStopOnError() BatchOption {
	return batchOption(func(b *batchConfig) { b.stopOnError = true })
}

// withResume tells a batch that its first done items completed in an
// earlier attempt of the same batch, as recorded by the caller (a
// checkpoint, Temporal heartbeat details). Those items are never run again:
// their stored outcomes are replayed, even past their TTL, and found under
// the previous key secrets too while the secret rotates ([WithKeySecret]);
// one whose record is gone (or held by another claim) fails with
// [ErrResultUnavailable]. A duplicate of such an item later in the batch is
// treated the same way. Items run unguarded (an empty key selection) keep
// no record and run again.
func withResume(done int) BatchOption {
	return batchOption(func(b *batchConfig) {
		if b.check(done >= 0, "resume point must not be negative, got %d", done) {
			b.resume = done
		}
	})
}

// withItemDone sets a function that a batch calls once for each item as
// soon as the item has its outcome, with the item's index in the inputs and
// its outcome and error (see [ItemResult]). Calls come in the order items
// finish, not in input order, and never two at once; a slow function slows
// the batch. Use it to report progress.
func withItemDone(fn func(index int, outcome Outcome, err error)) BatchOption {
	return batchOption(func(b *batchConfig) { b.onItem = fn })
}

// batchWith returns the settings of a batch of inputs of type in.
func (g *Guard) batchWith(scope string, in reflect.Type, opts []BatchOption) (*batchConfig, error) {
	if scope == "" {
		return nil, invalidOption("empty scope")
	}
	b := &batchConfig{call: g.cfg, concurrency: guardhook.DefaultConcurrency}
	for _, o := range opts {
		o.applyBatch(b)
	}
	if err := cmp.Or(b.err, b.call.err); err != nil {
		return nil, err
	}
	switch {
	case b.call.hasKey:
		// Only an adapter's lifted option gets here (guardhook.AsBatchOption).
		return nil, invalidOption("WithKey would give every item of a batch the same key; use WithItemKey")
	case b.itemKey != nil && b.itemKeyType != in:
		return nil, invalidOption("WithItemKey takes %v, but the batch's inputs are %v", b.itemKeyType, in)
	}
	return b, nil
}
