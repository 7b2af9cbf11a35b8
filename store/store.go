// Package store defines the contract between the guard and the shared store
// that holds idempotency records.
//
// # For implementers
//
// A store keeps one [Record] per key and implements [Store]. Every method takes
// a [context.Context] first, must honour its cancellation and deadline, and
// may be called concurrently from many goroutines and many processes: the
// store, not the caller, is what makes one claim win.
//
// [Store.Acquire] is the only method that decides ownership, and it must be
// atomic: of any number of concurrent Acquire calls for one key, at most one
// succeeds while a live record exists. When Acquire fails because a live
// record exists it returns [ErrConflict] together with that record, read in
// the same atomic step where the store allows it (DynamoDB returns it with
// ReturnValuesOnConditionCheckFailure=ALL_OLD); a store that cannot return it
// may read it afterwards, and if the record has gone by then it returns
// ErrConflict with a nil record and the caller tries again. When Acquire
// succeeds by replacing a claim whose lease lapsed, it returns that claim
// with a nil error, from the same atomic step: the guard counts such
// takeovers as stuck claims (telemetry's idemguard.claim.taken_over).
//
// [Store.Complete], [Store.Extend] and [Store.Release] are fenced: each is
// conditional on the record existing under the caller's [Record.Token]
// (Extend and Release, on its being in progress too). When it does not, they
// change nothing and return [ErrTokenMismatch].
//
// # Time
//
// Stores never read the wall clock. The caller passes the time (now) into
// Acquire, and every expiry is a time the caller computed. A record is live at
// time now when
//
//	now < ExpiresAt, and
//	it is COMPLETED, or it is INPROGRESS with a zero LeaseExpiresAt or now < LeaseExpiresAt.
//
// The guard passes its own clock's reading less its clock-skew tolerance
// (guard.WithClockSkew): a lease is taken over only once it has lapsed by
// more than the tolerance on the claimant's clock, so a claimant whose clock
// runs ahead of the holder's by less than that never takes over a live
// claim. Stores compare with the time given and need not know about skew.
//
// The guard keeps ExpiresAt ≥ LeaseExpiresAt for in-progress records, so an
// expired record always has a lapsed lease. A store may keep times at a
// coarser precision than nanoseconds (DynamoDB keeps ExpiresAt in seconds and
// LeaseExpiresAt in milliseconds, as AWS Powertools does); it must round
// ExpiresAt up, never down, and LeaseExpiresAt to within a millisecond.
//
// Stores must check expiry against the time given, not rely on background
// deletion: DynamoDB's TTL, for example, deletes expired items hours late.
//
// # Errors
//
// Besides the sentinels below, a store returns its own errors wrapped so that
// [errors.As] reaches the underlying cause. A store whose errors can mean
// "slow down and retry" (throttling) should make them match [ErrThrottled]
// through errors.Is, so callers can retry without knowing the store.
//
// # Record formats
//
// Every record a store writes carries the format it is written in,
// [FormatVersion], in an attribute, hash field or column of its own, so
// that two releases can share one store during a rolling deploy. A store
// reads the format before anything else of a record, and passes it to
// [CheckFormat]: a record newer than the build is never decoded, and every
// read of it (Get, Acquire meeting it live, [BatchGetter.GetMany],
// [Admin.List]) reports a [*FormatError], which matches [ErrNewerFormat]
// and not [ErrCorrupt]. Acquire writes nothing over such a record while it
// is live. What the atomic conditions read (the status, the expiry, the
// lease end, the token) keeps its place and meaning in every format, so a
// build still replaces an expired record, or a claim whose lease lapsed,
// of a newer format, and fences its own writes as before. A store whose
// records never outlive the process (store/memory) is read by no other
// build and writes no format.
//
// # Optional interfaces
//
// A store may implement more than [Store]; callers probe for each optional
// interface with a type assertion and fall back to the Store methods when it
// is missing, so a store implements only what its backend does well:
//
//   - Name() string gives the store's name in telemetry ("memory",
//     "dynamodb").
//   - [BatchGetter] reads many records in one round trip; the guard uses it
//     to look up a batch's completed items in bulk.
//   - [Transactor] completes a claim inside a transaction of the database
//     the guarded function writes to (guard.DoTx).
//   - [Admin] lists and deletes records for operators; [Purger] deletes
//     expired records in stores that keep them.
//   - [KeyLimiter] states the longest key the store can hold; the guard
//     refuses longer keys before it calls the store.
//   - [Watcher] tells a process the moment a key's record is completed or
//     released, so that callers waiting for another's claim need not poll.
//     [WatchGetter] subscribes and re-reads the record in one round trip.
//
// A method of an optional interface may return [ErrSkip] to decline at run
// time (say, a client without the batch API); the caller then goes on as if
// the interface were not implemented.
//
// # Conformance
//
// Package storetest runs the same semantics against any store, including
// the optional interfaces it implements; a new store should pass
// storetest.Run under the race detector.
package store

import (
	"context"
	"errors"
	"time"
)

// Store holds idempotency records. See the package documentation for the
// contract every method must honour.
type Store interface {
	// Acquire creates rec, whose Status is [StatusInProgress], unless a live
	// record (see the package documentation) exists for rec.Key at time now.
	// When rec was written it returns a nil error, and the record it
	// replaced if that was a claim taken over: in progress, not expired at
	// now, its lease lapsed (a holder that crashed, hung or lost the store
	// without completing). That record is returned as it was stored, read
	// in the same atomic step as the write, so that the caller can count
	// a stuck claim; when rec replaced nothing, an expired record or
	// anything else, Acquire returns (nil, nil). When a live record exists
	// it writes nothing and returns that record and [ErrConflict]; the record
	// may be nil if it vanished before it could be read. That holds also when
	// the live record carries rec's own Token (a claimant repeating its
	// claim, or a retried write whose first attempt succeeded): the record
	// returned is the one stored, with its own lease end, and the caller
	// recognises its claim by the token. A record that exists
	// but is not live is replaced. An existing item that cannot be read as a
	// record is reported as [ErrCorrupt], and the key stays blocked until the
	// item expires or is removed; a live record in a newer format than the
	// store reads is reported as [ErrNewerFormat], and nothing is written.
	// Acquire must be atomic.
	//
	// Acquire and Complete must not keep rec, or anything of it but copies,
	// after they return: the caller may reuse it.
	Acquire(ctx context.Context, rec *Record, now time.Time) (*Record, error)

	// Complete replaces the record rec.Key, if it is held under rec.Token,
	// with rec: Status COMPLETED, and Result, ResultKind, PayloadHash,
	// ExpiresAt and LeaseExpiresAt as given. An empty Result and a nil one
	// may read back alike. It returns [ErrTokenMismatch] and writes nothing
	// when the record is absent or held under another token, and
	// [ErrTooLarge] when rec cannot be stored because of its size, in which
	// case the caller may try again with a smaller or empty Result. A
	// completed record held under rec.Token is replaced too: a retried
	// completion whose first attempt landed unseen must succeed, and the
	// guard retires a record by completing it again as already expired.
	Complete(ctx context.Context, rec *Record) error

	// Extend sets LeaseExpiresAt and ExpiresAt of the in-progress record key
	// if it is held under token. It returns [ErrTokenMismatch] and writes
	// nothing otherwise.
	Extend(ctx context.Context, key, token string, leaseExpiresAt, expiresAt time.Time) error

	// Release deletes the record key if it is in progress under token, so
	// that the next caller can acquire it at once. It returns
	// [ErrTokenMismatch] and deletes nothing otherwise: also when the
	// record is COMPLETED under token (an outcome is never given back,
	// even by the claim that recorded it, whose completion may have landed
	// unseen), and when a retried delete finds its own earlier attempt
	// already succeeded, so callers treat ErrTokenMismatch from Release as
	// harmless.
	Release(ctx context.Context, key, token string) error

	// Get returns the record stored under key, live or not, with a
	// strongly consistent read. It returns [ErrNotFound] if there is none,
	// an error matching [ErrCorrupt] for an item that cannot be read as a
	// record, and one matching [ErrNewerFormat] for a record in a newer
	// format than the store reads.
	Get(ctx context.Context, key string) (*Record, error)
}

// Store-level sentinel errors, matched with [errors.Is].
var (
	// ErrConflict is returned by Acquire when a live record exists. Nothing
	// was written; the existing record is returned alongside.
	ErrConflict = errors.New("store: a live record exists for this key")

	// ErrTokenMismatch is returned by Complete, Extend and Release when the
	// record is absent or held under another fencing token: the caller's
	// claim was lost (its lease lapsed and another caller acquired the key,
	// or the record expired). Nothing was written.
	ErrTokenMismatch = errors.New("store: record not held under this token")

	// ErrNotFound is returned by Get when no record exists for the key.
	ErrNotFound = errors.New("store: record not found")

	// ErrTooLarge is returned by Complete when the record is too large for
	// the store. Nothing was written.
	ErrTooLarge = errors.New("store: record too large")

	// ErrThrottled marks store errors that mean the store is rejecting
	// requests for capacity reasons; the request may succeed if retried
	// later. Stores wrap their throttling errors so they match it.
	ErrThrottled = errors.New("store: throttled")

	// ErrCorrupt marks a stored item that cannot be read as a [Record]
	// (missing or mistyped attributes). Stores wrap their decoding errors so
	// they match it.
	ErrCorrupt = errors.New("store: corrupt record")

	// ErrRefused marks an error of [Tx.Commit] that means the transaction
	// was refused, and none of it written, because of the guarded
	// function's own writes: a condition of one of its actions did not
	// hold (DynamoDB's ConditionalCheckFailed on an action of the
	// function's), or its writes break a constraint the database checks at
	// commit (on PostgreSQL, a deferred constraint: SQLSTATE class 23, or
	// a constraint trigger's RAISE EXCEPTION). It is the function's
	// outcome, not a failure of the store: the guard reports it as
	// guard.ErrRefused. A completion of the guard's that fails its fence is
	// [ErrTokenMismatch], never ErrRefused; conflicts with concurrent
	// transactions (a serialization failure, DynamoDB's
	// TransactionConflict) are the store's, and match [ErrThrottled].
	// Stores wrap their errors so they match it.
	ErrRefused = errors.New("store: transaction refused by the function's own writes")
)

// KeyLimiter is an optional interface for stores that cannot hold keys of
// every length. MaxKeyBytes returns the longest key, in bytes, that every
// method of the store accepts, net of any fixed part the store adds to it
// (a key prefix, a static partition value); 0 or less means no limit. The
// guard reads it once, when it is built (guard.New), and refuses a
// longer key as invalid input before it calls the store, instead of
// sending a request the store can only fail. A store that implements it
// must hold keys of exactly that length; storetest.Run checks it.
type KeyLimiter interface {
	MaxKeyBytes() int
}

// Watcher is an optional interface for stores that can push a key's
// completion or release to the processes waiting for it, so that a caller
// that finds another's claim in progress learns of the outcome the moment
// it exists rather than at its next poll.
//
// # Ordering
//
// Watch returns once the subscription is in effect on the server, and the
// store notifies a write only after the write is visible to every reader
// of the record (on PostgreSQL the notification is delivered at the
// commit of the transaction that wrote, on Redis it is published by the
// script that wrote). So every completion or release that becomes visible
// after Watch returns is notified, and a caller that watches first and then
// reads the record (Get, or Acquire) misses none: a write visible before
// the read is seen by the read, a later one is notified. Reading first and
// watching after leaves a window in which a write is neither read nor
// notified; callers must not do it.
//
// # Sharing
//
// A store serves the watches of a process through a few server
// subscriptions of its own and multiplexes them: many watches of one key
// share one subscription (Redis: one channel per key; PostgreSQL: one
// channel per table, on one connection per store), so a Watch of a key
// already watched in the process costs no round trip. The store, not the
// caller, keeps the count, because only the store knows what its server
// subscribes to (a key, a table) and when a subscription can be dropped.
//
// # Losses and spurious notifications
//
// A subscription can end without a notification: its connection drops, the
// server fails over, a Cluster slot moves. The store then ends every
// subscription the connection served, each Done channel closed and Err
// matching [ErrWatchLost], within a bounded time (each store checks its
// connection every few seconds), and a later Watch subscribes afresh. A
// caller told of a loss re-reads the record and watches again or polls; a
// notification sent while no subscription was in effect is lost for good,
// which is why the caller re-reads. A notification may also be spurious
// (a write that preceded the Watch, a release followed at once by a new
// claim): callers re-read after every one, and keep a slow poll as a
// safety net.
//
// Watch returns an error when it cannot subscribe: the server cannot be
// reached, or does not support what the store needs (then the error
// matches [ErrSkip], and the caller goes on as if the store did not
// implement Watcher). The caller polls instead.
type Watcher interface {
	// Watch subscribes to the next completion or release of key's record
	// and returns when the subscription is in effect. ctx bounds the
	// subscribing only, not the subscription's life; the caller must Stop
	// the subscription it gets. A completion of an in-progress record, a
	// completion of a completed one (a retried completion, a record retired
	// by completing it as expired) and a release are notified; an Extend
	// is not, nor is an Acquire that takes over a lapsed claim (its waiters
	// know the lease end), nor an operator's delete ([Admin.Delete]).
	Watch(ctx context.Context, key string) (Subscription, error)
}

// WatchGetter is an optional interface of a [Watcher] that reads the
// key's record in the same round trip as it subscribes, or on the
// connection that subscribes when the key is watched already: WatchGet is
// Watch followed by Get, in the order the [Watcher] ordering rule asks
// for (the read's view of the record is taken once the subscription is in
// effect), for a round trip less. A caller that watches in order to re-read
// uses the record it returns instead of its own read.
//
// When it cannot subscribe, WatchGet returns a nil Subscription and the
// error, as Watch would (nothing is read; an error matching [ErrSkip]
// means the same). Otherwise it returns the subscription, which the caller
// must Stop, with what Get would have returned: the record, or an error
// ([ErrNotFound] when the key has no record, [ErrCorrupt] or
// [ErrNewerFormat] for a row that is not a record this build reads).
type WatchGetter interface {
	Watcher
	WatchGet(ctx context.Context, key string) (Subscription, *Record, error)
}

// Subscription is a watch on one key, from [Watcher.Watch]. It is used up
// by its first notification: a caller still waiting after it watches again
// (before it re-reads the record; see [Watcher]).
type Subscription interface {
	// Done returns a channel that is closed once: at the first
	// notification of a completion or release of the key after Watch
	// returned, or when the subscription is lost.
	Done() <-chan struct{}
	// Err returns nil until Done is closed, and then nil after a
	// notification, or an error matching [ErrWatchLost] when the
	// subscription was lost.
	Err() error
	// Stop ends the subscription and lets the store drop the server
	// subscription when no other watch of the key needs it. Callers must
	// call it, also after Done is closed; it may be called more than once
	// and from any goroutine.
	Stop()
}

// ErrWatchLost is what [Subscription.Err] matches when a subscription ended
// without a notification (a dropped connection, a failover, a moved
// Cluster slot): a completion or release may have gone unnotified, so the
// caller re-reads the record.
var ErrWatchLost = errors.New("store: watch lost; re-read the record")
