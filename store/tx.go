package store

import "context"

// Transactor is an optional interface for stores that can complete a claim
// inside a transaction of the same database the guarded function writes to.
// The guard's transactional entry point (guard.DoTx) claims the key as
// usual, then begins a transaction with Begin, hands it to the function,
// completes the claim with [Tx.Complete] inside it and commits: the
// function's writes and the completion commit together or not at all, so a
// crash between the side effect and the completion cannot run the side
// effect twice. A holder whose claim was taken over finds its Complete
// fenced out ([ErrTokenMismatch]) and rolls back its own writes with it.
type Transactor interface {
	Begin(ctx context.Context) (Tx, error)
}

// Tx is a transaction begun by a [Transactor]. The guard calls Complete at
// most once, then Commit, or Rollback alone; Rollback after Commit is
// harmless. A store's Tx gives the function access to its database handle
// through a type of its own.
type Tx interface {
	// Complete is [Store.Complete] inside the transaction: it changes the
	// record only if it is held under rec.Token, and returns
	// [ErrTokenMismatch] otherwise. [ErrTooLarge] must be reported before
	// anything is sent, so the transaction stays usable.
	Complete(ctx context.Context, rec *Record) error
	// Commit commits the transaction. An error may mean it did not
	// commit, or that the answer was lost: the guard reads the record to
	// tell.
	Commit(ctx context.Context) error
	// Rollback aborts the transaction.
	Rollback(ctx context.Context) error
}
