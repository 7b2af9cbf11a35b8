// Package postgres is a [store.Store] on PostgreSQL, through pgx v5 and a
// [pgxpool.Pool], and the store of the transactional guard: guard.DoTx
// and guard.WrapTx run a guarded function with a [pgx.Tx] ([Store.Begin])
// in a transaction that also writes the call's completion, so that
// the function's writes to this database and its record commit together or
// not at all:
//
//	receipt, err := guard.DoTx(ctx, g, "transfer", req, func(ctx context.Context, tx pgx.Tx) (Receipt, error) {
//		_, err := tx.Exec(ctx, "UPDATE accounts SET balance = balance - $1 WHERE id = $2", req.Amount, req.From)
//		...
//	})
//
// Each record is one row of one table (see [CreateTable] and [DDL] for its
// columns; [WithTable] names it). Every step is one round trip, one
// statement sent on its own: Acquire reads a live record, which it
// returns on a conflict without locking its row, or writes its claim with a
// conditional upsert when there is none, in one statement; Complete,
// Extend and Release are single statements
// conditional on the fencing token (Extend and Release also on the
// in-progress status: a completed record is never released). Correctness
// under concurrent claims rests on READ COMMITTED: a claim that loses to a
// rival that committed after its statement began, or a statement that
// fails with a serialization error on a server whose sessions default to a
// stricter level, is sent again as a pipeline (BEGIN ISOLATION LEVEL READ
// COMMITTED, the statement, COMMIT; for Acquire with the read of the row
// in between), a second round trip that only such calls pay, so the
// server's default isolation level does not change the outcome.
//
// Time is the guard's: liveness is checked against the now the guard passes
// to Acquire, never the database's now(), as in every store. Times are kept
// to the microsecond; expiries and lease ends are rounded up, never down.
//
// Results are stored as given, in a bytea column that PostgreSQL's TOAST
// compresses on its own; [WithMaxResultSize] (1 MiB by default) refuses
// larger ones with [store.ErrTooLarge] before sending.
//
// Expired rows stay until [Store.Purge] deletes them, in bounded batches
// that never wait for a locked row. [Store.List] and [Store.Delete] serve
// operators ([store.Admin]). Errors are [*store.OpError] values; those that mean
// "retry later" match [store.ErrThrottled], rows that are not records
// [store.ErrCorrupt].
//
// See docs/postgres.md in the repository for the design and its reasons.
package postgres
