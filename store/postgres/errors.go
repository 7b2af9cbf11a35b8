package postgres

import (
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemguard/idemguard/store"
)

// The store's errors are [*store.OpError] values (Store "postgres",
// Resource the table) wrapping the cause: a pgx error (reach
// [*pgconn.PgError] with errors.As), a context error, a
// [*store.DecodeError], or an error matching [store.ErrTooLarge].
//
// One matches [store.ErrThrottled] when its cause means "retry later": a
// serialization failure or deadlock (SQLSTATE 40001, 40P01), a lock or
// statement timeout (55P03, 57014), too many connections (53300), a server
// shutting down or starting up (57P01, 57P02, 57P03), or a context that ran
// out while waiting for a connection from the pool.
//
// An error of the transaction's Commit matches [store.ErrRefused] when the server
// refused the commit because of what the guarded function wrote: a
// constraint it checks at commit (a DEFERRABLE INITIALLY DEFERRED unique,
// foreign-key or exclusion constraint, or a deferred constraint trigger)
// failed with an integrity-constraint violation (SQLSTATE class 23), or a
// deferred constraint trigger raised an exception of its own (RAISE
// EXCEPTION without an ERRCODE, P0001). Those are the function's outcome,
// and guard.DoTx reports them as guard.ErrRefused. A serialization failure
// or deadlock at commit (40001, 40P01: under SERIALIZABLE, which the
// function may ask for) is the store's: a conflict with concurrent
// transactions that a retry may not meet, so it matches
// [store.ErrThrottled] instead.

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

// isRefusal reports whether err, an error of COMMIT, is the server's
// refusal of what the transaction wrote: a constraint checked at commit
// (SQLSTATE class 23), or a deferred constraint trigger's exception
// (P0001).
func isRefusal(err error) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && (strings.HasPrefix(pg.Code, "23") || pg.Code == "P0001")
}

// wrap returns err as a *store.OpError, or nil. Scan errors, which mean a
// column holds what a record cannot, become [store.ErrCorrupt].
func (s *Store) wrap(op, key string, err error) error {
	if err == nil {
		return nil
	}
	var oe *store.OpError
	if errors.As(err, &oe) {
		return err
	}
	var scan pgx.ScanArgError
	if errors.As(err, &scan) {
		err = &store.DecodeError{Attr: column(scan.ColumnIndex), Reason: "cannot be read", Err: err}
	}
	return s.opErr(op, key, err, isThrottle(err))
}

// opErr is the store's error for op on key.
func (s *Store) opErr(op, key string, err error, throttled bool) error {
	return &store.OpError{Store: "postgres", Op: op, Key: key, Resource: fmt.Sprintf("table %q", s.cfg.table), Err: err, Throttled: throttled}
}

// column returns the name of the i-th column of a record's row.
func column(i int) string {
	if names := strings.Split(columns, ", "); i >= 0 && i < len(names) {
		return names[i]
	}
	return ""
}

// corrupt is a row whose column cannot be read as part of a record.
func corrupt(col, format string, args ...any) error {
	return &store.DecodeError{Attr: col, Reason: fmt.Sprintf(format, args...)}
}
