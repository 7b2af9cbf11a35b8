// Package epoch converts record times to the epoch numbers the stores keep
// and back, with the rounding the store contract asks for: expiries are
// rounded up, never down, and "now" is rounded down, so that a stored time
// compared with a rounded now gives the answer [store.Record.Live] gives on
// the decoded record.
package epoch

import (
	"fmt"
	"time"
)

// Bounds of the times a store keeps: from the zero time.Time (year 1) to
// the end of year 9999. A stored number outside them cannot be a time a
// store wrote.
var (
	MinSeconds = time.Time{}.Unix()
	MaxSeconds = time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC).Unix()
)

// CeilSeconds returns t in epoch seconds, rounded up.
func CeilSeconds(t time.Time) int64 {
	s := t.Unix()
	if t.Nanosecond() > 0 {
		s++
	}
	return s
}

// CeilMillis returns t in epoch milliseconds, rounded up.
func CeilMillis(t time.Time) int64 {
	ns := int64(t.Nanosecond())
	ms := t.Unix()*1000 + ns/1e6
	if ns%1e6 != 0 {
		ms++
	}
	return ms
}

// FloorSeconds and FloorMillis give now at the stored precision, rounded
// down, so that "stored <= floor(now)" holds exactly when now is at or
// after the stored time.
func FloorSeconds(t time.Time) int64 { return t.Unix() }

// FloorMillis: see [FloorSeconds].
func FloorMillis(t time.Time) int64 { return t.Unix()*1000 + int64(t.Nanosecond())/1e6 }

// Check returns an error naming what unless t lies within [MinSeconds,
// MaxSeconds]; prefix starts the message (the store's name).
func Check(prefix, what string, t time.Time) error {
	if s := t.Unix(); s < MinSeconds || s > MaxSeconds {
		return fmt.Errorf("%s: %s %v is outside the years 1–9999", prefix, what, t)
	}
	return nil
}
