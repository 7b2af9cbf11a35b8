// Package adapt is package guard's face for the project's adapters
// (activity, workflow, httpguard, grpcguard, nexusguard, lambdaguard,
// watermillguard, the CLI) and suites: what they need of a guard and its
// users do not. It gives the hooks package guard sets in
// internal/guardhook their types; guard is initialised before this
// package, so every hook is set when these are.
package adapt

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/guardhook"
	"github.com/idemguard/idemguard/store"
)

// Types adapters name.
type (
	// CallSettings are the settings a call gets (see [Settings]).
	CallSettings = guardhook.CallSettings
	// Mode says what a call does when another call holds the key.
	Mode = guardhook.Mode
	// Claim is a held claim on a key (see [Obtain]).
	Claim = guardhook.Claim
	// Clock is the guard's time source (see [WithClock]).
	Clock = guardhook.Clock
	// ErrorCodec encodes definite errors (see [WithErrorCodec]).
	ErrorCodec = guardhook.ErrorCodec
	// InProgressError is the guard.ErrInProgress error, carrying the
	// holder's lease end.
	InProgressError = guardhook.InProgressError
	// MismatchError is the guard.ErrPayloadMismatch error, carrying the
	// record.
	MismatchError = guardhook.MismatchError
	// StoreError is the guard.ErrStore error: a store failure with its
	// operation and key.
	StoreError = guardhook.StoreError
	// RefusedError is the guard.ErrRefused error.
	RefusedError = guardhook.RefusedError
	// PanicError is what callers sharing a panicking execution get.
	PanicError = guardhook.PanicError
	// ReplayedError is how [MessageErrors] replays a stored error.
	ReplayedError = guardhook.ReplayedError
)

// Modes.
const (
	Reject = guardhook.Reject
	Wait   = guardhook.Wait
)

// Defaults.
const (
	DisableEnv         = guardhook.DisableEnv
	DefaultTTL         = guardhook.DefaultTTL
	DefaultLease       = guardhook.DefaultLease
	MinLease           = guardhook.MinLease
	DefaultClockSkew   = guardhook.DefaultClockSkew
	DefaultWaitBudget  = guardhook.DefaultWaitBudget
	DefaultWaitInitial = guardhook.DefaultWaitInitial
	DefaultWaitMax     = guardhook.DefaultWaitMax
	DefaultConcurrency = guardhook.DefaultConcurrency
)

var (
	// JSON is the default codec of results.
	JSON guard.Codec = guardhook.JSONCodec{}
	// MessageErrors is the default error codec: it stores an error's
	// message and replays a [*ReplayedError].
	MessageErrors = guardhook.MessageErrors
)

// ErrNotInCall is the error of guard.Step called outside a guarded call.
var ErrNotInCall = guardhook.ErrNotInCall

var (
	lift           = guardhook.Lift.(func(guard.CallOption) guard.SharedOption)
	fixed          = guardhook.Fixed.(func(...guard.CallOption) guard.CallOption)
	withDefaults   = guardhook.WithDefaults.(func(...guard.CallOption) guard.CallOption)
	withClaimToken = guardhook.WithClaimToken.(func(string) guard.CallOption)
	withClock      = guardhook.WithClock.(func(guardhook.Clock) guard.Option)
	withErrorCodec = guardhook.WithErrorCodec.(func(guardhook.ErrorCodec) guard.SharedOption)
	withBackoff    = guardhook.WithWaitBackoff.(func(time.Duration, time.Duration) guard.SharedOption)
	withSpanAttrs  = guardhook.WithSpanAttributes.(func(...attribute.KeyValue) guard.SharedOption)
	withSelection  = guardhook.WithKeySelectionAttribute.(func(bool) guard.SharedOption)
	withResume     = guardhook.WithResume.(func(int) guard.BatchOption)
	withItemDone   = guardhook.WithItemDone.(func(func(int, guard.Outcome, error)) guard.BatchOption)
	reportOutcome  = guardhook.ReportOutcome.(func(*guard.Outcome) guard.CallOption)
	settings       = guardhook.Settings.(func(*guard.Guard, ...guard.CallOption) (guardhook.CallSettings, error))
	decodeInto     = guardhook.DecodeInto.(func(*guard.Guard, *store.Record, any, ...guard.CallOption) error)
	obtain         = guardhook.Obtain.(func(context.Context, *guard.Guard, string, any, ...guard.CallOption) (*guardhook.Claim, *store.Record, error))
	complete       = guardhook.Complete.(func(context.Context, *guard.Guard, guardhook.Claim, store.ResultKind, []byte, ...guard.CallOption) (*store.Record, error))
	finish         = guardhook.Finish.(func(context.Context, *guard.Guard, guardhook.Claim, any, error, ...guard.CallOption) (*store.Record, error))
	release        = guardhook.Release.(func(context.Context, *guard.Guard, guardhook.Claim) error)
	extend         = guardhook.Extend.(func(context.Context, *guard.Guard, guardhook.Claim, time.Time, ...guard.CallOption) (guardhook.Claim, error))
)

// Lift returns o as an option that may also be a guard's default or a
// batch's, for the call options an adapter's user gave it: one that names
// a single call (guard.WithKey, [WithClaimToken]) is refused with
// guard.ErrInvalidOption when it is applied there.
func Lift(o guard.CallOption) guard.SharedOption { return lift(o) }

// Fixed applies opts and makes every other call option that sets the same
// settings, before it or after it in the call's options, an
// ErrInvalidOption: an adapter fixes what its calls need (the HTTP
// middleware its key path and codec, say), so that a user's option for it
// is reported instead of ignored. Defaults given to guard.New give way to
// it silently, as they give way to any call option.
func Fixed(opts ...guard.CallOption) guard.CallOption { return fixed(opts...) }

// WithDefaults applies opts only to the settings that neither guard.New
// nor an earlier option of the call set: the defaults an adapter prefers
// for its calls, which give way to what the user configured on the guard.
func WithDefaults(opts ...guard.CallOption) guard.CallOption { return withDefaults(opts...) }

// WithClaimToken makes the call claim with token instead of a random
// fencing token, so that a claimant repeating its claim after losing the
// answer finds its own claim. The token must be unique to the claimant.
func WithClaimToken(token string) guard.CallOption { return withClaimToken(token) }

// WithClock sets the guard's time source (default: the system clock), for
// tests that move through leases and expiry without sleeping.
func WithClock(c Clock) guard.Option { return withClock(c) }

// WithErrorCodec sets how definite errors are stored and replayed
// (default [MessageErrors]).
func WithErrorCodec(ec ErrorCodec) guard.SharedOption { return withErrorCodec(ec) }

// WithWaitBackoff sets the first and the longest pause between polls of a
// waiting call (defaults [DefaultWaitInitial], [DefaultWaitMax]).
func WithWaitBackoff(initial, max time.Duration) guard.SharedOption {
	return withBackoff(initial, max)
}

// WithSpanAttributes adds attributes to the call's idemguard.execute span,
// for example the Temporal workflow ID and activity type.
func WithSpanAttributes(attrs ...attribute.KeyValue) guard.SharedOption {
	return withSpanAttrs(attrs...)
}

// WithKeySelectionAttribute records the canonical JSON the key was derived
// from on the idemguard.execute span (idemguard.key.selection).
func WithKeySelectionAttribute(on bool) guard.SharedOption { return withSelection(on) }

// WithResume tells a batch that its first done items completed in an
// earlier attempt of the same batch (Temporal heartbeat details): they are
// replayed, never run again.
func WithResume(done int) guard.BatchOption { return withResume(done) }

// WithItemDone sets a function a batch calls once for each item as soon as
// the item has its outcome, never two at once.
func WithItemDone(fn func(index int, outcome guard.Outcome, err error)) guard.BatchOption {
	return withItemDone(fn)
}

// Execute is guard.Do that also reports how the result was obtained. The
// outcome is zero when the call returns an error without an outcome of its
// own.
func Execute[T any](ctx context.Context, g *guard.Guard, scope string, input any, fn func(context.Context) (T, error), opts ...guard.CallOption) (T, guard.Outcome, error) {
	var out guard.Outcome
	v, err := guard.Do(ctx, g, scope, input, fn, append(opts[:len(opts):len(opts)], reportOutcome(&out))...)
	return v, out, err
}

// ExecuteTx is guard.DoTx that also reports how the result was obtained.
func ExecuteTx[T, H any](ctx context.Context, g *guard.Guard, scope string, input any, fn func(ctx context.Context, tx H) (T, error), opts ...guard.CallOption) (T, guard.Outcome, error) {
	var out guard.Outcome
	v, err := guard.DoTx(ctx, g, scope, input, fn, append(opts[:len(opts):len(opts)], reportOutcome(&out))...)
	return v, out, err
}

// Settings returns the settings a call of g with opts gets, or the error
// guard.Do would return for invalid options, without making a call.
func Settings(g *guard.Guard, opts ...guard.CallOption) (CallSettings, error) {
	return settings(g, opts...)
}

// Decode returns the outcome stored in a completed record as guard.Do
// would replay it: the value decoded with the codec, the definite error,
// or guard.ErrResultUnavailable.
func Decode[T any](g *guard.Guard, rec *store.Record, opts ...guard.CallOption) (T, error) {
	var v T
	err := decodeInto(g, rec, &v, opts...)
	return v, err
}

// Obtain derives the key of input within scope, as guard.Do would, and
// claims it. It returns the Claim when this caller now holds the key; or,
// when a call with the key has completed, a nil Claim and the completed
// record, already checked against the payload; or the error guard.Do would
// return without running the function. An empty key selection is
// guard.ErrKeyMissing. A disabled guard returns a Claim that holds
// nothing. A held Claim must end with [Complete], [Finish] or [Release].
func Obtain(ctx context.Context, g *guard.Guard, scope string, input any, opts ...guard.CallOption) (*Claim, *store.Record, error) {
	return obtain(ctx, g, scope, input, opts...)
}

// Complete records the outcome of a held claim: result is what replays get
// (the codec's bytes for store.ResultValue, the error codec's for
// store.ResultError). It returns the completed record, or
// guard.ErrLeaseLost if the claim was taken over, or guard.ErrNotRecorded.
func Complete(ctx context.Context, g *guard.Guard, cl Claim, kind store.ResultKind, result []byte, opts ...guard.CallOption) (*store.Record, error) {
	return complete(ctx, g, cl, kind, result, opts...)
}

// Finish records the outcome of a held claim as guard.Do records what its
// function returned: v encoded and completed (unless the result filter
// refuses it), a definite fnErr stored, any other fnErr releasing the
// claim. It returns the completed record, or nil when the claim was
// released.
func Finish(ctx context.Context, g *guard.Guard, cl Claim, v any, fnErr error, opts ...guard.CallOption) (*store.Record, error) {
	return finish(ctx, g, cl, v, fnErr, opts...)
}

// Release gives up a held claim so that the next call runs at once. A
// claim already taken over is left alone and reported as
// guard.ErrLeaseLost.
func Release(ctx context.Context, g *guard.Guard, cl Claim) error { return release(ctx, g, cl) }

// Extend moves a held claim's lease end to leaseExpiresAt and returns the
// updated claim, or guard.ErrLeaseLost if the claim was taken over.
func Extend(ctx context.Context, g *guard.Guard, cl Claim, leaseExpiresAt time.Time, opts ...guard.CallOption) (Claim, error) {
	return extend(ctx, g, cl, leaseExpiresAt, opts...)
}

// WaitHeartbeat returns a context whose calls, while they wait for another
// call's claim on their key, call beat every every: an activity
// heartbeats while it waits.
func WaitHeartbeat(ctx context.Context, every time.Duration, beat func(context.Context)) context.Context {
	return guardhook.WaitHeartbeat(ctx, every, beat)
}
