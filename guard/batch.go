package guard

import (
	"reflect"
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
