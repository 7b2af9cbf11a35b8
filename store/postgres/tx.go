package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemguard/idemguard/store"
)

// Begin implements [store.Transactor]: it takes a connection from the
// pool and begins a transaction at READ COMMITTED, whatever the server's
// default_transaction_isolation. The guard's transactional entry point
// hands it to the guarded function, completes the claim inside it with
// the transaction's Complete and commits.
//
// READ COMMITTED is what makes the fenced completion work with a lease
// keeper: the keeper extends the claim's lease from another connection
// while the function runs, and at READ COMMITTED the completion's UPDATE
// reads the newest version of the row, checks the token there and succeeds;
// under REPEATABLE READ or SERIALIZABLE it would fail with a serialization
// error whenever the lease had been extended since the transaction's
// snapshot. A function that needs a stricter level for its own statements
// may run SET TRANSACTION ISOLATION LEVEL as its first statement, and
// must then expect such failures.
func (s *Store) Begin(ctx context.Context) (store.Tx[pgx.Tx], error) {
	c, err := s.conn(ctx, "Begin", "")
	if err != nil {
		return nil, err
	}
	tx, err := c.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		c.Release()
		return nil, s.wrap("Begin", "", err)
	}
	return &transaction{s: s, conn: c, tx: tx}, nil
}

// transaction is the transaction [Store.Begin] returns: a [store.Tx] whose Complete
// is the store's fenced UPDATE, run inside the transaction. The guarded
// function writes through its Handle; its writes and the completion commit
// together or not at all.
//
// The function must leave the transaction's end to the guard: it must not
// commit or roll it back itself.
type transaction struct {
	s    *Store
	conn *pgxpool.Conn // released when the transaction ends
	tx   pgx.Tx
}

var _ store.Tx[pgx.Tx] = (*transaction)(nil)

// ErrTxOwned is returned by Commit and Rollback of the transaction that
// guard.DoTx hands the guarded function: the guard ends that transaction
// itself, after writing the completion in it. A function that wants to
// undo its writes returns an error instead; one that wants a partial
// rollback uses a savepoint (tx.Begin, whose Commit and Rollback work).
var ErrTxOwned = errors.New("postgres: the guarded function's transaction is ended by the guard, not by the function")

// Handle returns the pgx transaction for the guarded function's own
// statements. Its Commit and Rollback return [ErrTxOwned]: the guard ends
// the transaction.
func (t *transaction) Handle() pgx.Tx { return ownedTx{t.tx} }

// ownedTx is the transaction as the guarded function sees it: every
// method but Commit and Rollback goes to pgx.
type ownedTx struct{ pgx.Tx }

func (ownedTx) Commit(context.Context) error   { return ErrTxOwned }
func (ownedTx) Rollback(context.Context) error { return ErrTxOwned }

// Complete implements [store.Tx]: [Store.Complete] inside the transaction.
// The UPDATE locks the record's row until the transaction ends, so a
// claimant meeting the row waits for the commit and then sees the
// completed record (or, after a rollback, the claim as it was). A result
// over the store's limit is refused with [store.ErrTooLarge] before
// anything is sent, and ErrTokenMismatch leaves the transaction usable, so
// the caller decides what to do with it (the guard rolls back). If the
// transaction was ended by SQL sent through it (COMMIT, ROLLBACK), Complete
// refuses without sending anything.
func (t *transaction) Complete(ctx context.Context, rec *store.Record) error {
	if t.tx.Conn().PgConn().TxStatus() == 'I' {
		// A COMMIT or ROLLBACK sent as SQL ended the transaction: the
		// completion would commit on its own, apart from the writes.
		return t.s.wrap("Tx.Complete", rec.Key, errTxEnded)
	}
	return t.s.complete(ctx, "Tx.Complete", rec, func(c context.Context, sql string, args ...any) (int64, error) {
		tag, err := t.tx.Exec(c, sql, args...)
		return tag.RowsAffected(), err
	})
}

var errTxEnded = errors.New("the transaction was ended by a COMMIT or ROLLBACK sent through it; the completion was not written")

// Commit implements [store.Tx]. An error may mean the transaction did not
// commit (a statement in it had failed, or the server refused the commit)
// or that the answer was lost; read the record to tell. The server's
// refusal of the function's writes, a constraint checked at commit,
// matches [store.ErrRefused] (see the package's errors).
func (t *transaction) Commit(ctx context.Context) error {
	defer t.release()
	if err := t.tx.Commit(ctx); err != nil {
		werr := t.s.wrap("Tx.Commit", "", err)
		var oe *store.OpError
		if isRefusal(err) && errors.As(werr, &oe) {
			oe.Refused = true
		}
		return werr
	}
	return nil
}

// Rollback implements [store.Tx]. It is harmless after Commit or a
// previous Rollback.
func (t *transaction) Rollback(ctx context.Context) error {
	defer t.release()
	if err := t.tx.Rollback(ctx); err != nil && !errors.Is(err, pgx.ErrTxClosed) {
		return t.s.wrap("Tx.Rollback", "", err)
	}
	return nil
}

// release returns the connection to the pool, once. The pool drops it if
// the transaction did not end cleanly.
func (t *transaction) release() {
	if t.conn != nil {
		t.conn.Release()
		t.conn = nil
	}
}
