package workflow

import (
	"testing"
	"time"

	tworkflow "go.temporal.io/sdk/workflow"
)

// A wait slice is half the workflow task timeout (the server's 10 s when
// none was given), within half the claim's local activity timeouts and
// the wait budget left.
func TestWaitSlice(t *testing.T) {
	defaults := newConfig(nil).la
	for _, tc := range []struct {
		wft  time.Duration
		la   tworkflow.LocalActivityOptions
		left time.Duration
		want time.Duration
	}{
		{10 * time.Second, defaults, forever, 5 * time.Second},
		{0, defaults, forever, 5 * time.Second},
		{time.Minute, defaults, forever, 15 * time.Second},
		{2 * time.Minute, tworkflow.LocalActivityOptions{StartToCloseTimeout: 2 * time.Minute}, forever, time.Minute},
		{time.Minute, tworkflow.LocalActivityOptions{ScheduleToCloseTimeout: 4 * time.Second}, forever, 2 * time.Second},
		{10 * time.Second, defaults, 1500 * time.Millisecond, 1500 * time.Millisecond},
		{10 * time.Second, defaults, -time.Second, 0},
	} {
		if got := waitSlice(tc.wft, tc.la, tc.left); got != tc.want {
			t.Errorf("waitSlice(%v, %+v, %v) = %v, want %v", tc.wft, tc.la, tc.left, got, tc.want)
		}
	}
}
