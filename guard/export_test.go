package guard

// Joined returns how many calls have joined the in-process flight of key, for
// tests that must know every duplicate is waiting before they let the leader
// finish.
func (g *Guard) Joined(key string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if f, ok := g.flights[key]; ok {
		return f.dups
	}
	return 0
}
