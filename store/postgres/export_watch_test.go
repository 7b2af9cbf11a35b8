package postgres

import (
	"context"
	"time"
)

// The package's tests keep a LISTEN connection 200 ms after its last
// watch, not 5 s, so that the conformance suite sees the listener's
// goroutine end without waiting.
func init() { watchIdle = 200 * time.Millisecond }

// WatchChannel returns the channel s listens on and its completions
// notify, as the server names it.
func WatchChannel(ctx context.Context, s *Store) (string, error) {
	id, _ := parseTable(s.cfg.table)
	var ch string
	err := s.pool.QueryRow(ctx, "SELECT "+channelExpr(id)).Scan(&ch)
	return ch, err
}

// ListenSessions returns how many LISTEN connections s has opened.
func ListenSessions(s *Store) int {
	s.listen.mu.Lock()
	defer s.listen.mu.Unlock()
	return s.listen.opened
}
