package chaos

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	tactivity "go.temporal.io/sdk/activity"

	"github.com/idemguard/idemguard/activity"
	"github.com/idemguard/idemguard/guard"
	idemddb "github.com/idemguard/idemguard/store/dynamodb"
)

// The DynamoDB transactional scenario (-store dynamodb-tx): the workflows,
// workers, kills, pauses and fault proxy of the DynamoDB scenario, with
// every operation a ChaosTx activity whose side effect is a ledger item
// added to the transactional guard's TransactWriteItems (guard.DoTx over
// store/dynamodb), which also completes the operation's idempotency
// record. The ledger is a table of the same DynamoDB Local; an item exists
// only if its transaction was applied. The transaction goes through the
// proxy like every other store request, so it gets the faults too: errors
// and throttling before DynamoDB sees it, and answers lost after DynamoDB
// applied it, which the SDK's retryer resends under the same
// ClientRequestToken.

// StoreDynamoDBTx is the value of Config.Store for the DynamoDB
// transactional scenario.
const StoreDynamoDBTx = "dynamodb-tx"

// DynamoDBTx returns c set for the DynamoDB transactional scenario: Store
// is [StoreDynamoDBTx], and pauses last 4–6 s instead of 2.5–4 s, as in
// the PostgreSQL scenario ([Config.Postgres]), so that a paused worker's
// claim is taken over while it is frozen and its transaction, sent when it
// wakes, is cancelled.
func (c Config) DynamoDBTx() Config {
	c.Store = StoreDynamoDBTx
	c.PauseMin, c.PauseMax = 4*time.Second, 6*time.Second
	return c
}

// dynamoTxActivity is the registered ChaosTx activity of the DynamoDB
// transactional scenario: guard.DoTx with the activity's lease (its
// heartbeat timeout) and Temporal's payload codec, as txActivity.
func (wk *chaosWorker) dynamoTxActivity(ctx context.Context, op Op) (OpResult, error) {
	opts := []guard.CallOption{guard.WithCodec(activity.PayloadCodec{})}
	if hb := tactivity.GetInfo(ctx).HeartbeatTimeout; hb > 0 {
		opts = append(opts, guard.WithLease(hb))
	}
	r, err := guard.DoTx(ctx, wk.g, TxActivity, op, func(ctx context.Context, w *idemddb.TxWrites) (OpResult, error) {
		return wk.dynamoTxBody(ctx, w, op)
	}, opts...)
	return r, activity.TemporalError(err)
}

// dynamoTxBody is the transactional body: its side effect is a ledger item
// added to the guard's transaction. After adding it, and before it lingers
// (the window in which a kill or a pause lands between the side effect and
// the commit), it notes the run in its done file, so the checks can count
// the runs whose transaction was never applied.
func (wk *chaosWorker) dynamoTxBody(ctx context.Context, w *idemddb.TxWrites, op Op) (OpResult, error) {
	key, _ := guard.KeyFromContext(ctx)
	if err := work(ctx, wk.cfg.BodyWork); err != nil {
		return OpResult{}, err
	}
	e := &Entry{Kind: EntryTx, Op: op.ID, Key: key, Effect: randomID(), PID: wk.pid, At: time.Now(), Attempt: int(tactivity.GetInfo(ctx).Attempt)}
	e.ID = "tx#" + e.Effect
	if err := w.Put(wk.cfg.LedgerTable, e.item(), idemddb.If(expression.AttributeNotExists(expression.Name("id")))); err != nil {
		return OpResult{}, fmt.Errorf("ledger: %w", err)
	}
	wk.remember(e.Effect)
	wk.mu.Lock()
	fmt.Fprintf(wk.done, "window %s %s %d\n", op.ID, e.Effect, e.At.UnixMilli())
	wk.mu.Unlock()
	work(context.WithoutCancel(ctx), wk.cfg.BodyAfter) // the crash window: the item added, not sent
	return OpResult{Op: op.ID, Key: key, EffectID: e.Effect, PID: wk.pid}, nil
}
