package watermillguard

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/idemguard/idemguard/guard"
)

// ErrPayloadNotJSON: the guard had to read the message payload as JSON —
// to derive the key ([WithKeyFromPayload]) or to validate the payload
// (guard.WithPayloadValidation) — and the payload is not JSON. The handler
// did not run; a redelivery fails the same way. It is returned inside a
// [PermanentError], and matches [guard.ErrInvalidInput] too.
var ErrPayloadNotJSON = errors.New("watermillguard: the message payload is not JSON")

// PermanentError is what the middleware returns for a message that a
// redelivery can only fail the same way, so that a poison-queue
// middleware can take it (see [IsPermanent]):
//
//   - the handler returned a definite error (guard.Definite, or one that
//     guard.WithDefiniteErrors picks), which is recorded: every
//     redelivery replays it;
//   - a redelivery found such a recorded error, or a completed record
//     whose produced messages cannot be replayed
//     ([guard.ErrResultUnavailable]);
//   - the message's key was used before for another payload
//     ([guard.ErrPayloadMismatch], with guard.WithPayloadValidation);
//   - the message cannot be keyed: no key in it ([guard.ErrKeyMissing]),
//     or a payload that the key path or payload validation cannot read
//     ([ErrPayloadNotJSON], [guard.ErrInvalidInput]);
//   - the handler's transaction was refused by its own condition
//     ([guard.ErrRefused], from a guard.DoTx inside the handler): a debit
//     the balance does not cover is refused again on every redelivery,
//     until the balance changes.
//
// Err is the error itself, so errors.Is and errors.As see through a
// PermanentError to the guard's errors and the handler's.
type PermanentError struct {
	// UUID is the message's UUID.
	UUID string
	// Err is the handler's error, or the guard's.
	Err error
}

func (e *PermanentError) Error() string {
	return fmt.Sprintf("watermillguard: message %s fails the same way on every delivery: %v", e.UUID, e.Err)
}

// Unwrap returns Err.
func (e *PermanentError) Unwrap() error { return e.Err }

// IsPermanent reports whether err is, or wraps, a [PermanentError]. Use it
// as the filter of Watermill's poison queue, so that permanent failures
// go to the poison topic (and the message is acknowledged) while the
// others (a duplicate in progress elsewhere, a store failure, a handler
// error that was not recorded) are negatively acknowledged and
// redelivered:
//
//	poison, err := middleware.PoisonQueueWithFilter(pub, "orders.poison", watermillguard.IsPermanent)
func IsPermanent(err error) bool {
	var p *PermanentError
	return errors.As(err, &p)
}

// permanent reports whether a guard error other than the handler's own
// is one a redelivery meets again.
func permanent(err error) bool {
	return errors.Is(err, guard.ErrPayloadMismatch) || errors.Is(err, guard.ErrInvalidInput) ||
		errors.Is(err, guard.ErrKeyMissing) || errors.Is(err, guard.ErrResultUnavailable)
}

// payload is a message payload as the guard's input: its JSON text, which
// the guard reads only to derive a key from the payload or to validate
// it. A payload that is not JSON fails those with ErrPayloadNotJSON.
type payload []byte

// MarshalJSON returns the payload, or ErrPayloadNotJSON.
func (p payload) MarshalJSON() ([]byte, error) {
	if !json.Valid(p) {
		return nil, ErrPayloadNotJSON
	}
	return p, nil
}
