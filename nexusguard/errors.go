package nexusguard

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nexus-rpc/sdk-go/nexus"
	failurepb "go.temporal.io/api/failure/v1"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/protobuf/proto"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/internal/temporalerr"
	"github.com/idemguard/idemguard/store"
)

// ErrorTypeStartedElsewhere is the application error type of the cause of
// the handler error (CONFLICT, not retryable) that refuses an
// asynchronous start keyed on its input (guard.WithKeyPath) when the key
// was started by another operation: its workflow runs, but with the other
// operation's callback, so this operation would never learn its outcome.
// Key asynchronous operations on the request ID, the default.
const ErrorTypeStartedElsewhere = "IdempotencyStartedElsewhere"

// nexusError converts the error of a guarded start, whose call ended with
// outcome out under a guard whose clock-skew tolerance is skew, into what
// the Nexus machinery should get:
//
//	error                                  Nexus error                          retryable
//	a *nexus.HandlerError at the top       as it is                             its own
//	guard.ErrLeaseLost, ErrNotRecorded     handler error INTERNAL               yes
//	guard.ErrInProgress                    handler error UNAVAILABLE            yes, retry hint in the cause
//	guard.ErrPayloadMismatch,              handler error BAD_REQUEST            no
//	ErrKeyMissing, ErrInvalidInput
//	guard.ErrResultUnavailable,            handler error INTERNAL               no
//	ErrInvalidOption, ErrNotInCall
//	a store error, throttled               handler error RESOURCE_EXHAUSTED     yes
//	a store error                          handler error UNAVAILABLE            yes
//	a recorded (definite) error            the *nexus.OperationError it holds,  (the operation ends)
//	                                       else a failed one with its message
//	any other error (the handler's own,    as it is
//	which released the key)
//
// The cause of each handler error is the Temporal application error that
// package activity makes of the guard error (activity.TemporalError), so
// that a caller workflow matches the same types for activities and Nexus
// operations; an in-progress error's cause carries the holder's lease end
// plus skew as its next-retry delay.
func nexusError(err error, out guard.Outcome, skew time.Duration) error {
	if err == nil {
		return nil
	}
	if _, ok := err.(*nexus.HandlerError); ok {
		return err
	}
	if typ, retry := classify(err); typ != "" {
		return &nexus.HandlerError{Type: typ, Message: err.Error(), Cause: temporalerr.FromGuard(err, 0, skew), RetryBehavior: retry}
	}
	switch out {
	case guard.OutcomeExecuted, guard.OutcomeReplayed, guard.OutcomeShared:
		// A definite error, recorded: the operation's outcome, the same
		// on the start that ran and on every replay.
		return operationError(err)
	}
	return err
}

// classify returns the handler error type and retry behaviour of a guard
// error, or "" for any other error.
func classify(err error) (nexus.HandlerErrorType, nexus.HandlerErrorRetryBehavior) {
	const retry, final = nexus.HandlerErrorRetryBehaviorRetryable, nexus.HandlerErrorRetryBehaviorNonRetryable
	switch {
	// The handler may have run; a retry replays what the new holder
	// records, or runs again.
	case errors.Is(err, guard.ErrLeaseLost), errors.Is(err, guard.ErrNotRecorded):
		return nexus.HandlerErrorTypeInternal, retry
	case errors.Is(err, guard.ErrInProgress):
		return nexus.HandlerErrorTypeUnavailable, retry
	// The request is wrong: a retry fails the same way.
	case errors.Is(err, guard.ErrPayloadMismatch), errors.Is(err, guard.ErrKeyMissing), errors.Is(err, guard.ErrInvalidInput):
		return nexus.HandlerErrorTypeBadRequest, final
	case errors.Is(err, guard.ErrResultUnavailable), errors.Is(err, guard.ErrInvalidOption), errors.Is(err, adapt.ErrNotInCall):
		return nexus.HandlerErrorTypeInternal, final
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// The request timed out while the guard talked to the store;
		// the SDK drops the response and the caller retries.
		return "", 0
	// The store failed before the handler ran.
	case errors.Is(err, store.ErrThrottled):
		return nexus.HandlerErrorTypeResourceExhausted, retry
	case errors.Is(err, guard.ErrStore):
		return nexus.HandlerErrorTypeUnavailable, retry
	}
	return "", 0
}

// isDefinite is the package's default definite-error predicate: operation
// errors (the operation failed or was canceled) and errors marked with
// guard.Definite are recorded and replayed.
func isDefinite(err error) bool {
	var oe *nexus.OperationError
	return errors.As(err, &oe) || guard.IsDefinite(err)
}

// operationError is the operation error a recorded error is stored and
// returned as: the *nexus.OperationError it holds, else a failed one with
// its message.
func operationError(err error) *nexus.OperationError {
	var oe *nexus.OperationError
	if errors.As(err, &oe) {
		return oe
	}
	return &nexus.OperationError{State: nexus.OperationStateFailed, Message: err.Error()}
}

// startedElsewhere is the error of an asynchronous start keyed on its
// input whose key another operation started (see
// [ErrorTypeStartedElsewhere]); concurrent reports that the other start
// runs in this process now, which a retry may find to be this
// operation's own.
func startedElsewhere(concurrent bool) error {
	if concurrent {
		return &nexus.HandlerError{
			Type:          nexus.HandlerErrorTypeUnavailable,
			Message:       "idemguard: a concurrent asynchronous start holds this operation's key",
			RetryBehavior: nexus.HandlerErrorRetryBehaviorRetryable,
		}
	}
	msg := "idemguard: another operation started the asynchronous operation keyed as this one; key asynchronous operations on the request ID"
	return &nexus.HandlerError{
		Type:          nexus.HandlerErrorTypeConflict,
		Message:       msg,
		Cause:         temporal.NewNonRetryableApplicationError(msg, ErrorTypeStartedElsewhere, nil),
		RetryBehavior: nexus.HandlerErrorRetryBehaviorNonRetryable,
	}
}

// errorCodec is the [adapt.ErrorCodec] of guarded starts: it stores a
// recorded error as the operation error it is returned as (see
// operationError), in the form of a Temporal failure (protobuf binary)
// whose cause is encoded by the failure converter over the call's data
// converter, and replays a *nexus.OperationError with the same state,
// message and cause. The SDK then makes the same failure of it for the
// caller as of the first start's.
type errorCodec struct {
	fc converter.FailureConverter
}

func newErrorCodec(dc converter.DataConverter) errorCodec {
	return errorCodec{temporal.NewDefaultFailureConverter(temporal.DefaultFailureConverterOptions{DataConverter: dc})}
}

// operationErrorType is the application error type the SDK gives a failed
// operation's error.
const operationErrorType = "OperationError"

func (c errorCodec) EncodeError(err error) ([]byte, error) {
	oe := operationError(err)
	f := &failurepb.Failure{Message: oe.Message}
	if oe.State == nexus.OperationStateCanceled {
		f.FailureInfo = &failurepb.Failure_CanceledFailureInfo{CanceledFailureInfo: &failurepb.CanceledFailureInfo{}}
	} else {
		f.FailureInfo = &failurepb.Failure_ApplicationFailureInfo{ApplicationFailureInfo: &failurepb.ApplicationFailureInfo{Type: operationErrorType, NonRetryable: true}}
	}
	if oe.Cause != nil {
		f.Cause = c.fc.ErrorToFailure(oe.Cause)
	}
	return proto.Marshal(f)
}

func (c errorCodec) DecodeError(data []byte) error {
	f := &failurepb.Failure{}
	if err := proto.Unmarshal(data, f); err != nil {
		return fmt.Errorf("%w: the stored error is not a Temporal failure: %w", guard.ErrResultUnavailable, err)
	}
	oe := &nexus.OperationError{State: nexus.OperationStateFailed, Message: f.GetMessage()}
	switch {
	case f.GetCanceledFailureInfo() != nil:
		oe.State = nexus.OperationStateCanceled
	case f.GetApplicationFailureInfo() == nil:
		return fmt.Errorf("%w: the stored failure is not an operation error", guard.ErrResultUnavailable)
	}
	if f.GetCause() != nil {
		oe.Cause = c.fc.FailureToError(f.GetCause())
	}
	return oe
}

var _ adapt.ErrorCodec = errorCodec{}
