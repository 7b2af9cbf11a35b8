package chaos

import (
	"context"
	"fmt"
	"time"

	tactivity "go.temporal.io/sdk/activity"

	"github.com/idemguard/idemguard/activity"
	"github.com/idemguard/idemguard/guard"
)

// txActivity returns the registered activity name of a transactional
// scenario whose transactions have handle H: guard.DoTx with the
// activity's lease (its heartbeat timeout), Temporal's payload codec and
// opts, whose body writes its side effect, a ledger row, with put inside
// the guard's transaction — one row for TxActivity and TxExplicitActivity,
// one per step for TxStepsActivity, whose steps complete inside the same
// transaction.
func txActivity[H any](wk *chaosWorker, name string, opts []guard.CallOption, put func(ctx context.Context, tx H, e *Entry) error) func(context.Context, Op) (OpResult, error) {
	return func(ctx context.Context, op Op) (OpResult, error) {
		o := append([]guard.CallOption{guard.WithCodec(activity.PayloadCodec{})}, opts...)
		if hb := tactivity.GetInfo(ctx).HeartbeatTimeout; hb > 0 {
			o = append(o, guard.WithLease(hb))
		}
		r, err := guard.DoTx(ctx, wk.g, name, op, func(ctx context.Context, tx H) (OpResult, error) {
			row := func(ctx context.Context, kind, step string) (string, error) {
				return wk.txRow(ctx, op, kind, step, func(e *Entry) error { return put(ctx, tx, e) })
			}
			if stepped(name) {
				return wk.runSteps(ctx, op, func(ctx context.Context, step string) (string, error) { return row(ctx, EntryTxStep, step) })
			}
			if err := wk.bodyWork(ctx, op); err != nil {
				return OpResult{}, err
			}
			key, _ := guard.KeyFromContext(ctx)
			effect, err := row(ctx, EntryTx, "")
			return OpResult{Op: op.ID, Key: key, EffectID: effect, PID: wk.pid, Payload: op.Payload}, err
		}, o...)
		return r, activity.TemporalError(err)
	}
}

// txRow writes the row of a transactional run (the operation's, or a
// step's) through put, notes in the done file that it reached the window
// between the row and the commit, and lingers there, where a kill or a
// pause lands: the row must then roll back with the transaction.
func (wk *chaosWorker) txRow(ctx context.Context, op Op, kind, step string, put func(*Entry) error) (string, error) {
	key, _ := guard.KeyFromContext(ctx) // the step's own, in a step
	e := &Entry{Kind: kind, Op: op.ID, Key: key, Step: step, Effect: randomID(), PID: wk.pid, At: time.Now(), Attempt: attempt(ctx), Payload: op.Payload}
	e.ID = kind + "#" + e.Effect
	if err := put(e); err != nil {
		return "", fmt.Errorf("ledger: %w", err)
	}
	wk.remember(e.Effect)
	wk.window(op.ID, e.Effect, key)
	wk.linger(ctx)
	return e.Effect, nil
}
