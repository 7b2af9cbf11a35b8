package guard

import (
	"context"

	"github.com/idemguard/idemguard/store"
)

// DoTx is [Do] for a function whose side effect is a write to the store's
// own database: it claims the key, begins a transaction with the store's
// [store.Transactor], runs fn with the transaction's handle (a pgx.Tx on
// PostgreSQL, a builder of TransactWriteItems actions on DynamoDB), and
// writes the completion inside that same transaction before committing.
// The function's writes and the completion commit together or not at all,
// so a crash after the side effect can no longer run it twice, and a
// holder whose claim was taken over (a zombie) finds its completion fenced
// out and its whole transaction rolled back ([ErrLeaseLost]).
//
// A replay never begins a transaction. If fn returns an error the
// transaction is rolled back and the key released (a definite error is
// then recorded outside it, as Do records it); if fn panics the same
// happens and the panic continues. If the store refuses the commit
// because of fn's own writes (a condition of fn's that did not hold, a
// constraint checked at commit), nothing is written, the key is released
// and DoTx returns an error matching [ErrRefused], not a store error. If
// the commit fails otherwise, its answer is lost or it outlives its
// deadline, DoTx reads the record, under a deadline of its own, to learn
// whether it committed, and releases the key if it did not. A [Step]
// inside fn completes inside the same transaction: its record commits
// with fn's writes, and its claim is released if they roll back.
//
// DoTx promises exactly once, so it requires a key: an empty key
// selection fails with [ErrKeyMissing] without running fn, unless the call,
// or the defaults given to [New], say [WithRequireKey](false). A call that
// then runs unguarded (an empty key selection, or IDEMGUARD_DISABLED) still runs
// fn in a transaction of its own.
//
// H is the store's handle type: the store must implement
// store.Transactor[H], or DoTx returns [ErrInvalidOption] without
// claiming. fn must not end the transaction itself.
//
// How the result was obtained goes to [WithOutcomeHook] and telemetry:
// executed when fn's writes committed (or fn ran and its claim was taken
// over: [ErrLeaseLost], nothing of it committed), replayed, released when
// nothing of fn committed and the key was released (fn's error, a refusal
// by fn's own condition, a transaction the store failed to begin or
// commit), unguarded.
func DoTx[T, H any](ctx context.Context, g *Guard, scope string, input any, fn func(ctx context.Context, tx H) (T, error), opts ...CallOption) (T, error) {
	var zero T
	tr, err := transactor[H](g)
	if err != nil {
		return zero, err
	}
	c, err := g.withTx(scope, opts)
	if err != nil {
		return zero, err
	}
	v, out, err := execute(ctx, &request{g: g, c: c, label: scope, begin: tr}, input, txBody(fn))
	if c.report != nil {
		*c.report = out
	}
	return v, err
}

// WrapTx returns a function with the shape of a plain call, func(ctx, in),
// that runs fn through [DoTx] with its key derived from in (required, as
// DoTx requires it). It checks the options, that g's store begins
// transactions with handle H, and that the store can hold the keys of
// scope ([Guard.CheckScope]), once, here.
func WrapTx[In, Out, H any](g *Guard, scope string, fn func(ctx context.Context, tx H, in In) (Out, error), opts ...CallOption) (func(context.Context, In) (Out, error), error) {
	tr, err := transactor[H](g)
	if err != nil {
		return nil, err
	}
	c, err := g.withTx(scope, opts)
	if err != nil {
		return nil, err
	}
	if err := g.CheckScope(scope); err != nil {
		return nil, err
	}
	return func(ctx context.Context, in In) (Out, error) {
		v, _, err := execute(ctx, &request{g: g, c: c, label: scope, begin: tr}, in, txBody(func(ctx context.Context, tx H) (Out, error) { return fn(ctx, tx, in) }))
		return v, err
	}, nil
}

// transactor returns how g's store begins transactions with handle H.
func transactor[H any](g *Guard) (beginner, error) {
	tr, ok := g.store.(store.Transactor[H])
	if !ok {
		var h H
		return nil, invalidOption("DoTx with a %s handle needs a store that implements store.Transactor[%s]; %s does not", typeName(&h), typeName(&h), storeName(g.store))
	}
	return func(ctx context.Context) (txn, error) { return tr.Begin(ctx) }, nil
}

// txBody adapts fn to the protocol's function of a transaction.
func txBody[T, H any](fn func(context.Context, H) (T, error)) body[T] {
	return func(ctx context.Context, tx txn) (T, error) { return fn(ctx, tx.(store.Tx[H]).Handle()) }
}
