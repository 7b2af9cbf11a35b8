// Package guard makes a function's side effect happen once per idempotency
// key, however often the function is called: by Temporal retrying an
// activity, a queue redelivering a message, or a worker restarted after a
// crash.
//
// A [Guard] keeps one record per key in a shared [store.Store]. The first
// call claims the key with one conditional write, runs the function and
// stores its result; a retry or duplicate with the same key finds the record
// in that same write and replays the result instead of running the function
// again.
//
//	g, err := guard.New(dynamoStore, guard.WithKeyPath("order_id"))
//	...
//	receipt, err := guard.Do(ctx, g, "charge", order, func(ctx context.Context) (Receipt, error) {
//		key, _ := guard.KeyFromContext(ctx)
//		return payments.Charge(ctx, order, key) // the provider dedups on key too
//	})
//
// # Keys
//
// A key is "<scope>#<hash>": scope names what is guarded, and hash is the
// SHA-256 (HMAC-SHA-256 under [WithKeySecret]) of the RFC 8785 canonical
// JSON of the input, or of the part of it a JMESPath expression selects
// ([WithKeyPath]; the AWS Powertools functions powertools_json,
// powertools_base64 and powertools_base64_gzip are available). The key is bound before the function runs. An empty selection
// runs the function unguarded (counted under the outcome unguarded, and
// logged as a warning at most once a minute per scope), or fails with
// [ErrKeyMissing] under [WithRequireKey]; a transactional call ([DoTx])
// requires a key unless told otherwise. [WithPayloadValidation] stores a second hash and rejects
// a reused key whose payload differs ([ErrPayloadMismatch]); the check runs
// on every path that hands out a stored outcome.
//
// # What is guaranteed
//
// For one key, while its record lives ([WithTTL]):
//
//   - At most one call at a time runs the function, within the clock model
//     below: the claim is an atomic conditional write, and concurrent
//     duplicates in one process share one claim and one execution.
//   - A call that completed is replayed, never run again, including when its
//     result cannot be stored ([ErrResultUnavailable]), its completion
//     write fails transiently (retried while the lease holds), or something
//     panics after the function returned (the key is completed without a
//     result and the panic continues).
//   - A claim holds for a lease, extended while the function runs. A holder
//     that crashes blocks others only until its lease lapses. A holder whose
//     lease end passes on its own clock without a successful extension has
//     its context cancelled with cause [ErrLeaseLost]; one that goes on
//     anyway (a zombie) cannot overwrite the new holder's record: every
//     write is fenced by a per-claim token, and it gets ErrLeaseLost.
//   - A function that returns an error releases the record, so the next call
//     runs it again, unless the error is definite ([Definite],
//     [WithDefiniteErrors]): definite errors are stored and replayed.
//     [Step] guards each side effect of a function of several, so that a
//     retry runs only the steps that did not complete; a step keeps its
//     call's promises (payload validation, its transaction, its result
//     filter, a key-secret rotation).
//   - Two different inputs never share a key: a selection holding a string
//     that is not valid UTF-8 is refused with [ErrInvalidInput].
//
// Clock model: each guard compares its own clock with the lease end the
// holder wrote, and takes over a lapsed lease only once it has lapsed by
// more than [WithClockSkew] (default [DefaultClockSkew]) on its own clock.
// Clocks that differ by less than that never let two calls run the
// function at once; beyond it, fencing still stops the zombie's writes, but
// the function may run twice.
//
// One window no store can close remains: a crash after the side effect and
// before the completion write. The next call runs the function again. Pass
// [KeyFromContext] to the system that performs the side effect (a payment
// provider's Idempotency-Key header, a unique constraint, a conditional
// write) and that system closes it; or, when the side effect is a write to
// the store's own database, run it with [DoTx], which commits it together
// with the completion.
//
// # Concurrency
//
// A call that finds the key held elsewhere fails at once with
// [ErrInProgress] in [Reject] mode (the default), or waits in [Wait] mode
// ([WithWait]) until it can replay or take over: the duplicates of a key in
// one process share one wait, told of the completion or release by a store
// that pushes it ([store.Watcher]: Redis, PostgreSQL, memory) and reading
// the record otherwise. [Lookup] reads a key's state without claiming it.
//
// # Batches
//
// [DoBatch] guards each item of a slice with its own record: items completed
// earlier are found with one bulk read (when the store implements
// [store.BatchGetter]) and replayed, and only the rest are claimed and run,
// with bounded concurrency. Results come back in input order, one item's
// failure leaving the others alone.
//
// # Cost
//
// A first call costs two store writes (claim, complete); a replay costs one
// (the failed claim returns the record); a replay from the local cache
// ([WithCache]) costs none. The guard's own work is a few allocations per
// call (docs/benchmarks.md in the repository has the figures).
//
// # Options
//
// Options have one scope each: an [Option] configures the guard in [New], a
// [CallOption] configures calls (as a default in New, or per call), and a
// [BatchOption] configures [DoBatch]. An option passed where it has no
// effect does not compile. The adapters (Temporal, HTTP, gRPC, Watermill)
// take call options as they are, and apply defaults of their own with
// [WithDefaults], so that a default given to New reaches every adapter.
//
// Setting the environment variable IDEMGUARD_DISABLED=true before guards are
// built makes them pass-throughs, the claim API included; [Step] inside any
// entry point, an adapter's included, runs its function unguarded.
package guard
