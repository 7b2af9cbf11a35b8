package guard

import "strconv"

// Outcome says how a call got its result.
type Outcome uint8

const (
	// OutcomeExecuted: this call ran the function.
	OutcomeExecuted Outcome = iota + 1
	// OutcomeReplayed: this call returned an outcome stored by an earlier
	// call, read from the store or the local cache.
	OutcomeReplayed
	// OutcomeShared: this call joined a concurrent call with the same key in
	// this process and returned its outcome.
	OutcomeShared
	// OutcomeUnguarded: this call ran the function without a record,
	// because the key selection was empty or the guard is disabled.
	OutcomeUnguarded
	// OutcomeReleased: this call ran the function, and the key was
	// released so that the next call runs it again: the function returned
	// an error that is not definite (see [WithDefiniteErrors]), or a result
	// the result filter refused to store ([WithResultFilter]). A batch does
	// not count such an item as done (nor does an adapter resuming it). A
	// definite error that was recorded comes with [OutcomeExecuted].
	OutcomeReleased
)

// String returns "executed", "replayed", "shared", "unguarded" or
// "released", and "none" for the zero Outcome, which a call returns with
// the error that ended it before it got an outcome. "executed", "replayed"
// and "unguarded" are also the idemguard.outcome labels of telemetry,
// which labels a call of the zero Outcome by its error ("error",
// "in_progress", "payload_mismatch"), a shared one "replayed" and a
// released one by what the function returned ("executed" or "error").
func (o Outcome) String() string {
	switch o {
	case OutcomeExecuted:
		return "executed"
	case OutcomeReplayed:
		return "replayed"
	case OutcomeShared:
		return "shared"
	case OutcomeUnguarded:
		return "unguarded"
	case OutcomeReleased:
		return "released"
	case 0:
		return "none"
	}
	return "Outcome(" + strconv.Itoa(int(o)) + ")"
}
