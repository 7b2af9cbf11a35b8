package activity

import (
	"context"
	"errors"
	"time"

	tactivity "go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/store"
)

// Application error types of guard errors, as a workflow sees them in
// temporal.ApplicationError.Type(). They are stable: workflows may match on
// them, and retry policies may list them in NonRetryableErrorTypes. The
// guarded workflows of idemguard's workflow package fail with the same
// types.
//
// Which reach a workflow: every type below can be the error of a guarded
// activity (inside the workflow's *temporal.ActivityError), except that
// the retryable ones reach it only when the activity's retry policy gives
// up (attempts or schedule-to-close timeout exhausted); until then
// Temporal retries them. An invalid option never reaches a workflow from
// [Wrap] or [Interceptor]: they fail when the worker is built.
const (
	// ErrorTypeInProgress: another attempt or workflow holds the key and is
	// running the activity now. Retryable, with a next-retry delay that
	// ends just after the holder's lease can have lapsed (its end plus the
	// guard's clock skew): the retry then replays the holder's result, or
	// runs the activity if the holder failed or died.
	ErrorTypeInProgress = "IdempotencyInProgress"
	// ErrorTypePayloadMismatch: the key was used before with a different
	// payload (see guard.WithPayloadValidation). Non-retryable: the
	// workflow reused a key for a different request. Nothing ran.
	ErrorTypePayloadMismatch = "IdempotencyPayloadMismatch"
	// ErrorTypeKeyMissing: the key selection of the input is empty and the
	// guard requires a key (guard.WithRequireKey). Non-retryable. Nothing
	// ran.
	ErrorTypeKeyMissing = "IdempotencyKeyMissing"
	// ErrorTypeResultUnavailable: the activity completed once, but its
	// result could not be stored or can no longer be decoded. The side
	// effect will not run again. Non-retryable.
	ErrorTypeResultUnavailable = "IdempotencyResultUnavailable"
	// ErrorTypeInvalidInput: the input cannot be turned into a key (not
	// JSON-serialisable, a string that is not valid UTF-8, or a JMESPath
	// function failed), or the key header is malformed. Non-retryable.
	// Nothing ran.
	ErrorTypeInvalidInput = "IdempotencyInvalidInput"
	// ErrorTypeInvalidOption: a guard option is invalid. Non-retryable.
	// [Wrap] and [Interceptor] return invalid options instead, when
	// the worker is built; this type comes from [DoBatch], [TemporalError]
	// and guard.Step options.
	ErrorTypeInvalidOption = "IdempotencyInvalidOption"
	// ErrorTypeNotInCall: the activity called guard.Step, but it is not
	// guarded ([Wrap], [Interceptor]), so there is no call to derive
	// the step's key from. The step did not run. Non-retryable: a
	// programming error that no retry mends.
	ErrorTypeNotInCall = "IdempotencyNotInCall"
	// ErrorTypeLeaseLost: the activity ran, but its claim was taken over
	// before it could record the outcome (it ran past its lease, for
	// example while paused). Nothing was recorded. Retryable: the retry
	// replays the new holder's result.
	ErrorTypeLeaseLost = "IdempotencyLeaseLost"
	// ErrorTypeNotRecorded: the activity ran, but the store kept failing
	// while the guard recorded the result. The side effect may have
	// happened. Retryable; the retry may run the activity again.
	ErrorTypeNotRecorded = "IdempotencyNotRecorded"
	// ErrorTypeStore: the store failed before the activity ran. Retryable.
	ErrorTypeStore = "IdempotencyStoreError"
	// ErrorTypeStoreThrottled: the store throttled the guard before the
	// activity ran. Retryable.
	ErrorTypeStoreThrottled = "IdempotencyStoreThrottled"
	// ErrorTypeRefused: the activity's transaction (guard.DoTx) was
	// refused at commit by its own condition or constraint
	// (guard.ErrRefused), such as a debit the balance does not cover.
	// Nothing of it was written and its key was released. Non-retryable:
	// a business outcome, which a retry meets again until what the
	// condition checks changes; the workflow decides what follows (a
	// compensation, a later attempt of its own).
	ErrorTypeRefused = "IdempotencyRefused"
	// ErrorTypeDefinite: the activity returned an error marked with
	// guard.Definite that is not a non-retryable Temporal application
	// error. It was stored; it and its replays are returned as
	// non-retryable application errors with its message.
	ErrorTypeDefinite = "IdempotencyDefiniteError"
)

// minRetryDelay is the shortest next-retry delay given for
// [ErrorTypeInProgress]; retryMargin is added to the holder's lease end and
// the guard's clock skew (a claimant takes a claim over only once its
// lease has lapsed by more than the skew on the claimant's clock), so that
// the retry finds the lease lapsed despite rounding and scheduling.
const (
	minRetryDelay = 100 * time.Millisecond
	retryMargin   = 250 * time.Millisecond
)

// TemporalError converts an error returned by a guard (guard.Do, Claim, …)
// into the error a Temporal activity or workflow should return, unwrapped
// so that Temporal sees its type and retryability:
//
//	guard error                    application error type         retryable
//	guard.ErrInProgress            IdempotencyInProgress          yes, NextRetryDelay = holder's lease
//	                                                              end + clock skew + 250 ms
//	guard.ErrPayloadMismatch       IdempotencyPayloadMismatch     no
//	guard.ErrKeyMissing            IdempotencyKeyMissing          no
//	guard.ErrResultUnavailable     IdempotencyResultUnavailable   no
//	guard.ErrInvalidInput          IdempotencyInvalidInput        no
//	guard.ErrInvalidOption         IdempotencyInvalidOption       no
//	adapt.ErrNotInCall             IdempotencyNotInCall           no
//	guard.ErrRefused               IdempotencyRefused             no
//	guard.ErrLeaseLost             IdempotencyLeaseLost           yes
//	guard.ErrNotRecorded           IdempotencyNotRecorded         yes
//	guard.ErrStore, throttled      IdempotencyStoreThrottled      yes
//	guard.ErrStore                 IdempotencyStoreError          yes
//	guard.Definite(err)            err if it is a non-retryable   no
//	                               application error, else
//	                               IdempotencyDefiniteError
//
// A lost lease wins over every other condition: the guard reports
// guard.ErrLeaseLost whenever the call's claim was taken over, whatever
// the function returned. The message is the guard error's. Nil,
// [go.temporal.io/sdk/activity.ErrResultPending], context errors, and every
// other error (the activity's own) are returned untouched.
//
// Guarded activities return their errors through TemporalError already,
// including errors of guard.Step inside them, with the next-retry delay
// of their guard's clock skew; call it in activities that call guard.Do
// themselves. It counts [adapt.DefaultClockSkew]: with a guard of a larger
// skew (guard.WithClockSkew) the first retry may find the key held once
// more, and is retried again shortly after.
func TemporalError(err error) error {
	return temporalError(err, 0, adapt.DefaultClockSkew)
}

// temporalError is [TemporalError] with maxDelay capping the next-retry
// delay of [ErrorTypeInProgress] (0: until the holder's lease can have
// lapsed), for a guard whose clock-skew tolerance is skew.
func temporalError(err error, maxDelay, skew time.Duration) error {
	if err == nil || errors.Is(err, tactivity.ErrResultPending) {
		return err
	}
	var ae *temporal.ApplicationError
	if errors.As(err, &ae) && error(ae) == err {
		return err
	}
	var ip *adapt.InProgressError
	switch {
	// Retryable: the activity may have run, and a retry replays what the
	// new holder records, or runs again.
	case errors.Is(err, guard.ErrLeaseLost):
		return temporal.NewApplicationError(err.Error(), ErrorTypeLeaseLost)
	case errors.Is(err, guard.ErrNotRecorded):
		return temporal.NewApplicationError(err.Error(), ErrorTypeNotRecorded)
	case errors.As(err, &ip):
		return temporal.NewApplicationErrorWithOptions(err.Error(), ErrorTypeInProgress, temporal.ApplicationErrorOptions{
			NextRetryDelay: retryDelay(ip.LeaseExpiresAt, maxDelay, skew),
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
	case errors.Is(err, adapt.ErrNotInCall):
		// guard.Step in an activity that is not guarded: a programming
		// error that no retry mends.
		return temporal.NewNonRetryableApplicationError(err.Error(), ErrorTypeNotInCall, nil)
	case errors.Is(err, guard.ErrRefused):
		// The function's own condition refused its transaction: a
		// business outcome for the workflow, not a failure to retry.
		return temporal.NewNonRetryableApplicationError(err.Error(), ErrorTypeRefused, nil)
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
		return definiteError(err)
	}
	return err
}

// definiteError returns the non-retryable application error a definite
// error is returned and stored as: err's own non-retryable application
// error if it holds one, else one of type [ErrorTypeDefinite] with err's
// message.
func definiteError(err error) error {
	var ae *temporal.ApplicationError
	if errors.As(err, &ae) && ae.NonRetryable() {
		return ae
	}
	return temporal.NewNonRetryableApplicationError(err.Error(), ErrorTypeDefinite, nil)
}

// retryDelay is the next-retry delay for a holder whose lease ends at
// leaseEnd, met by a guard whose clock-skew tolerance is skew: just after
// the lease can have lapsed on that guard's clock (leaseEnd + skew), at
// least minRetryDelay, at most maxDelay (if positive). Zero (unknown lease
// end) leaves the retry policy in charge.
func retryDelay(leaseEnd time.Time, maxDelay, skew time.Duration) time.Duration {
	if leaseEnd.IsZero() {
		return maxDelay
	}
	d := max(time.Until(leaseEnd)+skew+retryMargin, minRetryDelay)
	if maxDelay > 0 {
		d = min(d, maxDelay)
	}
	return d
}

// unguardedError is the error the interceptor returns for an activity it
// does not guard: err, except that adapt.ErrNotInCall (the activity called
// guard.Step without being guarded) becomes the non-retryable application
// error that [TemporalError] makes of it, so that Temporal does not retry
// a programming error. An application error at the top is left as it is.
func unguardedError(err error) error {
	var ae *temporal.ApplicationError
	if err == nil || !errors.Is(err, adapt.ErrNotInCall) || (errors.As(err, &ae) && error(ae) == err) {
		return err
	}
	return TemporalError(err)
}
