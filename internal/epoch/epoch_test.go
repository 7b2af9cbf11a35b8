package epoch

import (
	"testing"
	"time"
)

func TestRounding(t *testing.T) {
	base := time.Unix(1_800_000_000, 0)
	for _, tc := range []struct {
		t                      time.Time
		ceilS, ceilMs, floorMs int64
	}{
		{base, 1_800_000_000, 1_800_000_000_000, 1_800_000_000_000},
		{base.Add(time.Nanosecond), 1_800_000_001, 1_800_000_000_001, 1_800_000_000_000},
		{base.Add(999 * time.Millisecond), 1_800_000_001, 1_800_000_000_999, 1_800_000_000_999},
		{base.Add(1500 * time.Microsecond), 1_800_000_001, 1_800_000_000_002, 1_800_000_000_001},
	} {
		if got := CeilSeconds(tc.t); got != tc.ceilS {
			t.Errorf("CeilSeconds(%v) = %d, want %d", tc.t, got, tc.ceilS)
		}
		if got := CeilMillis(tc.t); got != tc.ceilMs {
			t.Errorf("CeilMillis(%v) = %d, want %d", tc.t, got, tc.ceilMs)
		}
		if got := FloorMillis(tc.t); got != tc.floorMs {
			t.Errorf("FloorMillis(%v) = %d, want %d", tc.t, got, tc.floorMs)
		}
		if got := FloorSeconds(tc.t); got != base.Unix() {
			t.Errorf("FloorSeconds(%v) = %d, want %d", tc.t, got, base.Unix())
		}
	}
}
