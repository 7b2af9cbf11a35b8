package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
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

// WatchChannelVia is WatchChannel asked through pool, so that s's own
// pool's statements are not counted.
func WatchChannelVia(ctx context.Context, pool *pgxpool.Pool, s *Store) (string, error) {
	id, _ := parseTable(s.cfg.table)
	var ch string
	err := pool.QueryRow(ctx, "SELECT "+channelExpr(id)).Scan(&ch)
	return ch, err
}

// ListenSessions returns how many LISTEN connections s has opened.
func ListenSessions(s *Store) int {
	s.listen.mu.Lock()
	defer s.listen.mu.Unlock()
	return s.listen.opened
}

// SetWatchLockGrace sets how long a key's lock is kept after its last
// watch, until the test ends.
func SetWatchLockGrace(t interface{ Cleanup(func()) }, d time.Duration) {
	old := watchLockGrace.Swap(int64(d))
	t.Cleanup(func() { watchLockGrace.Store(old) })
}

// SetWatchHealthEvery sets how long a listener waits for a notification
// before it checks its connection, until the test ends.
func SetWatchHealthEvery(t interface{ Cleanup(func()) }, d time.Duration) {
	old := watchHealthEvery.Swap(int64(d))
	t.Cleanup(func() { watchHealthEvery.Store(old) })
}
