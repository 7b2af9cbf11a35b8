package store

import (
	"fmt"
	"strings"
)

// OpError is the error every store returns when an operation fails: it
// names the store, the operation, the key and the resource (a table, a key
// prefix), each once, and wraps the cause (the client's error, reachable
// with errors.As; a [*DecodeError]; an error matching [ErrTooLarge]).
//
// An OpError whose cause means "the store cannot take this now, try again
// later" matches [ErrThrottled] with errors.Is; each store documents which
// causes those are. One whose cause is the guarded function's own refusal
// (a transaction's commit refused because of the function's writes)
// matches [ErrRefused].
type OpError struct {
	// Store names the store: "dynamodb", "redis", "postgres".
	Store string
	// Op is the store method: "Acquire", "Complete", "Extend", "Release",
	// "Get", "GetMany", "List", "Delete", "Purge", "Watch", or a transaction's
	// "Begin", "Tx.Complete", "Tx.Commit", "Tx.Rollback".
	Op string
	// Key is the idempotency key, or "" for an operation on many (for
	// GetMany, the first key of the failed request).
	Key string
	// Resource is where the store keeps records: a table, or a key prefix.
	Resource string
	// Err is the cause.
	Err error
	// Throttled reports that the cause means "retry later".
	Throttled bool
	// Refused reports that the cause is the guarded function's own
	// refusal ([ErrRefused]).
	Refused bool
}

// Error describes the failed operation and its cause, for example
// `dynamodb: Acquire "charge#ab12…" in table "idempotency": …`.
func (e *OpError) Error() string {
	var b strings.Builder
	b.WriteString(e.Store)
	b.WriteString(": ")
	b.WriteString(e.Op)
	if e.Key != "" {
		fmt.Fprintf(&b, " %q", e.Key)
	}
	if e.Resource != "" {
		fmt.Fprintf(&b, " in %s", e.Resource)
	}
	b.WriteString(": ")
	if e.Err != nil {
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns the cause.
func (e *OpError) Unwrap() error { return e.Err }

// Is reports whether target is [ErrThrottled] and the cause is throttling,
// or [ErrRefused] and the cause is the function's refusal.
func (e *OpError) Is(target error) bool {
	return (target == ErrThrottled && e.Throttled) || (target == ErrRefused && e.Refused)
}

// DecodeError says why a stored item cannot be read as a [Record]: which
// attribute (a DynamoDB attribute, a Redis hash field, a PostgreSQL
// column) is at fault and why. It matches [ErrCorrupt].
type DecodeError struct {
	// Attr is the attribute at fault, or "" when the item as a whole is
	// not a record (a Redis key that is not a hash).
	Attr string
	// Reason says what is wrong with it, e.g. "is missing" or "is not a
	// number".
	Reason string
	// Err is the underlying error, if any (for example from gzip).
	Err error
}

// Error says which attribute is at fault and why.
func (e *DecodeError) Error() string {
	s := "corrupt record: "
	if e.Attr != "" {
		s += fmt.Sprintf("attribute %q ", e.Attr)
	}
	s += e.Reason
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Is reports whether target is [ErrCorrupt].
func (e *DecodeError) Is(target error) bool { return target == ErrCorrupt }

// Unwrap returns the underlying error.
func (e *DecodeError) Unwrap() error { return e.Err }
