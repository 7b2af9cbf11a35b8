package guard

// Joined returns how many calls have joined the in-process flight of key, for
// tests that must know every duplicate is waiting before they let the leader
// finish.
func (g *Guard) Joined(key string) int {
	g.flights.mu.Lock()
	defer g.flights.mu.Unlock()
	n := 0
	for fk, f := range g.flights.m {
		if fk.key == key {
			n += f.dups
		}
	}
	return n
}

// JoinedAny returns how many calls have joined any in-process flight.
func (g *Guard) JoinedAny() int {
	g.flights.mu.Lock()
	defer g.flights.mu.Unlock()
	n := 0
	for _, f := range g.flights.m {
		n += f.dups
	}
	return n
}
