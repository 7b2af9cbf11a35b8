package redis

import "time"

// The package's tests keep a subscriber connection 200 ms after its last
// watch, not 5 s, so that the conformance suite sees its goroutine end
// without waiting.
func init() { watchIdle = 200 * time.Millisecond }

// WatchConnections returns how many subscriber connections s has opened.
func WatchConnections(s *Store) int {
	s.watch.mu.Lock()
	defer s.watch.mu.Unlock()
	return s.watch.opened
}
