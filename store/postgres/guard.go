package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/store"
)

// ErrTxOwned is returned by Commit and Rollback of the transaction that
// [DoTx] hands the guarded function: the guard ends that transaction
// itself, after writing the completion in it. A function that wants to
// undo its writes returns an error instead; one that wants a partial
// rollback uses a savepoint (tx.Begin, whose Commit and Rollback work).
var ErrTxOwned = errors.New("postgres: the guarded function's transaction is ended by the guard, not by the function")

// DoTx runs fn at most once for the key derived from input within scope,
// in a PostgreSQL transaction that also writes the call's completion:
// fn's writes through tx and the completion commit together or not at
// all. It is [guard.DoTx] with the transaction as a [pgx.Tx]; g's store
// must be a [*Store] (or a store whose [store.Transactor] returns a
// transaction with a PgxTx method, as [*Tx] has).
//
// What it does, in order: claims the key (a replay returns the stored
// result and never begins a transaction), begins a transaction at READ
// COMMITTED on a connection of the store's pool, runs fn with it while the
// guard extends the lease from another connection, writes the completion
// with the claim's fencing token inside the transaction and commits.
//
//   - fn returns an error: the transaction is rolled back and the key
//     released, so the next call runs fn again; a definite error
//     ([guard.WithDefiniteErrors]) is then recorded outside the
//     transaction and replayed, its writes rolled back all the same.
//   - fn panics: rolled back, released, and the panic goes on.
//   - The claim was taken over while fn ran (a pause past the lease plus
//     the guard's clock skew): the completion matches no row, the whole
//     transaction is rolled back, fn's writes with it, and DoTx returns an
//     error matching [guard.ErrLeaseLost].
//   - The commit's answer is lost: DoTx reads the record to tell whether it
//     committed.
//
// A crash anywhere before the commit leaves nothing committed: the
// transaction dies with its connection and the claim lapses with its
// lease, so the retry runs fn once more against a database without its
// writes. There is no window in which fn's writes commit and the
// completion does not.
//
// The isolation level is READ COMMITTED, whatever the server's default
// (see [Store.Begin]): the lease keeper extends the claim's row from
// another connection while fn runs, and only at READ COMMITTED does the
// completion's fenced UPDATE read the newest version of that row; at
// REPEATABLE READ or SERIALIZABLE it fails with a serialization error
// whenever the lease was extended after fn's first statement. fn may run
// SET TRANSACTION ISOLATION LEVEL as its first statement when its own
// reads need more, and must then expect those failures (they match
// [store.ErrThrottled]; the guard rolls back and releases).
//
// fn must not end the transaction: its Commit and Rollback return
// [ErrTxOwned], and a COMMIT or ROLLBACK sent as SQL makes the completion
// fail. The transaction holds one pool connection while fn runs and the
// lease keeper needs another, so the pool needs at least two connections.
// An unguarded call (an empty key selection, or guard.DisableEnv) still
// runs fn in a transaction of its own.
func DoTx[T any](ctx context.Context, g *guard.Guard, scope string, input any, fn func(ctx context.Context, tx pgx.Tx) (T, error), opts ...guard.CallOption) (T, error) {
	return guard.DoTx(ctx, g, scope, input, txBody(fn), opts...)
}

// WrapTx returns a function with the shape of a plain call, func(ctx, in),
// that runs fn through [DoTx] with its key derived from in. It checks the
// options, and that g's store can begin transactions, once, here.
func WrapTx[In, Out any](g *guard.Guard, scope string, fn func(ctx context.Context, tx pgx.Tx, in In) (Out, error), opts ...guard.CallOption) (func(context.Context, In) (Out, error), error) {
	if _, ok := g.Store().(store.Transactor); !ok {
		return nil, fmt.Errorf("%w: postgres.WrapTx needs a store that implements store.Transactor; %T does not", guard.ErrInvalidOption, g.Store())
	}
	// guard.Wrap checks the scope and options as DoTx will apply them.
	if _, err := guard.Wrap(g, scope, func(context.Context, In) (Out, error) { panic("unreachable") }, opts...); err != nil {
		return nil, err
	}
	return func(ctx context.Context, in In) (Out, error) {
		return DoTx(ctx, g, scope, in, func(ctx context.Context, tx pgx.Tx) (Out, error) { return fn(ctx, tx, in) }, opts...)
	}, nil
}

// pgxTxer is a store transaction that exposes its pgx transaction: [*Tx],
// or a wrapper of one.
type pgxTxer interface{ PgxTx() pgx.Tx }

// txBody adapts fn to guard.DoTx's function of a store.Tx.
func txBody[T any](fn func(context.Context, pgx.Tx) (T, error)) func(context.Context, store.Tx) (T, error) {
	return func(ctx context.Context, tx store.Tx) (T, error) {
		p, ok := tx.(pgxTxer)
		if !ok {
			var zero T
			return zero, fmt.Errorf("%w: postgres.DoTx needs the store's transactions to have a PgxTx method; %T has none", guard.ErrInvalidOption, tx)
		}
		return fn(ctx, ownedTx{p.PgxTx()})
	}
}

// ownedTx is the transaction as the guarded function sees it: every
// method but Commit and Rollback goes to pgx.
type ownedTx struct{ pgx.Tx }

func (ownedTx) Commit(context.Context) error   { return ErrTxOwned }
func (ownedTx) Rollback(context.Context) error { return ErrTxOwned }
