package guard

import (
	"errors"
	"fmt"

	"github.com/idemguard/idemguard/internal/guardhook"
)

// Errors returned by the guard, matched with [errors.Is]. Each says whether
// the guarded function's side effect may have happened and whether calling
// again is safe.
var (
	// ErrInProgress: another call with the same key holds the record and is
	// running now (or ran and crashed, and its lease has not yet lapsed).
	// This call did not run the function. Retrying later is safe: the retry
	// replays the other call's result once it completes, or runs the
	// function if that call failed or its lease lapsed.
	ErrInProgress = guardhook.ErrInProgress

	// ErrPayloadMismatch: a record exists for this key but was written for a
	// different payload (the payload-validation selection hashes
	// differently). The function did not run. Retrying with the same input
	// will fail the same way: the caller reused a key for a different
	// request.
	ErrPayloadMismatch = guardhook.ErrPayloadMismatch

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
	// checks has changed. The error wraps the store's, which says what
	// refused the transaction: reach it with errors.As.
	ErrRefused = guardhook.ErrRefused

	// ErrStore: the store failed before the function ran (the claim could
	// not be made or read). The function did not run; retrying is safe. The
	// error wraps the store's error, so errors.Is also matches
	// [store.ErrThrottled] when the store was throttling, and
	// [store.ErrNewerFormat] when the record was written by a newer release
	// (a rolling deploy: the retry succeeds on a process of that release,
	// and nothing was replayed). In
	// a transactional call ([DoTx]) it also reports a transaction the
	// store failed to begin or commit: then the function ran, none of its
	// writes happened, and the key was released ([OutcomeReleased]).
	ErrStore = guardhook.ErrStore

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

// Definite marks err as a definite outcome: the default definite-error
// predicate stores it and replays it to every later call with the same key,
// instead of releasing the record so the function runs again. Use it for
// business failures that must not be retried, such as a declined card.
// Definite(nil) is nil.
func Definite(err error) error {
	if err == nil {
		return nil
	}
	return &guardhook.DefiniteError{Err: err}
}

// IsDefinite reports whether err was marked with [Definite], or is a
// definite error the guard replayed (only definite errors are stored). It
// is the default definite-error predicate; a retry loop inside a guarded
// call uses it to leave definite errors alone.
func IsDefinite(err error) bool { return guardhook.IsDefinite(err) }

func invalidOption(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidOption}, args...)...)
}

// What the guard hands its adapters lives in internal/guardhook, out of
// its users' namespace; these are the guard's own names for it.
type (
	timeSource      = guardhook.Clock
	heldClaim       = guardhook.Claim
	inProgressError = guardhook.InProgressError
	mismatchError   = guardhook.MismatchError
	storeError      = guardhook.StoreError
	refusedError    = guardhook.RefusedError
	panicError      = guardhook.PanicError
)
