// Package telemetry holds every name idemguard records under: those the
// public package telemetry exports for users, re-exported here under the
// same names, and those only the project's own code names — the guard, the
// adapters, the dashboards module, the tests — which users meet as the
// strings the public package's documentation lists. Code inside the module
// imports this package alone, so that moving a name between the two faces
// changes one declaration.
package telemetry

import (
	"go.opentelemetry.io/otel/attribute"

	pub "github.com/idemguard/idemguard/telemetry"
)

// The names users can name, from the public package.
const (
	ScopeName = pub.ScopeName

	SpanExecute = pub.SpanExecute

	ScopeKey     = pub.ScopeKey
	StepKey      = pub.StepKey
	KeyHashKey   = pub.KeyHashKey
	OutcomeKey   = pub.OutcomeKey
	StoreKey     = pub.StoreKey
	ErrorTypeKey = pub.ErrorTypeKey

	OutcomeExecuted        = pub.OutcomeExecuted
	OutcomeReplayed        = pub.OutcomeReplayed
	OutcomeInProgress      = pub.OutcomeInProgress
	OutcomePayloadMismatch = pub.OutcomePayloadMismatch
	OutcomeUnguarded       = pub.OutcomeUnguarded
	OutcomeError           = pub.OutcomeError

	MetricCalls          = pub.MetricCalls
	MetricLockWait       = pub.MetricLockWait
	MetricStoreDuration  = pub.MetricStoreDuration
	MetricLeaseLost      = pub.MetricLeaseLost
	MetricClaimTakenOver = pub.MetricClaimTakenOver
	MetricBatchItems     = pub.MetricBatchItems
)

// Version is the instrumentation version reported with ScopeName.
const Version = "0.1.0"

// Span and event names besides idemguard.execute.
const (
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

// Attribute keys besides those users query by.
const (
	// KeySelectionKey is the canonical JSON the key was derived from, only
	// when opted in (adapt.WithKeySelectionAttribute).
	KeySelectionKey = attribute.Key("idemguard.key.selection")
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
)

// Values of ErrorTypeKey, one per guard error (see the public package's
// documentation); an error that is none of them (the guarded function's
// own) is named by its Go type.
const (
	ErrorTypeInProgress        = "in_progress"
	ErrorTypePayloadMismatch   = "payload_mismatch"
	ErrorTypeKeyMissing        = "key_missing"
	ErrorTypeLeaseLost         = "lease_lost"
	ErrorTypeResultUnavailable = "result_unavailable"
	ErrorTypeNotRecorded       = "not_recorded"
	// ErrorTypeRefused is a business outcome, not a store failure: alerts
	// on store errors leave it out.
	ErrorTypeRefused          = "refused"
	ErrorTypeStore            = "store"
	ErrorTypeInvalidInput     = "invalid_input"
	ErrorTypeInvalidOption    = "invalid_option"
	ErrorTypeCanceled         = "canceled"
	ErrorTypeDeadlineExceeded = "deadline_exceeded"
	ErrorTypePanic            = "panic"
)

// Attribute keys of the idemguard.batch span.
const (
	// BatchItemsKey is the number of items in the batch.
	BatchItemsKey = attribute.Key("idemguard.batch.items")
	// BatchLookupKeysKey is how many distinct keys the bulk lookup asked
	// the store for (0 when the store has no batch read).
	BatchLookupKeysKey = attribute.Key("idemguard.batch.lookup.keys")
	// BatchLookupFoundKey is how many records the bulk lookup found.
	BatchLookupFoundKey = attribute.Key("idemguard.batch.lookup.found")
	// BatchResumedKey is the resume point: how many leading items an
	// earlier attempt completed.
	BatchResumedKey = attribute.Key("idemguard.batch.resumed")
)

// OutcomeNotRun labels the items a batch did not start (after a failure in
// a batch that stops on errors, or once its context ended). It appears
// only in the batch span's counts and in idemguard.batch.items.
const OutcomeNotRun = "not_run"

// BatchOutcomes returns the outcomes a batch span counts items by, each
// under [BatchOutcomeKey]: the outcomes of single calls plus
// [OutcomeNotRun].
func BatchOutcomes() []string {
	return []string{
		OutcomeExecuted, OutcomeReplayed, OutcomeInProgress, OutcomePayloadMismatch,
		OutcomeUnguarded, OutcomeError, OutcomeNotRun,
	}
}

// BatchOutcomeKey is the attribute of a batch span that counts the items
// with outcome, "idemguard.batch.<outcome>".
func BatchOutcomeKey(outcome string) attribute.Key {
	return attribute.Key("idemguard.batch." + outcome)
}

// Temporal attributes, set on idemguard.execute for guarded activities
// (package activity; its documentation lists them).
const (
	TemporalWorkflowIDKey   = attribute.Key("temporal.workflow.id")
	TemporalRunIDKey        = attribute.Key("temporal.workflow.run_id")
	TemporalWorkflowTypeKey = attribute.Key("temporal.workflow.type")
	TemporalActivityTypeKey = attribute.Key("temporal.activity.type")
	TemporalActivityIDKey   = attribute.Key("temporal.activity.id")
	TemporalAttemptKey      = attribute.Key("temporal.activity.attempt")
)
