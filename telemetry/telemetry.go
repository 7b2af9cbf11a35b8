// Package telemetry names idemguard's OpenTelemetry spans, attributes and
// metrics: what to search for in a tracing backend and what to chart. The
// guard records them; this package exports the names a program refers to
// (in a view, a sampler, a test that reads spans), and this documentation
// lists every name the guard records.
//
// The library depends on the OpenTelemetry API only. Without a provider
// given to the guard it uses the global ones (otel.GetTracerProvider,
// otel.GetMeterProvider), which do nothing until the application installs an
// SDK.
//
// # Spans
//
//	idemguard.execute      one per guarded call
//	├─ idemguard.acquire   the claim: one conditional write, and in Wait mode
//	│                      each poll as an "idemguard.wait" event; an
//	│                      "idemguard.takeover" event when the claim
//	│                      replaced one whose lease lapsed, with that
//	│                      claim's lease end
//	├─ idemguard.extend    each lease extension while the function runs
//	├─ idemguard.complete  the completion write (with its retries)
//	└─ idemguard.release   giving the key back after a failure
//
//	idemguard.batch        one per guard.DoBatch: item counts by outcome;
//	├─ idemguard.execute   one per item that needed a claim
//	│  └─ …                as for a single call
//	└─ …
//
// Items a batch replays from its bulk lookup get no span of their own: the
// batch span counts them, under idemguard.batch.<outcome> for each outcome
// below and idemguard.batch.not_run for the items it never started, with
// idemguard.batch.items (the batch's size), idemguard.batch.lookup.keys and
// idemguard.batch.lookup.found (the bulk lookup's keys and the records it
// found) and idemguard.batch.resumed (the items an earlier attempt
// completed).
//
// # Attributes
//
//	idemguard.scope            the guarded scope ([ScopeKey])
//	idemguard.step             a step's name, on its execute span ([StepKey])
//	idemguard.key.hash         the key's hash ([KeyHashKey])
//	idemguard.key.selection    what the key was derived from, when opted in
//	idemguard.outcome          how the call ended ([OutcomeKey])
//	idemguard.store            the store ([StoreKey])
//	idemguard.cache            hit or miss, when the guard has a cache
//	idemguard.operation        the store operation of idemguard.store.duration:
//	                           acquire, get, complete, extend, release, commit, …
//	idemguard.lease.expires_at the holder's lease end (RFC 3339), on wait and
//	                           takeover events
//	idemguard.wait.seconds     the time spent waiting, on an acquire span
//	idemguard.result.kind      what a completion stored: value, error, unavailable
//	idemguard.attempts         how many store calls a completion took
//	error.type                 the error a call ended with ([ErrorTypeKey])
//
// Guarded Temporal activities add temporal.workflow.id,
// temporal.workflow.run_id, temporal.workflow.type, temporal.activity.type,
// temporal.activity.id and temporal.activity.attempt to their execute span.
//
// # Error types
//
// The values of error.type, on idemguard.calls when the outcome is error
// and on spans that record an error, each naming the guard error the call
// ended with; an error that is none of them (the guarded function's own)
// is named by its Go type.
//
//	in_progress         guard.ErrInProgress
//	payload_mismatch    guard.ErrPayloadMismatch
//	key_missing         guard.ErrKeyMissing
//	lease_lost          guard.ErrLeaseLost
//	result_unavailable  guard.ErrResultUnavailable
//	not_recorded        guard.ErrNotRecorded: the function ran and the store kept
//	                    failing while the guard recorded its outcome
//	refused             guard.ErrRefused: the function's transaction was refused
//	                    at commit by its own condition or constraint, such as a
//	                    debit the balance does not cover; a business outcome,
//	                    not a store failure, which alerts on store errors leave
//	                    out
//	store               guard.ErrStore: the store failed
//	invalid_input       guard.ErrInvalidInput
//	invalid_option      guard.ErrInvalidOption
//	canceled            the context was cancelled
//	deadline_exceeded   the context's deadline passed
//	panic               the guarded function panicked
//
// # Metrics
//
//	idemguard.calls           counter: guarded calls, by outcome, scope and
//	                          store; with idemguard.cache (hit, miss) when the
//	                          guard has a cache, and error.type when the
//	                          outcome is error
//	idemguard.lock.wait       histogram, s: time spent waiting for another holder
//	idemguard.store.duration  histogram, s: store calls, by operation and store
//	idemguard.lease.lost      counter: calls whose claim was gone when they came
//	                          to record their outcome (taken over after their
//	                          lease lapsed, or deleted): the function ran, its
//	                          outcome was not recorded (guard.ErrLeaseLost), by
//	                          scope and store. Counted by the holder that lost.
//	idemguard.claim.taken_over
//	                          counter: claims that replaced another's claim whose
//	                          lease had lapsed without a completion (its holder
//	                          crashed, hung or lost the store): stuck claims, by
//	                          scope and store. Counted by the caller that took
//	                          over. Live contention (a duplicate meeting a
//	                          running holder: outcome in_progress, or a wait in
//	                          idemguard.lock.wait) is not a takeover.
//	idemguard.batch.items     counter: items of guard.DoBatch calls, by outcome
//	                          (not_run too), scope and store
package telemetry

import (
	"go.opentelemetry.io/otel/attribute"
)

// ScopeName is the instrumentation scope of idemguard's tracer and meter:
// the module path.
const ScopeName = "github.com/idemguard/idemguard"

// SpanExecute is the name of the span of one guarded call.
const SpanExecute = "idemguard.execute"

// Attribute keys.
const (
	// ScopeKey is the guarded scope (for activities, the activity type). A
	// step (guard.Step) is counted and traced under its call's scope, so
	// that step names, which may be per item, never become metric labels.
	ScopeKey = attribute.Key("idemguard.scope")
	// StepKey is the name of a step (guard.Step) on its idemguard.execute
	// span; it is never a metric label.
	StepKey = attribute.Key("idemguard.step")
	// KeyHashKey is the hash part of the idempotency key. The raw selection
	// it was computed from can carry user data and is recorded only when
	// the guard is told to.
	KeyHashKey = attribute.Key("idemguard.key.hash")
	// OutcomeKey is how the call ended; see the Outcome constants.
	OutcomeKey = attribute.Key("idemguard.outcome")
	// StoreKey names the store ("memory", "dynamodb", …).
	StoreKey = attribute.Key("idemguard.store")
	// ErrorTypeKey is the semantic-conventions error.type (see the
	// package documentation for its values).
	ErrorTypeKey = attribute.Key("error.type")
)

// Outcome values of OutcomeKey.
const (
	OutcomeExecuted        = "executed"
	OutcomeReplayed        = "replayed"
	OutcomeInProgress      = "in_progress"
	OutcomePayloadMismatch = "payload_mismatch"
	OutcomeUnguarded       = "unguarded"
	OutcomeError           = "error"
)

// Metric names.
const (
	MetricCalls         = "idemguard.calls"
	MetricLockWait      = "idemguard.lock.wait"
	MetricStoreDuration = "idemguard.store.duration"
	MetricLeaseLost     = "idemguard.lease.lost"
	MetricBatchItems    = "idemguard.batch.items"
	// MetricClaimTakenOver counts claims taken over from a holder whose
	// lease lapsed without a completion: the stuck claims the
	// "claims stuck" alert fires on. MetricLeaseLost counts the other
	// side, a holder that finds its claim gone.
	MetricClaimTakenOver = "idemguard.claim.taken_over"
)
