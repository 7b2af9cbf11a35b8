package telemetry

import "go.opentelemetry.io/otel/attribute"

// A batch (guard.DoBatch) records one idemguard.batch span ([SpanBatch]);
// the idemguard.execute spans of the items it claims nest under it. Items
// replayed from the batch's bulk lookup get no span of their own: the batch
// span counts them.
//
//	idemguard.batch               one per batch: item counts by outcome
//	├─ idemguard.execute          one per item that needed a claim
//	│  └─ idemguard.acquire, …    as for a single call
//	└─ …
//
// Every item is counted once in the idemguard.calls metric, with the same
// outcome labels as single calls; items the batch never started are not.

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
// only in the batch span's counts.
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
// with outcome, "idemguard.batch.<outcome>": idemguard.batch.executed,
// idemguard.batch.replayed, idemguard.batch.in_progress,
// idemguard.batch.payload_mismatch, idemguard.batch.unguarded,
// idemguard.batch.error and idemguard.batch.not_run.
func BatchOutcomeKey(outcome string) attribute.Key {
	return attribute.Key("idemguard.batch." + outcome)
}
