package guard

// WaitingOn returns how many calls in this process wait for another's
// claim on key (through any store), for tests that must know every
// duplicate is waiting before they let the holder finish.
func WaitingOn(key string) int {
	waitersMu.Lock()
	defer waitersMu.Unlock()
	n := 0
	for k, w := range waiters {
		if k.key == key {
			n += w.refs
		}
	}
	return n
}
