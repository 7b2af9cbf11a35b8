package chaos

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"

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
// is [StoreDynamoDBTx]. As in the PostgreSQL scenario ([Config.Postgres]),
// a paused worker's claim is taken over while it is frozen and its
// transaction, sent when it wakes, is cancelled.
func (c Config) DynamoDBTx() Config {
	c.Store = StoreDynamoDBTx
	return c
}

// dynamoTxActivity is the registered transactional activity name of the
// DynamoDB transactional scenario: its rows are items added to the
// guard's TransactWriteItems, each conditional on its id being new.
func (wk *chaosWorker) dynamoTxActivity(name string, opts []guard.CallOption) func(context.Context, Op) (OpResult, error) {
	return txActivity(wk, name, opts, func(_ context.Context, w *idemddb.TxWrites, e *Entry) error {
		return w.Put(wk.cfg.LedgerTable, e.item(), idemddb.If(expression.AttributeNotExists(expression.Name("id"))))
	})
}
