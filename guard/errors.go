package guard

import (
	"errors"
	"fmt"
	"time"

	"github.com/idemguard/idemguard/store"
)

// Errors returned by the guard, matched with [errors.Is]. Each says whether
// the guarded function's side effect may have happened and whether calling
// again is safe.
var (
	// ErrInProgress: another call with the same key holds the record and is
	// running now (or ran and crashed, and its lease has not yet lapsed).
	// This call did not run the function. Retrying later is safe: the retry
	// replays the other call's result once it completes, or runs the
	// function if that call failed or its lease lapsed. The error is an
	// [*InProgressError] carrying the holder's lease end.
	ErrInProgress = errors.New("idemguard: a call with this key is in progress")

	// ErrPayloadMismatch: a record exists for this key but was written for a
	// different payload (the payload-validation selection hashes
	// differently). The function did not run. Retrying with the same input
	// will fail the same way: the caller reused a key for a different
	// request. The error is a [*MismatchError] carrying the record.
	ErrPayloadMismatch = errors.New("idemguard: idempotency key reused with a different payload")

	// ErrKeyMissing: the key selection of the input is null or empty and the
	// guard requires a key. The function did not run. Retrying with the
	// same input fails the same way.
	ErrKeyMissing = errors.New("idemguard: idempotency key missing from input")

	// ErrLeaseLost: this call ran the function, but its claim was taken over
	// by another caller (its lease lapsed, for example during a long pause)
	// before it could record the result, so nothing was recorded. The side
	// effect may have happened, and the other caller may run it again unless
	// the function passed [KeyFromContext] downstream. Retrying replays the
	// other caller's result once it completes.
	ErrLeaseLost = errors.New("idemguard: lease lost to another caller")

	// ErrResultUnavailable: the call with this key completed, but its result
	// cannot be replayed: it was too large for the store, could not be
	// encoded, or can no longer be decoded into the caller's type. The side
	// effect happened once and will not run again; retrying fails the same
	// way until the record expires.
	ErrResultUnavailable = errors.New("idemguard: completed, but the stored result is unavailable")

	// ErrNotRecorded: this call ran the function, but the store kept failing
	// while it tried to record the outcome, until its lease ran out. The
	// side effect may have happened; a later call may run it again unless
	// the function passed [KeyFromContext] downstream. The error wraps the
	// last store error.
	ErrNotRecorded = errors.New("idemguard: function ran but its outcome could not be recorded")

	// ErrRefused: the guarded function ran inside a store transaction
	// ([DoTx]) and the store refused to commit it because of the function's
	// own writes: a condition of one of its actions did not hold (on
	// DynamoDB, ConditionalCheckFailed on an action of the function's, such
	// as a debit conditional on the balance), or its writes break a
	// constraint the database checks at commit (on PostgreSQL, a deferred
	// constraint; see [store.ErrRefused]). None of the function's writes
	// happened, nor did the completion, and the key was released
	// ([OutcomeReleased]). It is the function's outcome, not a store
	// failure: it matches neither [ErrStore] nor [ErrInProgress], and its
	// metric's error.type is "refused". Retrying with the same input runs
	// the function again, and is refused again until what the condition
	// checks has changed. The error is a [*RefusedError] wrapping the
	// store's, which says what refused the transaction.
	ErrRefused = errors.New("idemguard: transaction refused by the function's own condition")

	// ErrStore: the store failed before the function ran (the claim could
	// not be made or read). The function did not run; retrying is safe. The
	// error is a [*StoreError] wrapping the store's error, so errors.Is
	// also matches [store.ErrThrottled] when the store was throttling. In
	// a transactional call ([DoTx]) it also reports a transaction the
	// store failed to begin or commit: then the function ran, none of its
	// writes happened, and the key was released ([OutcomeReleased]).
	ErrStore = errors.New("idemguard: store failed")

	// ErrInvalidInput: the input could not be turned into a key: it is not
	// JSON-serialisable, a JMESPath function failed on it, or the key or
	// validation selection holds a string that is not valid UTF-8 (which
	// RFC 8785 cannot represent: keying it anyway would give inputs that
	// differ only there one key). The function did not run. Retrying with
	// the same input fails the same way.
	ErrInvalidInput = errors.New("idemguard: input cannot be keyed")

	// ErrInvalidOption: an option or argument given to [New], [Wrap] or [Do]
	// is invalid: a JMESPath expression that does not compile, a negative
	// duration, a nil store. Reported when
	// the guard or wrapper is built; the function did not run.
	ErrInvalidOption = errors.New("idemguard: invalid option")

	// ErrBatchStopped is the error of a batch item that [DoBatch] did not start
	// because an earlier item failed and the batch runs with
	// [WithStopOnError]. The function did not run for the item; running the
	// batch again is safe.
	ErrBatchStopped = errors.New("idemguard: batch stopped before this item ran")
)

// InProgressError is the [ErrInProgress] error.
type InProgressError struct {
	// Key is the idempotency key.
	Key string
	// LeaseExpiresAt is when the holder's lease lapses if it is not extended;
	// zero if unknown. A retry after it either replays or runs.
	LeaseExpiresAt time.Time
}

func (e *InProgressError) Error() string {
	if e.LeaseExpiresAt.IsZero() {
		return fmt.Sprintf("%v (key %s)", ErrInProgress, e.Key)
	}
	return fmt.Sprintf("%v (key %s, lease until %s)", ErrInProgress, e.Key, e.LeaseExpiresAt.UTC().Format(time.RFC3339Nano))
}

// Is reports whether target is [ErrInProgress].
func (e *InProgressError) Is(target error) bool { return target == ErrInProgress }

// MismatchError is the [ErrPayloadMismatch] error.
type MismatchError struct {
	// Key is the idempotency key.
	Key string
	// Path is the payload-validation expression whose selection differs
	// ([WithPayloadValidation]), such as "amount".
	Path string
	// PayloadHash is the hash of this call's validation selection.
	PayloadHash string
	// Existing is the record found under Key.
	Existing *store.Record
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("%v: %q selects something else than the %v record holds (key %s)", ErrPayloadMismatch, e.Path, e.Existing.Status, e.Key)
}

// Is reports whether target is [ErrPayloadMismatch].
func (e *MismatchError) Is(target error) bool { return target == ErrPayloadMismatch }

// StoreError is a store failure, wrapped with the operation and key.
type StoreError struct {
	// Op is the store operation: "acquire", "complete", "extend" or "release".
	Op string
	// Key is the idempotency key.
	Key string
	// Err is the store's error.
	Err error
}

func (e *StoreError) Error() string {
	var oe *store.OpError
	if errors.As(e.Err, &oe) {
		// The store's error names the operation and key already.
		return "idemguard: " + e.Err.Error()
	}
	if e.Key == "" {
		return fmt.Sprintf("idemguard: store %s: %v", e.Op, e.Err)
	}
	return fmt.Sprintf("idemguard: store %s (key %s): %v", e.Op, e.Key, e.Err)
}

// Unwrap returns the store's error.
func (e *StoreError) Unwrap() error { return e.Err }

// Is reports whether target is [ErrStore].
func (e *StoreError) Is(target error) bool { return target == ErrStore }

// RefusedError is the [ErrRefused] error.
type RefusedError struct {
	// Key is the idempotency key; "" for a call that ran unguarded.
	Key string
	// Err is the store's error, which says what refused the transaction:
	// on DynamoDB a *dynamodb.TxCanceledError listing the function's
	// actions whose condition failed, on PostgreSQL a *pgconn.PgError
	// naming the constraint. Reach it with errors.As.
	Err error
}

func (e *RefusedError) Error() string {
	if e.Key == "" {
		return fmt.Sprintf("%v; none of its writes happened: %v", ErrRefused, e.Err)
	}
	return fmt.Sprintf("%v; none of its writes happened and the key was released (key %s): %v", ErrRefused, e.Key, e.Err)
}

// Unwrap returns the store's error.
func (e *RefusedError) Unwrap() error { return e.Err }

// Is reports whether target is [ErrRefused].
func (e *RefusedError) Is(target error) bool { return target == ErrRefused }

// PanicError is what callers that shared an execution in this process get
// when the function panicked; the caller that ran it panics again with the
// same value. A panic in the function releases the record, so a later call
// runs again; a panic after the function returned (in a codec, a result's
// MarshalJSON, a predicate) completes it without a result. [DoBatch]
// panics with a PanicError, which keeps the panicking item's stack.
type PanicError struct {
	// Value is the value passed to panic.
	Value any
	// Stack is the panicking goroutine's stack.
	Stack []byte
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("idemguard: guarded function panicked: %v", e.Value)
}

// ReplayedError is how the default [ErrorCodec] replays a stored definite
// error: its message, without its type. Use [WithErrorCodec] to keep more.
type ReplayedError struct {
	// Message is the original error's text.
	Message string
}

func (e *ReplayedError) Error() string { return e.Message }

// definiteError marks an error returned through [Definite].
type definiteError struct{ err error }

func (e *definiteError) Error() string { return e.err.Error() }
func (e *definiteError) Unwrap() error { return e.err }

// Definite marks err as a definite outcome: the default definite-error
// predicate stores it and replays it to every later call with the same key,
// instead of releasing the record so the function runs again. Use it for
// business failures that must not be retried, such as a declined card.
// Definite(nil) is nil.
func Definite(err error) error {
	if err == nil {
		return nil
	}
	return &definiteError{err}
}

// IsDefinite reports whether err was marked with [Definite], or is a
// definite error replayed by the default error codec (a [*ReplayedError]:
// only definite errors are stored). It is the default definite-error
// predicate.
func IsDefinite(err error) bool {
	var d *definiteError
	var r *ReplayedError
	return errors.As(err, &d) || errors.As(err, &r)
}

func invalidOption(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidOption}, args...)...)
}
