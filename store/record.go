package store

import (
	"errors"
	"fmt"
	"time"
)

// Status is the state of a [Record].
type Status uint8

const (
	// StatusInProgress marks a record claimed by a caller that is running
	// the guarded function.
	StatusInProgress Status = iota + 1
	// StatusCompleted marks a record holding the outcome of a finished call.
	StatusCompleted
)

// String returns the status as stores write it: "INPROGRESS" or "COMPLETED",
// the values AWS Powertools uses.
func (s Status) String() string {
	switch s {
	case StatusInProgress:
		return "INPROGRESS"
	case StatusCompleted:
		return "COMPLETED"
	}
	return fmt.Sprintf("Status(%d)", uint8(s))
}

var errNotStatus = errors.New("store: not a record status (INPROGRESS or COMPLETED)")

// UnmarshalText sets s from its text, the inverse of [Status.String]:
// "INPROGRESS" or "COMPLETED". Any other text is an error, and leaves s as
// it was.
func (s *Status) UnmarshalText(text []byte) error {
	switch string(text) {
	case "INPROGRESS":
		*s = StatusInProgress
	case "COMPLETED":
		*s = StatusCompleted
	default:
		// The text is not in the error: a caller that decodes a record
		// names the attribute and the value (a [DecodeError]), and text
		// kept out of it does not escape, so decoding allocates nothing.
		return errNotStatus
	}
	return nil
}

// ResultKind says what the Result of a completed [Record] holds.
type ResultKind uint8

const (
	// ResultValue: Result holds the encoded return value of the guarded
	// function. It is the zero value, so records written by other libraries
	// (AWS Powertools) read as values.
	ResultValue ResultKind = iota
	// ResultError: Result holds an encoded definite error, which replays as
	// an error.
	ResultError
	// ResultUnavailable: the call completed but its result could not be
	// stored (too large, or not encodable); Result is empty and replays fail
	// without running the function again.
	ResultUnavailable
)

// String returns "value", "error" or "unavailable".
func (k ResultKind) String() string {
	switch k {
	case ResultValue:
		return "value"
	case ResultError:
		return "error"
	case ResultUnavailable:
		return "unavailable"
	}
	return fmt.Sprintf("ResultKind(%d)", uint8(k))
}

// Record is one idempotency record.
//
// Records returned by a store belong to the caller, except Result, which may
// share memory with the store's copy and must not be modified.
type Record struct {
	// Key is the idempotency key, "<scope>#<hash>".
	Key string
	// Status is INPROGRESS or COMPLETED.
	Status Status
	// Token is the fencing token of the claim that wrote the record: random
	// per claim, checked by Complete, Extend and Release.
	Token string
	// PayloadHash is the hash of the payload-validation selection, or empty
	// when validation is off.
	PayloadHash string
	// ResultKind says what Result holds.
	ResultKind ResultKind
	// Result holds the encoded outcome of a completed call.
	Result []byte
	// ExpiresAt is the end of the record's life: after it the record is
	// ignored and may be replaced.
	ExpiresAt time.Time
	// LeaseExpiresAt is when an in-progress claim lapses; after it another
	// caller may acquire the key. Zero means the claim holds until ExpiresAt.
	LeaseExpiresAt time.Time
}

// Live reports whether r is live at time now: not expired, and either
// completed or in progress under an unexpired lease. A live record blocks
// [Store.Acquire].
func (r *Record) Live(now time.Time) bool {
	if !now.Before(r.ExpiresAt) {
		return false
	}
	if r.Status == StatusInProgress && !r.LeaseExpiresAt.IsZero() {
		return now.Before(r.LeaseExpiresAt)
	}
	return true
}
