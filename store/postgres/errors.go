package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemguard/idemguard/store"
)

// OpError is the error a [Store] or [Tx] method returns when a statement
// fails or a row cannot be read as a record. It names the operation, the
// table and the key, and wraps the cause: a pgx error (reach
// [*pgconn.PgError] with [errors.As]), a context error, or an error
// matching [store.ErrCorrupt] or [store.ErrTooLarge].
//
// An OpError matches [store.ErrThrottled] with [errors.Is] when its cause
// means "retry later": a serialization failure or deadlock (SQLSTATE 40001,
// 40P01), a lock or statement timeout (55P03, 57014), too many connections
// (53300), a server shutting down or starting up (57P01, 57P02, 57P03), or
// a context that ran out while waiting for a connection from the pool.
type OpError struct {
	// Op is the method: "Acquire", "Complete", "Extend", "Release", "Get",
	// "GetMany", "List", "Delete", "Purge", "Begin", "Tx.Complete",
	// "Tx.Commit" or "Tx.Rollback".
	Op string
	// Table is the table, as given to [WithTable].
	Table string
	// Key is the idempotency key, or "" for operations on many.
	Key string
	// Err is the cause.
	Err error

	poolWait bool // Err came from waiting for a pool connection
}

// Error describes the failed operation and its cause.
func (e *OpError) Error() string {
	if e.Key == "" {
		return fmt.Sprintf("postgres: %s in table %q: %v", e.Op, e.Table, e.Err)
	}
	return fmt.Sprintf("postgres: %s %q in table %q: %v", e.Op, e.Key, e.Table, e.Err)
}

// Unwrap returns the cause.
func (e *OpError) Unwrap() error { return e.Err }

// Is reports whether target is [store.ErrThrottled] and the cause means
// the server asks to retry later.
func (e *OpError) Is(target error) bool {
	if target != store.ErrThrottled {
		return false
	}
	if e.poolWait {
		return errors.Is(e.Err, context.DeadlineExceeded)
	}
	return isThrottle(e.Err)
}

// throttleCodes are the SQLSTATEs that mean "the same statement may
// succeed if sent again later".
var throttleCodes = map[string]bool{
	"40001": true, // serialization_failure
	"40P01": true, // deadlock_detected
	"55P03": true, // lock_not_available (lock_timeout)
	"57014": true, // query_canceled (statement_timeout)
	"53300": true, // too_many_connections
	"57P01": true, // admin_shutdown
	"57P02": true, // crash_shutdown
	"57P03": true, // cannot_connect_now (starting up, shutting down)
}

func isThrottle(err error) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && throttleCodes[pg.Code]
}

// wrap returns err as an *OpError, or nil. Scan errors, which mean a
// column holds what a record cannot, become [store.ErrCorrupt].
func (s *Store) wrap(op, key string, err error) error {
	if err == nil {
		return nil
	}
	var oe *OpError
	if errors.As(err, &oe) {
		return err
	}
	var scan pgx.ScanArgError
	if errors.As(err, &scan) {
		err = fmt.Errorf("%w: %w", store.ErrCorrupt, err)
	}
	return &OpError{Op: op, Table: s.cfg.table, Key: key, Err: err}
}

// corrupt is a row that cannot be read as a record.
func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: %s", store.ErrCorrupt, fmt.Sprintf(format, args...))
}
