package activity

import (
	"github.com/idemguard/idemguard/internal/temporalglue"
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
// [Guard] or [NewInterceptor]: they panic when the worker is built.
const (
	// ErrorTypeInProgress: another attempt or workflow holds the key and is
	// running the activity now. Retryable, with a next-retry delay that
	// ends just after the holder's lease: the retry then replays the
	// holder's result, or runs the activity if the holder failed or died.
	ErrorTypeInProgress = temporalglue.ErrorTypeInProgress
	// ErrorTypePayloadMismatch: the key was used before with a different
	// payload (see guard.WithPayloadValidation). Non-retryable: the
	// workflow reused a key for a different request. Nothing ran.
	ErrorTypePayloadMismatch = temporalglue.ErrorTypePayloadMismatch
	// ErrorTypeKeyMissing: the key selection of the input is empty and the
	// guard requires a key (guard.WithRequireKey). Non-retryable. Nothing
	// ran.
	ErrorTypeKeyMissing = temporalglue.ErrorTypeKeyMissing
	// ErrorTypeResultUnavailable: the activity completed once, but its
	// result could not be stored or can no longer be decoded. The side
	// effect will not run again. Non-retryable.
	ErrorTypeResultUnavailable = temporalglue.ErrorTypeResultUnavailable
	// ErrorTypeInvalidInput: the input cannot be turned into a key (not
	// JSON-serialisable, a string that is not valid UTF-8, or a JMESPath
	// function failed), or the key header is malformed. Non-retryable.
	// Nothing ran.
	ErrorTypeInvalidInput = temporalglue.ErrorTypeInvalidInput
	// ErrorTypeInvalidOption: a guard option is invalid. Non-retryable.
	// [Guard] and [NewInterceptor] panic on invalid options instead, when
	// the worker is built; this type comes from [DoBatch], [TemporalError]
	// and guard.Step options.
	ErrorTypeInvalidOption = temporalglue.ErrorTypeInvalidOption
	// ErrorTypeNotInCall: the activity called guard.Step, but it is not
	// guarded ([Guard], [NewInterceptor]), so there is no call to derive
	// the step's key from. The step did not run. Non-retryable: a
	// programming error that no retry mends.
	ErrorTypeNotInCall = temporalglue.ErrorTypeNotInCall
	// ErrorTypeLeaseLost: the activity ran, but its claim was taken over
	// before it could record the outcome (it ran past its lease, for
	// example while paused). Nothing was recorded. Retryable: the retry
	// replays the new holder's result.
	ErrorTypeLeaseLost = temporalglue.ErrorTypeLeaseLost
	// ErrorTypeNotRecorded: the activity ran, but the store kept failing
	// while the guard recorded the result. The side effect may have
	// happened. Retryable; the retry may run the activity again.
	ErrorTypeNotRecorded = temporalglue.ErrorTypeNotRecorded
	// ErrorTypeStore: the store failed before the activity ran. Retryable.
	ErrorTypeStore = temporalglue.ErrorTypeStore
	// ErrorTypeStoreThrottled: the store throttled the guard before the
	// activity ran. Retryable.
	ErrorTypeStoreThrottled = temporalglue.ErrorTypeStoreThrottled
	// ErrorTypeDefinite: the activity returned an error marked with
	// guard.Definite that is not a non-retryable Temporal application
	// error. It was stored; it and its replays are returned as
	// non-retryable application errors with its message.
	ErrorTypeDefinite = temporalglue.ErrorTypeDefinite
)

// TemporalError converts an error returned by a guard (guard.Do, Claim, …)
// into the error a Temporal activity should return, unwrapped so that
// Temporal sees its type and retryability:
//
//	guard error                    application error type         retryable
//	guard.ErrInProgress            IdempotencyInProgress          yes, NextRetryDelay = holder's lease end
//	guard.ErrPayloadMismatch       IdempotencyPayloadMismatch     no
//	guard.ErrKeyMissing            IdempotencyKeyMissing          no
//	guard.ErrResultUnavailable     IdempotencyResultUnavailable   no
//	guard.ErrInvalidInput          IdempotencyInvalidInput        no
//	guard.ErrInvalidOption         IdempotencyInvalidOption       no
//	guard.ErrNotInCall             IdempotencyNotInCall           no
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
// including errors of guard.Step inside them; call it in activities that
// call guard.Do themselves.
func TemporalError(err error) error {
	return temporalglue.TemporalError(err, 0)
}
