// Package telemetry names idemguard's OpenTelemetry spans, attributes and
// metrics: what to search for in a tracing backend and what to chart. The
// guard records them; this package holds only the names.
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
//	│                      replaced one whose lease lapsed
//	├─ idemguard.extend    each lease extension while the function runs
//	├─ idemguard.complete  the completion write (with its retries)
//	└─ idemguard.release   giving the key back after a failure
//
//	idemguard.batch        one per guard.DoBatch: item counts by outcome;
//	                       the execute spans of the items it claims nest
//	                       under it (see the Batch constants)
//
// # Metrics
//
//	idemguard.calls           counter: guarded calls, by outcome, scope and
//	                          store; with idemguard.cache (hit, miss) when the
//	                          guard has a cache, and error.type (see the
//	                          ErrorType constants) when the outcome is error
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

// Version is the instrumentation version reported with ScopeName.
const Version = "0.1.0"

// Span names.
const (
	SpanExecute  = "idemguard.execute"
	SpanAcquire  = "idemguard.acquire"
	SpanComplete = "idemguard.complete"
	SpanRelease  = "idemguard.release"
	SpanExtend   = "idemguard.extend"
	SpanBatch    = "idemguard.batch"

	// EventWait is the event on an acquire span for each pause while
	// another caller holds the key.
	EventWait = "idemguard.wait"
	// EventTakeover is the event on an acquire span whose claim replaced
	// a claim whose lease had lapsed (see MetricClaimTakenOver), with that
	// claim's lease end (LeaseExpiresKey).
	EventTakeover = "idemguard.takeover"
)

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
	// the guard is told to (as KeySelectionKey).
	KeyHashKey = attribute.Key("idemguard.key.hash")
	// KeySelectionKey is the canonical JSON the key was derived from, only
	// when opted in.
	KeySelectionKey = attribute.Key("idemguard.key.selection")
	// OutcomeKey is how the call ended; see the Outcome constants.
	OutcomeKey = attribute.Key("idemguard.outcome")
	// StoreKey names the store ("memory", "dynamodb", …).
	StoreKey = attribute.Key("idemguard.store")
	// CacheKey is "hit" or "miss" when the guard has a local cache.
	CacheKey = attribute.Key("idemguard.cache")
	// OperationKey is the store operation: acquire, complete, extend,
	// release.
	OperationKey = attribute.Key("idemguard.operation")
	// LeaseExpiresKey is the holder's lease end (RFC 3339) on wait and
	// takeover events.
	LeaseExpiresKey = attribute.Key("idemguard.lease.expires_at")
	// WaitKey is the total time spent waiting, in seconds, on an acquire
	// span.
	WaitKey = attribute.Key("idemguard.wait.seconds")
	// ResultKindKey is what a completion stored: value, error, unavailable.
	ResultKindKey = attribute.Key("idemguard.result.kind")
	// AttemptsKey is how many store calls a completion took.
	AttemptsKey = attribute.Key("idemguard.attempts")
	// ErrorTypeKey is the semantic-conventions error.type.
	ErrorTypeKey = attribute.Key("error.type")
)

// Temporal attributes, set on idemguard.execute for guarded activities.
const (
	TemporalWorkflowIDKey   = attribute.Key("temporal.workflow.id")
	TemporalRunIDKey        = attribute.Key("temporal.workflow.run_id")
	TemporalWorkflowTypeKey = attribute.Key("temporal.workflow.type")
	TemporalActivityTypeKey = attribute.Key("temporal.activity.type")
	TemporalActivityIDKey   = attribute.Key("temporal.activity.id")
	TemporalAttemptKey      = attribute.Key("temporal.activity.attempt")
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

// ErrorType values of ErrorTypeKey: on idemguard.calls when the outcome is
// OutcomeError, and on spans that record an error. Each names the guard's
// error the call ended with; an error that is none of them (the guarded
// function's own) is named by its Go type.
const (
	ErrorTypeInProgress        = "in_progress"
	ErrorTypePayloadMismatch   = "payload_mismatch"
	ErrorTypeKeyMissing        = "key_missing"
	ErrorTypeLeaseLost         = "lease_lost"
	ErrorTypeResultUnavailable = "result_unavailable"
	// ErrorTypeNotRecorded: the function ran and the store kept failing
	// while the guard recorded its outcome (guard.ErrNotRecorded).
	ErrorTypeNotRecorded = "not_recorded"
	// ErrorTypeRefused: the function's transaction (guard.DoTx) was
	// refused at commit by the function's own condition or constraint
	// (guard.ErrRefused), such as a debit that the balance does not cover.
	// A business outcome, not a store failure: alerts on store errors
	// leave it out.
	ErrorTypeRefused = "refused"
	// ErrorTypeStore: the store failed (guard.ErrStore).
	ErrorTypeStore            = "store"
	ErrorTypeInvalidInput     = "invalid_input"
	ErrorTypeInvalidOption    = "invalid_option"
	ErrorTypeCanceled         = "canceled"
	ErrorTypeDeadlineExceeded = "deadline_exceeded"
	// ErrorTypePanic: the guarded function panicked.
	ErrorTypePanic = "panic"
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
