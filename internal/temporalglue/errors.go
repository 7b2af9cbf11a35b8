package temporalglue

import (
	"context"
	"errors"
	"time"

	tactivity "go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/store"
)

// Application error types of guard errors. The activity package exports
// them, documented, as its ErrorType constants; workflows match on them.
const (
	ErrorTypeInProgress        = "IdempotencyInProgress"
	ErrorTypePayloadMismatch   = "IdempotencyPayloadMismatch"
	ErrorTypeKeyMissing        = "IdempotencyKeyMissing"
	ErrorTypeResultUnavailable = "IdempotencyResultUnavailable"
	ErrorTypeInvalidInput      = "IdempotencyInvalidInput"
	ErrorTypeInvalidOption     = "IdempotencyInvalidOption"
	ErrorTypeNotInCall         = "IdempotencyNotInCall"
	ErrorTypeLeaseLost         = "IdempotencyLeaseLost"
	ErrorTypeNotRecorded       = "IdempotencyNotRecorded"
	ErrorTypeStore             = "IdempotencyStoreError"
	ErrorTypeStoreThrottled    = "IdempotencyStoreThrottled"
	ErrorTypeDefinite          = "IdempotencyDefiniteError"
)

// minRetryDelay is the shortest next-retry delay given for
// [ErrorTypeInProgress]; retryMargin is added to the holder's lease end so
// that the retry finds the lease lapsed despite clock skew and rounding.
const (
	minRetryDelay = 100 * time.Millisecond
	retryMargin   = 250 * time.Millisecond
)

// TemporalError converts an error returned by a guard into the error a
// Temporal activity should return: an unwrapped application error whose
// type is one of the ErrorType constants, retryable or not as the guard
// error's documentation says, with the guard error's message. maxDelay caps
// the next-retry delay of [ErrorTypeInProgress] (0: up to the holder's
// lease end). Nil, ErrResultPending, application errors at the top, context
// errors and every other error (the activity's own) are returned untouched.
func TemporalError(err error, maxDelay time.Duration) error {
	if err == nil || errors.Is(err, tactivity.ErrResultPending) {
		return err
	}
	var ae *temporal.ApplicationError
	if errors.As(err, &ae) && error(ae) == err {
		return err
	}
	var ip *guard.InProgressError
	switch {
	// Retryable: the activity may have run, and a retry replays what the
	// new holder records, or runs again.
	case errors.Is(err, guard.ErrLeaseLost):
		return temporal.NewApplicationError(err.Error(), ErrorTypeLeaseLost)
	case errors.Is(err, guard.ErrNotRecorded):
		return temporal.NewApplicationError(err.Error(), ErrorTypeNotRecorded)
	case errors.As(err, &ip):
		return temporal.NewApplicationErrorWithOptions(err.Error(), ErrorTypeInProgress, temporal.ApplicationErrorOptions{
			NextRetryDelay: retryDelay(ip.LeaseExpiresAt, maxDelay),
		})
	// Not retryable: a retry fails the same way.
	case errors.Is(err, guard.ErrPayloadMismatch):
		return temporal.NewNonRetryableApplicationError(err.Error(), ErrorTypePayloadMismatch, nil)
	case errors.Is(err, guard.ErrKeyMissing):
		return temporal.NewNonRetryableApplicationError(err.Error(), ErrorTypeKeyMissing, nil)
	case errors.Is(err, guard.ErrResultUnavailable):
		return temporal.NewNonRetryableApplicationError(err.Error(), ErrorTypeResultUnavailable, nil)
	case errors.Is(err, guard.ErrInvalidInput):
		return temporal.NewNonRetryableApplicationError(err.Error(), ErrorTypeInvalidInput, nil)
	case errors.Is(err, guard.ErrInvalidOption):
		return temporal.NewNonRetryableApplicationError(err.Error(), ErrorTypeInvalidOption, nil)
	case errors.Is(err, guard.ErrNotInCall):
		// guard.Step in an activity that is not guarded: a programming
		// error that no retry mends.
		return temporal.NewNonRetryableApplicationError(err.Error(), ErrorTypeNotInCall, nil)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// The activity was cancelled or timed out while the guard talked
		// to the store; Temporal reports that itself.
		return err
	// Retryable: the store failed before the activity ran.
	case errors.Is(err, store.ErrThrottled):
		return temporal.NewApplicationError(err.Error(), ErrorTypeStoreThrottled)
	case errors.Is(err, guard.ErrStore):
		return temporal.NewApplicationError(err.Error(), ErrorTypeStore)
	case guard.IsDefinite(err):
		return DefiniteError(err)
	}
	return err
}

// DefiniteError returns the non-retryable application error a definite
// error is returned and stored as: err's own non-retryable application
// error if it holds one, else one of type [ErrorTypeDefinite] with err's
// message.
func DefiniteError(err error) error {
	var ae *temporal.ApplicationError
	if errors.As(err, &ae) && ae.NonRetryable() {
		return ae
	}
	return temporal.NewNonRetryableApplicationError(err.Error(), ErrorTypeDefinite, nil)
}

// retryDelay is the next-retry delay for a holder whose lease ends at
// leaseEnd: just after it, at least minRetryDelay, at most maxDelay (if
// positive). Zero (unknown lease end) leaves the retry policy in charge.
func retryDelay(leaseEnd time.Time, maxDelay time.Duration) time.Duration {
	if leaseEnd.IsZero() {
		return maxDelay
	}
	d := max(time.Until(leaseEnd)+retryMargin, minRetryDelay)
	if maxDelay > 0 {
		d = min(d, maxDelay)
	}
	return d
}

// UnguardedError is the error an interceptor returns for an activity it
// does not guard: err, except that guard.ErrNotInCall (the activity called
// guard.Step without being guarded) becomes the non-retryable application
// error that [TemporalError] makes of it, so that Temporal does not retry
// a programming error. An application error at the top is left as it is.
func UnguardedError(err error) error {
	var ae *temporal.ApplicationError
	if err == nil || !errors.Is(err, guard.ErrNotInCall) || (errors.As(err, &ae) && error(ae) == err) {
		return err
	}
	return TemporalError(err, 0)
}
