package guard

import (
	"context"

	"github.com/idemguard/idemguard/store"
)

// DoTx is [Do] for a function whose side effect is a write to the store's
// own database: it claims the key, begins a transaction with the store's
// [store.Transactor], runs fn with it, and writes the completion inside
// that same transaction before committing. The function's writes and the
// completion commit together or not at all, so a crash after the side
// effect can no longer run it twice, and a holder whose claim was taken
// over (a zombie) finds its completion fenced out and its whole
// transaction rolled back ([ErrLeaseLost]).
//
// A replay never begins a transaction. If fn returns an error the
// transaction is rolled back and the key released (a definite error is
// then recorded outside it, as Do records it); if fn panics the same
// happens and the panic continues. If the commit's answer is lost, DoTx
// reads the record to learn whether it committed. The store must implement
// store.Transactor (the PostgreSQL store does); otherwise DoTx returns
// [ErrInvalidOption]. Store packages wrap it with their own transaction
// type, for example postgres.DoTx.
func DoTx[T any](ctx context.Context, g *Guard, scope string, input any, fn func(ctx context.Context, tx store.Tx) (T, error), opts ...CallOption) (T, error) {
	tr, ok := g.store.(store.Transactor)
	if !ok {
		var zero T
		return zero, invalidOption("DoTx needs a store that implements store.Transactor; %s does not", storeName(g.store))
	}
	c, err := g.with(scope, opts)
	if err != nil {
		var zero T
		return zero, err
	}
	v, _, err := executeTx(ctx, g, c, scope, input, fn, tr)
	return v, err
}

// unguarded runs fn without a record: in a transaction of its own when the
// call is transactional (tr is not nil).
func unguarded[T any](ctx context.Context, fn body[T], tr store.Transactor) (v T, err error) {
	if tr == nil {
		return fn(ctx, nil)
	}
	tx, err := tr.Begin(ctx)
	if err != nil {
		return v, &StoreError{Op: "begin", Err: err}
	}
	committed := false
	defer func() {
		if !committed {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	if v, err = fn(ctx, tx); err != nil {
		return v, err
	}
	committed = true
	return v, tx.Commit(ctx)
}
