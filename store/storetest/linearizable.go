package storetest

import (
	"testing"

	"github.com/idemguard/idemguard/internal/testing/linz"
	"github.com/idemguard/idemguard/store"
)

// RunLinearizable records a history of s under concurrent clients on a few
// hot keys and checks it against the store contract's sequential model
// for one key (see the package documentation). It fails t if the history
// is not shown linearizable, with a report that names Porcupine's
// visualisation of the history and lists its minimal failing operations.
// [WithPrecision], [WithOps] and [WithFaults] shape the run.
//
// Put s behind a fault proxy (delays, answers lost after the request ran,
// connections cut) to check the store under faults: an operation whose
// answer was lost counts as possibly applied. Run the store's client with
// its own retries off where it has them (aws-sdk-go-v2's RetryMaxAttempts
// 1, go-redis's MaxRetries -1): a retry inside the client that meets its
// own first attempt is then a retry in the history, with both attempts on
// record.
func RunLinearizable(t *testing.T, s store.Store, opts ...Option) {
	t.Helper()
	c := newConfig(opts)
	linz.RunLinearizable(t, s, c.precision, linz.HistoryConfig{Ops: c.ops, Faults: c.faults})
}
