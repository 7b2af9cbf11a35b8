package postgres_test

import "testing"

// A commit whose answer was lost lands while the guard releases the claim
// it still saw in progress: the release finds no claim in progress (Release
// deletes only those), the guard reads the record again, and DoTx reports
// the call as the success it was, not as a failed commit.
func TestDoTxReportsCommitThatLandedDuringRelease(t *testing.T) {
	_, v, err, _ := commitLandsDuringRelease(t)
	if err != nil || v != 4 {
		t.Errorf("DoTx whose commit landed during the release = %d, %v; want 4 and no error", v, err)
	}
}
