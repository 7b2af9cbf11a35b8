package dynamodb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sort"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemguard/idemguard/store"
)

// The transactional guard on DynamoDB: guard.DoTx hands the function a
// *TxWrites, to which it adds its writes instead of sending them; the guard
// adds the fenced completion of the call's record (and of the records of
// its steps), and Commit sends them all as one TransactWriteItems. The
// function's writes and the completion commit together or not at all.

// txAPI is the part of the DynamoDB client that [Store.Begin] uses.
// *dynamodb.Client satisfies it. It is separate from [API] so that clients
// and test doubles written for API keep working: the store checks for it
// with a type assertion when a transaction begins, and a client without it
// makes Begin fail (guard.DoTx then fails without running the function).
type txAPI interface {
	TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, optFns ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
}

var (
	_ txAPI                       = (*dynamodb.Client)(nil)
	_ store.Transactor[*TxWrites] = (*Store)(nil)
	_ store.Tx[*TxWrites]         = (*transaction)(nil)
)

// DynamoDB's limits on one TransactWriteItems request, which a transaction
// checks // before sending.
const (
	// maxTxActions is the most actions one transaction holds, the guard's
	// completions included: a guarded function may add maxTxActions-1,
	// less one for each guard.Step completed in the call.
	maxTxActions = 100
	// maxTxSize is the most bytes of items one transaction may write, as
	// DynamoDB counts them (see sizeOf).
	maxTxSize = 4 << 20
)

// errNoTxAPI is the cause of Begin's error for a client without
// TransactWriteItems.
var errNoTxAPI = errors.New("the store's client has no TransactWriteItems method (see txAPI)")

// Begin implements [store.Transactor]: it starts a transaction that sends
// nothing until Commit. The guarded function adds its writes to
// its handle, the [TxWrites]; its Complete adds the fenced completion of
// a record; its Commit sends everything as one TransactWriteItems request under a
// ClientRequestToken chosen here, so that every resend of the transaction
// is the same request and DynamoDB applies it at most once (for ten
// minutes after the first).
//
// Begin needs a client with the TransactWriteItems method (the SDK's
// has it), and the
// IAM action dynamodb:PutItem, UpdateItem, DeleteItem or ConditionCheckItem
// on every table the transaction writes or checks, as each action requires.
func (s *Store) Begin(ctx context.Context) (store.Tx[*TxWrites], error) {
	const op = "Begin"
	if err := ctx.Err(); err != nil {
		return nil, s.opErr(op, "", err)
	}
	api, ok := s.client.(txAPI)
	if !ok {
		return nil, s.opErr(op, "", errNoTxAPI)
	}
	x, err := s.txExprs()
	if err != nil {
		return nil, s.opErr(op, "", err)
	}
	return &transaction{s: s, api: api, x: x, token: newRequestToken(), w: newTxWrites(s)}, nil
}

// txExprs holds the transactional completion's expressions, one per
// variant of [Store.Complete]'s, built on the first Begin.
type txExprs struct {
	once    sync.Once
	x       *[numCompleteVariants]*compiled
	err     error
	ownKeys []string // the store's key attributes, sorted
}

// txExprs returns the completion's expressions, building them once.
func (s *Store) txExprs() (*[numCompleteVariants]*compiled, error) {
	s.txx.once.Do(func() {
		s.txx.ownKeys = []string{s.cfg.keyAttr}
		if s.cfg.sortKeyAttr != "" {
			s.txx.ownKeys = append(s.txx.ownKeys, s.cfg.sortKeyAttr)
		}
		sort.Strings(s.txx.ownKeys)
		var x [numCompleteVariants]*compiled
		for m := range numCompleteVariants {
			v := sentinels()
			b := s.cfg.completeExpr(completeShape(m, v), v[slotToken]).
				WithCondition(s.cfg.txCompleteCond(v[slotToken], v[slotInProgress]))
			if x[m], s.txx.err = compile(b); s.txx.err != nil {
				return
			}
		}
		s.txx.x = &x
	})
	return s.txx.x, s.txx.err
}

// newRequestToken returns a ClientRequestToken: 32 random hex digits
// (DynamoDB accepts 1 to 36 characters).
func newRequestToken() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Tx is the transaction [Store.Begin] returns: a [store.Tx] whose handle is
// the [TxWrites] the guarded function adds its writes to. Nothing is sent
// before Commit, which sends the function's writes and the
// completions as one TransactWriteItems request.
type transaction struct {
	s     *Store
	api   txAPI
	x     *[numCompleteVariants]*compiled
	token string // the ClientRequestToken of every send of this transaction
	w     *TxWrites
}

// Handle returns the writes of the transaction, to which the guarded
// function adds its own.
func (t *transaction) Handle() *TxWrites { return t.w }

// Complete implements [store.Tx]: it adds to the transaction the
// completion of rec, an Update of its item conditional on the record being
// held under rec.Token and still in progress, and sends nothing. A record
// whose item would exceed 400 KB is refused with an error matching
// [store.ErrTooLarge]; so is a completion that would take the transaction
// over 4 MB. A transaction over 100 actions, a record whose item
// one of the function's actions also writes, or a transaction whose
// function had an action refused, is refused with a [*TxLimitError]. A
// refused completion is not added, and the transaction stays usable.
//
// If the condition fails when the transaction is sent, Commit returns
// an error matching [store.ErrTokenMismatch] and nothing is written.
func (t *transaction) Complete(ctx context.Context, rec *store.Record) error {
	const op = "Tx.Complete"
	if err := ctx.Err(); err != nil {
		return t.s.opErr(op, rec.Key, err)
	}
	done := *rec
	done.Status = store.StatusCompleted
	e, err := t.s.cfg.encode(&done)
	if err != nil {
		return t.s.opErr(op, rec.Key, err)
	}
	m := completeVariant(e)
	x := t.x[m]
	v := completeSlots(e, e.token)
	v[slotInProgress] = inProgressAttr()
	item := types.TransactWriteItem{Update: &types.Update{
		TableName:                 t.s.tableName,
		Key:                       t.s.cfg.keyItem(rec.Key),
		ConditionExpression:       x.cond,
		UpdateExpression:          x.update,
		ExpressionAttributeNames:  x.names,
		ExpressionAttributeValues: x.fill(v),
	}}
	if err := t.w.addCompletion(rec.Key, item, t.s.cfg.itemSize(rec.Key, e)); err != nil {
		return t.s.opErr(op, rec.Key, err)
	}
	return nil
}

// Commit implements [store.Tx]: it sends the function's writes and the
// completions as one TransactWriteItems request under the transaction's
// ClientRequestToken, and ends the transaction (the function can add
// nothing more). A transaction without actions sends nothing.
//
// The store's retryer resends a request that failed in transit or was
// throttled, with the same token, so a resend after a lost answer is
// applied at most once. A transaction that DynamoDB cancelled only because
// of conflicts with other requests on its items (TransactionConflict) or
// throttling is resent, with the same token, as many times as the
// retryer makes attempts, with the same backoff.
//
// Errors: a [*TxCanceledError] for a cancelled transaction (nothing was
// written), which matches [store.ErrTokenMismatch] when a completion's
// condition failed and [store.ErrThrottled] when only conflicts or
// throttling cancelled it; a [*TxLimitError] for a transaction over
// DynamoDB's limits, refused before sending; otherwise the request's error
// — then the transaction may or may not have been applied, and the record
// tells which.
func (t *transaction) Commit(ctx context.Context) error {
	const op = "Tx.Commit"
	items, key, err := t.w.seal()
	if err != nil {
		return t.s.opErr(op, key, err)
	}
	if len(items) == 0 {
		return nil
	}
	in := &dynamodb.TransactWriteItemsInput{TransactItems: items, ClientRequestToken: &t.token}
	attempts := t.s.cfg.attempts()
	backoff := jitterBackoff{base: defaultBackoffBase, max: defaultBackoffMax}
	for attempt := 1; ; attempt++ {
		_, err := t.api.TransactWriteItems(ctx, in, t.s.optFns...)
		if err == nil {
			return nil
		}
		terr := t.w.mapError(err)
		var ce *TxCanceledError
		if !errors.As(terr, &ce) || !ce.retryable() || attempt >= attempts {
			oe := t.s.opErr(op, key, terr)
			if ce != nil && ce.retryable() {
				oe.(*store.OpError).Throttled = true
			}
			return oe
		}
		d, _ := backoff.BackoffDelay(attempt, err)
		if serr := sleepCtx(ctx, d); serr != nil {
			return t.s.opErr(op, key, errors.Join(terr, serr))
		}
	}
}

// Rollback implements [store.Tx]: it discards the transaction, which sent
// nothing. It is harmless after Commit or another Rollback.
func (t *transaction) Rollback(context.Context) error {
	t.w.discard()
	return nil
}

// attempts is how many times a request is sent: the retryer's attempts.
func (c *config) attempts() int {
	switch {
	case c.retryerSet && c.retryer != nil:
		return max(c.retryer.MaxAttempts(), 1)
	case c.maxAttempts > 0:
		return c.maxAttempts
	}
	return defaultMaxAttempts
}

// sleepCtx waits d, or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// txCompleteCond is the condition of a completion inside a transaction:
// the record is held under token and still in progress. A completion the
// guard resends after a lost answer is the same request (the
// ClientRequestToken makes DynamoDB answer it without applying it again),
// so, unlike [Store.Complete], it need not accept a record it completed
// itself; and a record released while the transaction was in flight
// cancels it.
func (c *config) txCompleteCond(token, inProgress types.AttributeValue) expression.ConditionBuilder {
	return name(c.tokenAttr).Equal(value(token)).And(name(c.statusAttr).Equal(value(inProgress)))
}
