package lambdaguard

import (
	"encoding/json"
	"errors"
	"reflect"

	"github.com/aws/aws-lambda-go/lambda/messages"

	"github.com/idemguard/idemguard/guard"
)

// The errors a wrapper returns to the Lambda runtime for what the guard
// decided. The runtime reports an error's type name as the invocation's
// errorType, so these carry the names AWS Powertools' errors have: a Step
// Functions Retry or Catch on "IdempotencyAlreadyInProgressError", or a
// log metric filter on it, keeps working after a migration. Each wraps
// the guard's error, so errors.Is(err, guard.ErrInProgress) and the other
// sentinels hold.
type (
	// IdempotencyAlreadyInProgressError is [guard.ErrInProgress]: another
	// invocation holds the event's key. The handler did not run here;
	// retrying later replays the other invocation's result, or runs the
	// handler if that invocation died (its claim lapses at its deadline).
	IdempotencyAlreadyInProgressError struct{ Err error }
	// IdempotencyValidationError is [guard.ErrPayloadMismatch]: the key was
	// used by an event whose payload (guard.WithPayloadValidation)
	// differs. The handler did not run; retrying fails the same way.
	IdempotencyValidationError struct{ Err error }
	// IdempotencyKeyError is [guard.ErrKeyMissing] (the key path selected
	// nothing and guard.WithRequireKey(true)) or [guard.ErrInvalidInput]
	// (the event cannot be keyed: the key path failed on it). The handler
	// did not run; retrying fails the same way.
	IdempotencyKeyError struct{ Err error }
	// IdempotencyPersistenceLayerError is [guard.ErrStore]: the store
	// failed. The handler did not run, unless the store failed after it
	// (its result was then not recorded, and the guard logged it);
	// retrying is safe.
	IdempotencyPersistenceLayerError struct{ Err error }
	// IdempotencyLeaseLostError is [guard.ErrLeaseLost]: the handler ran,
	// but its answer was not recorded, because the invocation's claim
	// lapsed and another invocation took the key over. Powertools has no
	// such error; it is named as its errors are, so that a caller can
	// tell it from the handler's own error. Retrying replays the other
	// invocation's answer once it is recorded.
	IdempotencyLeaseLostError struct{ Err error }
)

func (e *IdempotencyAlreadyInProgressError) Error() string { return e.Err.Error() }
func (e *IdempotencyAlreadyInProgressError) Unwrap() error { return e.Err }
func (e *IdempotencyValidationError) Error() string        { return e.Err.Error() }
func (e *IdempotencyValidationError) Unwrap() error        { return e.Err }
func (e *IdempotencyKeyError) Error() string               { return e.Err.Error() }
func (e *IdempotencyKeyError) Unwrap() error               { return e.Err }
func (e *IdempotencyPersistenceLayerError) Error() string  { return e.Err.Error() }
func (e *IdempotencyPersistenceLayerError) Unwrap() error  { return e.Err }
func (e *IdempotencyLeaseLostError) Error() string         { return e.Err.Error() }
func (e *IdempotencyLeaseLostError) Unwrap() error         { return e.Err }

// lambdaError maps the error of a guarded call to what the wrapper
// returns: the guard's decisions to the errors above, anything else (the
// handler's own error, a replayed one) as it is. It is the one place the
// guard's errors are mapped.
func lambdaError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, guard.ErrInProgress):
		return &IdempotencyAlreadyInProgressError{err}
	case errors.Is(err, guard.ErrPayloadMismatch):
		return &IdempotencyValidationError{err}
	case errors.Is(err, guard.ErrKeyMissing), errors.Is(err, guard.ErrInvalidInput):
		return &IdempotencyKeyError{err}
	case errors.Is(err, guard.ErrStore):
		return &IdempotencyPersistenceLayerError{err}
	case errors.Is(err, guard.ErrLeaseLost):
		return &IdempotencyLeaseLostError{err}
	case reflect.TypeOf(err) == definiteType:
		// guard.Definite's mark: report the error it marks, as replays
		// of it are reported.
		return messages.InvokeResponse_Error{Message: err.Error(), Type: errorType(err)}
	}
	return err
}

// definiteType is the type of guard.Definite's errors.
var definiteType = reflect.TypeOf(guard.Definite(errors.New("")))

// invokeErrors is the wrapper's default guard.ErrorCodec: a definite
// error (guard.Definite, guard.WithDefiniteErrors) is stored as the
// runtime reports it, its errorType and errorMessage, and replayed as a
// messages.InvokeResponse_Error, which the runtime reports with the same
// type and message.
type invokeErrors struct{}

type storedInvokeError struct {
	Message string `json:"errorMessage"`
	Type    string `json:"errorType"`
}

func (invokeErrors) EncodeError(err error) ([]byte, error) {
	var ie messages.InvokeResponse_Error
	if errors.As(err, &ie) {
		return json.Marshal(storedInvokeError{ie.Message, ie.Type})
	}
	return json.Marshal(storedInvokeError{err.Error(), errorType(err)})
}

func (invokeErrors) DecodeError(data []byte) error {
	var s storedInvokeError
	if err := json.Unmarshal(data, &s); err != nil {
		return err
	}
	return messages.InvokeResponse_Error{Message: s.Message, Type: s.Type}
}

// errorType names err's type as the runtime does: the name of its type, or
// of the type it points to; for an error marked with guard.Definite, the
// marked error's.
func errorType(err error) string {
	for reflect.TypeOf(err) == definiteType && errors.Unwrap(err) != nil {
		err = errors.Unwrap(err)
	}
	t := reflect.TypeOf(err)
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.Name()
}
