// Package guardhook holds what package guard hands the project's adapters
// and keeps out of its users' namespace: the types adapters name (a call's
// settings, the two-step claim, the clock, the error codec, the detailed
// errors), the defaults, and hooks to guard's unexported functions. Package
// guard sets the hooks when it is initialised (the accessor pattern of
// grpc-go's internal packages); since this package cannot import guard,
// hooks whose signatures name guard's types are typed any, and package
// internal/adapt gives adapters them typed. Users never see either.
package guardhook

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/idemguard/idemguard/store"
)

// DisableEnv is the environment variable that, set to a true value ("true",
// "1"), makes every guard built afterwards a pass-through that runs the
// function and touches no store.
const DisableEnv = "IDEMGUARD_DISABLED"

// Defaults used when an option is not given.
const (
	// DefaultTTL is how long a completed record is replayed.
	DefaultTTL = time.Hour
	// DefaultLease is the in-progress lease when the context has no
	// deadline and no lease is given. The lease is extended while the
	// function runs, so it bounds only how long duplicates wait after a
	// crash.
	DefaultLease = time.Minute
	// MinLease is the shortest lease the guard takes, whatever the context
	// deadline says.
	MinLease = time.Second
	// DefaultClockSkew is how far a claimant's clock may run ahead of a
	// holder's before the claimant could take over a live claim.
	DefaultClockSkew = time.Second
	// DefaultWaitBudget is how long a call waits for another holder in
	// [Wait] mode when it is given no budget of its own.
	DefaultWaitBudget = 30 * time.Second
	// DefaultWaitInitial and DefaultWaitMax bound the backoff between polls
	// in [Wait] mode.
	DefaultWaitInitial = 20 * time.Millisecond
	DefaultWaitMax     = time.Second
	// DefaultConcurrency is how many items of a batch run at once.
	DefaultConcurrency = 8
)

// Mode says what a call does when another call holds the key.
type Mode uint8

const (
	// Reject returns ErrInProgress at once (the default).
	Reject Mode = iota
	// Wait polls the store with backoff and jitter until the other call
	// completes, fails or lapses, or the wait budget ends.
	Wait
)

// String returns "reject" or "wait".
func (m Mode) String() string {
	if m == Wait {
		return "wait"
	}
	return "reject"
}

// CallSettings are the settings a call gets from the guard's defaults and
// its options, for adapters that act on them (a workflow guard that waits
// on workflow timers, an HTTP layer that announces a record's expiry).
type CallSettings struct {
	// TTL is how long a completed record is replayed.
	TTL time.Duration
	// Lease is the in-progress lease; zero means the time left until the
	// context's deadline, else [DefaultLease].
	Lease time.Duration
	// Mode is what a call does when another holds the key, and WaitBudget
	// how long it waits in [Wait] mode.
	Mode       Mode
	WaitBudget time.Duration
	// WaitInitial and WaitMax are the first and the longest pause between
	// polls in Wait mode.
	WaitInitial, WaitMax time.Duration
	// KeyPath is the key path's expression; "" when the key is derived
	// from the whole input.
	KeyPath string
}

// Claim is a held claim on a key, for callers that cannot run the guarded
// work inside a call: a Temporal workflow, which claims and completes
// through separate activities. A Claim is a plain value that survives JSON
// encoding, so it can travel between those steps. Nothing extends a
// Claim's lease on its own.
type Claim struct {
	// Key is the idempotency key, "<scope>#<hash>".
	Key string `json:"key"`
	// Scope is the scope part of Key.
	Scope string `json:"scope,omitempty"`
	// Token is the claim's fencing token; empty for the claims of a
	// disabled guard, which hold nothing.
	Token string `json:"token"`
	// PayloadHash is the payload-validation hash, if validation is on.
	PayloadHash string `json:"payload_hash,omitempty"`
	// LeaseExpiresAt is when the claim lapses unless extended.
	LeaseExpiresAt time.Time `json:"lease_expires_at"`
}

// Clock is the guard's time source. It must be safe for concurrent use.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// AfterFunc calls f in its own goroutine once d has passed, unless stop
	// is called first; stop reports whether it prevented the call.
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

// ErrorCodec encodes definite errors for the store and decodes them on
// replay. It must be safe for concurrent use.
type ErrorCodec interface {
	EncodeError(err error) ([]byte, error)
	DecodeError(data []byte) error
}

// JSONCodec is the default codec of results: encoding/json's Marshal and
// Unmarshal.
type JSONCodec struct{}

// Marshal returns json.Marshal(v).
func (JSONCodec) Marshal(v any) ([]byte, error) { return json.Marshal(v) }

// Unmarshal is json.Unmarshal.
func (JSONCodec) Unmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }

// MessageErrors is the default [ErrorCodec]: it stores the error's message
// as {"message": "..."} and replays a [*ReplayedError].
var MessageErrors ErrorCodec = messageErrors{}

type messageErrors struct{}

type storedMessage struct {
	Message string `json:"message"`
}

func (messageErrors) EncodeError(err error) ([]byte, error) {
	return json.Marshal(storedMessage{err.Error()})
}

func (messageErrors) DecodeError(data []byte) error {
	var m storedMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return err
	}
	return &ReplayedError{Message: m.Message}
}

// The errors behind the detailed error types; package guard exports them
// under the same names.
var (
	ErrInProgress      = errors.New("idemguard: a call with this key is in progress")
	ErrPayloadMismatch = errors.New("idemguard: idempotency key reused with a different payload")
	ErrRefused         = errors.New("idemguard: transaction refused by the function's own condition")
	ErrStore           = errors.New("idemguard: store failed")
	// ErrNotInCall is returned by guard.Step called outside a guarded
	// call: there is no call whose record the step could join.
	ErrNotInCall = errors.New("idemguard: guard.Step called outside a guarded call")
)

// InProgressError is the ErrInProgress error.
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

// Is reports whether target is ErrInProgress.
func (e *InProgressError) Is(target error) bool { return target == ErrInProgress }

// MismatchError is the ErrPayloadMismatch error.
type MismatchError struct {
	// Key is the idempotency key.
	Key string
	// Path is the payload-validation expression whose selection differs,
	// such as "amount".
	Path string
	// PayloadHash is the hash of this call's validation selection.
	PayloadHash string
	// Existing is the record found under Key.
	Existing *store.Record
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("%v: %q selects something else than the %v record holds (key %s)", ErrPayloadMismatch, e.Path, e.Existing.Status, e.Key)
}

// Is reports whether target is ErrPayloadMismatch.
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

// Is reports whether target is ErrStore.
func (e *StoreError) Is(target error) bool { return target == ErrStore }

// RefusedError is the ErrRefused error.
type RefusedError struct {
	// Key is the idempotency key; "" for a call that ran unguarded.
	Key string
	// Err is the store's error, which says what refused the transaction.
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

// Is reports whether target is ErrRefused.
func (e *RefusedError) Is(target error) bool { return target == ErrRefused }

// PanicError is what callers that shared an execution in this process get
// when the function panicked; DoBatch panics with one, which keeps the
// panicking item's stack.
type PanicError struct {
	// Value is the value passed to panic.
	Value any
	// Stack is the panicking goroutine's stack.
	Stack []byte
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("idemguard: guarded function panicked: %v", e.Value)
}

// ReplayedError is how the default error codec replays a stored definite
// error: its message, without its type.
type ReplayedError struct {
	// Message is the original error's text.
	Message string
}

func (e *ReplayedError) Error() string { return e.Message }

// DefiniteError marks an error returned through guard.Definite.
type DefiniteError struct{ Err error }

func (e *DefiniteError) Error() string { return e.Err.Error() }

// Unwrap returns the marked error.
func (e *DefiniteError) Unwrap() error { return e.Err }

// IsDefinite reports whether err was marked with guard.Definite, or is a
// definite error replayed by the default error codec (a [*ReplayedError]:
// only definite errors are stored). It is the default definite-error
// predicate.
func IsDefinite(err error) bool {
	var d *DefiniteError
	var r *ReplayedError
	return errors.As(err, &d) || errors.As(err, &r)
}

// Hooks package guard sets when it is initialised. Each comment gives the
// hook's type; package internal/adapt asserts it.
var (
	// Lift is func(guard.CallOption) guard.SharedOption: a call option an
	// adapter's user gave, applied as a guard default or to a batch's
	// items, where one naming a single call is refused at run time.
	Lift any
	// Fixed is func(...guard.CallOption) guard.CallOption.
	Fixed any
	// WithDefaults is func(...guard.CallOption) guard.CallOption.
	WithDefaults any
	// WithClaimToken is func(string) guard.CallOption.
	WithClaimToken any
	// WithClock is func(Clock) guard.Option.
	WithClock any
	// WithErrorCodec is func(ErrorCodec) guard.SharedOption.
	WithErrorCodec any
	// WithWaitBackoff is func(initial, max time.Duration) guard.SharedOption.
	WithWaitBackoff any
	// WithSpanAttributes is func(...attribute.KeyValue) guard.SharedOption.
	WithSpanAttributes any
	// WithKeySelectionAttribute is func(bool) guard.SharedOption.
	WithKeySelectionAttribute any
	// WithResume is func(int) guard.BatchOption.
	WithResume any
	// WithItemDone is func(func(int, guard.Outcome, error)) guard.BatchOption.
	WithItemDone any
	// ReportOutcome is func(*guard.Outcome) guard.CallOption: the call
	// stores its outcome through the pointer before it returns.
	ReportOutcome any
	// Settings is func(*guard.Guard, ...guard.CallOption) (CallSettings, error).
	Settings any
	// DecodeInto is func(g *guard.Guard, rec *store.Record, v any,
	// opts ...guard.CallOption) error, v a pointer to the result's type.
	DecodeInto any
	// Obtain is func(ctx, *guard.Guard, scope string, input any,
	// ...guard.CallOption) (*Claim, *store.Record, error).
	Obtain any
	// Complete is func(ctx, *guard.Guard, Claim, store.ResultKind, []byte,
	// ...guard.CallOption) (*store.Record, error).
	Complete any
	// Finish is func(ctx, *guard.Guard, Claim, any, error,
	// ...guard.CallOption) (*store.Record, error).
	Finish any
	// Release is func(ctx, *guard.Guard, Claim) error.
	Release any
	// Extend is func(ctx, *guard.Guard, Claim, time.Time,
	// ...guard.CallOption) (Claim, error).
	Extend any
)
