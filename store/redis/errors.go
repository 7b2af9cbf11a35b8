package redis

import (
	"errors"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idemguard/idemguard/store"
)

// The store's errors are [*store.OpError] values (Store "redis", Resource
// the key prefix) wrapping the cause: a go-redis error (reach it with
// errors.As), a [*store.DecodeError], an error matching [ErrNotReplicated]
// (saying how many replicas acknowledged the write), or an error matching
// [store.ErrTooLarge].
//
// One whose cause means "the server cannot take this now, try again later"
// matches [store.ErrThrottled]: OOM (maxmemory reached under noeviction),
// BUSY (a script or module is running past its time limit), LOADING (the
// dataset is loading after a restart), TRYAGAIN (a Cluster slot is
// migrating), the server's client limit, and the client's connection pool
// timing out or running out of connections.

func (s *Store) opErr(op, key string, err error) error {
	return &store.OpError{Store: "redis", Op: op, Key: key, Resource: fmt.Sprintf("prefix %q", s.prefix), Err: err, Throttled: isThrottle(err)}
}

// isThrottle reports whether err means "retry later".
func isThrottle(err error) bool {
	return errors.Is(err, goredis.ErrPoolTimeout) ||
		errors.Is(err, goredis.ErrPoolExhausted) ||
		goredis.IsOOMError(err) ||
		goredis.IsLoadingError(err) ||
		goredis.IsTryAgainError(err) ||
		goredis.IsMaxClientsError(err) ||
		goredis.HasErrorPrefix(err, "BUSY ")
}

// isWrongType reports whether err is the server's refusal to run a hash
// command on a key of another type.
func isWrongType(err error) bool { return goredis.HasErrorPrefix(err, "WRONGTYPE") }

// ErrNotReplicated is matched by the error of a write that reached the
// primary but fewer replicas than [WithReplicas] asked for acknowledged it
// in time.
var ErrNotReplicated = errors.New("redis: write not acknowledged by enough replicas")

// replicationError is the cause of a [*store.OpError] when [WithReplicas] is set
// and WAIT reported fewer replicas than asked for, or failed. The write
// itself reached the primary. It matches [ErrNotReplicated].
type replicationError struct {
	// Want is the number of replicas asked for, Acked the number that
	// acknowledged within Timeout.
	Want, Acked int
	// Timeout is WAIT's timeout.
	Timeout time.Duration
	// Err is WAIT's own error, if it failed rather than timed out.
	Err error
}

// Error says how many replicas acknowledged the write.
func (e *replicationError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("the write reached the primary, but WAIT %d failed: %v", e.Want, e.Err)
	}
	return fmt.Sprintf("the write reached the primary, but only %d of the %d replicas asked for acknowledged it within %v; a failover now could lose it",
		e.Acked, e.Want, e.Timeout)
}

// Is reports whether target is [ErrNotReplicated].
func (e *replicationError) Is(target error) bool { return target == ErrNotReplicated }

// Unwrap returns WAIT's own error, if any.
func (e *replicationError) Unwrap() error { return e.Err }
