// Package linz is the linearizability checker behind
// storetest.RunLinearizable: it drives a store with concurrent clients on
// a few hot keys, at times of a logical clock it moves on so that leases
// lapse and records expire within the run, records every operation with
// its call and return times ([RecordHistory]), and checks the history
// with Porcupine against a sequential model of the store contract for one
// key ([History.Check]), where an operation whose answer was lost counts
// as possibly applied. A history that is not linearizable is reported
// with Porcupine's visualisation, written to a file the failure names,
// and its minimal failing operations. [RunMutants] checks the checker on
// four broken stores built over the real one.
//
// The stores' own tests, the chaos suite (chaos/) and the failover tests
// (internal/testing/failovertest) use it directly; store authors use
// storetest.RunLinearizable.
package linz

import (
	"context"
	"testing"
	"time"

	"github.com/idemguard/idemguard/store"
)

// RunLinearizable records a history of s under concurrent clients on a few
// hot keys ([RecordHistory] with cfg) and checks it against the store
// contract's sequential model for one key ([History.Check]), for a store
// that keeps times at precision p. It fails t if the history is not shown
// linearizable, with a report that names Porcupine's visualisation of the
// history and lists its minimal failing operations.
//
// Put s behind a fault proxy (delays, answers lost after the request ran,
// connections cut) to check the store under faults: an operation whose
// answer was lost counts as possibly applied.
func RunLinearizable(t *testing.T, s store.Store, p Precision, cfg HistoryConfig) *CheckResult {
	t.Helper()
	began := time.Now()
	h, err := RecordHistory(context.Background(), s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	recorded := time.Since(began)
	res := h.Check(p, CheckOptions{Name: t.Name()})
	t.Logf("recorded %d operations in %v", h.Len(), recorded.Round(time.Millisecond))
	if !res.Linearizable {
		t.Errorf("%s", res.Report())
	} else {
		t.Logf("%s", res)
	}
	return res
}

// RunMutants checks the checker: it wraps the stores newStore makes in
// each of four broken stores — a claim that always succeeds, a completion
// without its token condition, a release that ignores the token, a claim
// that does not report the lapsed claim it took over — records
// a history of each as [RunLinearizable] does, and fails t for any whose
// history the checker finds linearizable. Each mutant is built over the
// real store from its Store methods alone (it reads the record to learn its
// token, then forges the fenced write, or drops what Acquire returned), so
// every store gets all four without a change to its code.
//
// A broken condition shows only when the workload meets it (a late
// release while another claim is in progress, say) and the answers around
// it were not lost, so the mutants' workload is cfg's with holders that
// stall past their lease twice as often (a history of 600 operations on
// DynamoDB Local then holds 5 to 20 late releases that the broken store
// lets through, against 1 to 8), and a mutant that passes one history
// gets more, each on a fresh store, up to six.
func RunMutants(t *testing.T, newStore func(t *testing.T) store.Store, p Precision, cfg HistoryConfig) {
	const rounds = 6
	cfg.stalls = 0.6
	for _, m := range mutants {
		t.Run(m.name, func(t *testing.T) {
			began := time.Now()
			ops := 0
			for round := 1; round <= rounds; round++ {
				h, err := RecordHistory(context.Background(), m.wrap(newStore(t)), cfg)
				if err != nil {
					t.Fatal(err)
				}
				ops += h.Len()
				res := h.Check(p, CheckOptions{Name: t.Name(), Dir: t.TempDir(), ShrinkTimeout: 3 * time.Second})
				switch {
				case res.TimedOut:
					t.Errorf("the checker timed out on the mutant's history: %s", res)
					return
				case !res.Linearizable:
					t.Logf("caught in %v, %d operations recorded in %d histories: %s",
						time.Since(began).Round(time.Millisecond), ops, round, res.Report())
					return
				}
				t.Logf("history %d of the mutant is linearizable: %s", round, res)
			}
			t.Errorf("the checker did not catch the mutant in %d histories", rounds)
		})
	}
}
