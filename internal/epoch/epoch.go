// Package epoch converts times to the epoch seconds and milliseconds that
// stores keep, rounded the way the store contract asks: expiries up, the
// time a liveness check compares with down.
package epoch

import "time"

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

// FloorSeconds returns t in epoch seconds, rounded down, so that
// "stored <= FloorSeconds(now)" holds exactly when now is at or after the
// stored time.
func FloorSeconds(t time.Time) int64 { return t.Unix() }

// FloorMillis returns t in epoch milliseconds, rounded down, as
// FloorSeconds does seconds.
func FloorMillis(t time.Time) int64 { return t.Unix()*1000 + int64(t.Nanosecond())/1e6 }
