//go:build guardfix

package postgres_test

import "testing"

// Run with -tags guardfix. It fails until guard's completeTx learns, after
// a release that finds no claim in progress, that the commit whose answer
// was lost landed meanwhile: DoTx reports a *guard.StoreError ("commit")
// for a call whose writes and completion committed (a retry replays it, so
// nothing runs twice, but the caller is told the call failed).
func TestDoTxReportsCommitThatLandedDuringRelease(t *testing.T) {
	_, v, err, _ := commitLandsDuringRelease(t)
	if err != nil || v != 4 {
		t.Errorf("DoTx whose commit landed during the release = %d, %v; want 4 and no error", v, err)
	}
}
