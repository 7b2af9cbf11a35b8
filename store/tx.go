package store

import "context"

// Transactor is an optional interface for stores that can complete a claim
// inside a transaction of the same database the guarded function writes
// to. H is the handle through which the function writes: pgx.Tx for
// PostgreSQL, a builder of TransactWriteItems actions for DynamoDB.
//
// The guard's transactional entry point (guard.DoTx) claims the key as
// usual, then begins a transaction with Begin, hands its [Tx.Handle] to the
// function, completes the claim with [Tx.Complete] inside it and commits:
// the function's writes and the completion commit together or not at all,
// so a crash between the side effect and the completion cannot run the
// side effect twice. A holder whose claim was taken over finds its
// completion fenced out ([ErrTokenMismatch]) and its writes rolled back
// with it.
type Transactor[H any] interface {
	Begin(ctx context.Context) (Tx[H], error)
}

// Tx is a transaction begun by a [Transactor]. The guard calls Complete
// once for the call's own record and once for each step completed inside
// the call (guard.Step), then Commit, or Rollback alone; Rollback after
// Commit is harmless.
type Tx[H any] interface {
	// Handle returns what the guarded function writes through. The
	// function must not end the transaction: the guard does.
	Handle() H
	// Complete is [Store.Complete] inside the transaction: it changes the
	// record only if it is held under rec.Token, and returns
	// [ErrTokenMismatch] otherwise, either at once or from Commit (a store
	// that sends the whole transaction at commit reports the fence there).
	// [ErrTooLarge] and every limit of the store's transactions must be
	// reported before anything is sent, so the transaction stays usable.
	Complete(ctx context.Context, rec *Record) error
	// Commit commits the transaction. An error may mean it did not
	// commit, or that the answer was lost: the guard reads the record to
	// tell. An error matching [ErrTokenMismatch] means a fenced completion
	// failed and nothing was committed.
	Commit(ctx context.Context) error
	// Rollback aborts the transaction.
	Rollback(ctx context.Context) error
}
