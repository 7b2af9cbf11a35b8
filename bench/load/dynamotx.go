package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/epoch"
	"github.com/idemguard/idemguard/store"
	idemddb "github.com/idemguard/idemguard/store/dynamodb"
)

// The DynamoDB transactional scenarios: the transactional guard
// (guard.WrapTx over store/dynamodb), whose function adds one business
// write (a Put of an effect item) to the transaction that also completes
// its record, against a raw TransactWriteItems sending that same Put under
// a ClientRequestToken, with the same client and per-request options. The
// guarded call sends the claim and the transaction (2 requests), the raw
// one the transaction (1): the difference is the claim, the completion
// action and everything the guard does on the client. tx_protocol_raw
// sends by hand what the guarded call sends — the claim's PutItem, then
// TransactWriteItems of the Put and the completion, with the store's
// expressions written as constants — so that the guard's own work on the
// client can be told from the cost of the two requests. The replay
// scenarios replay completed transactional calls (one failed claim, no
// transaction; from the local cache, no request), against replay_raw.

// DynamoDB transactional scenario names.
const (
	TxRaw                 = "tx_raw"
	TxProtocolRaw         = "tx_protocol_raw"
	TxGuarded             = "tx_guarded"
	TxReplayGuarded       = "tx_replay_guarded"
	TxReplayCachedGuarded = "tx_replay_cached_guarded"
)

const scopeTxReplay = "bench-tx-replay"

// setUpTx creates the business table of the transactional scenarios and
// their guarded functions, on guard g and, for the cached replay, a guard
// over s with a cache of its own (the replay scenarios' would hold twice
// as many records).
func (b *bench) setUpTx(ctx context.Context, g *guard.Guard, s store.Store, body func(context.Context, Order) (Receipt, error)) error {
	cached, err := guard.New(s, guard.WithCache(b.cfg.ReplayKeys, 0))
	if err != nil {
		return err
	}
	b.effects = b.table + "-effects"
	_, err = b.client.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(b.effects),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	})
	if err != nil {
		return err
	}
	fn := func(ctx context.Context, w *idemddb.TxWrites, o Order) (Receipt, error) {
		if err := w.Put(b.effects, effectItem(o)); err != nil {
			return Receipt{}, err
		}
		return body(ctx, o)
	}
	if b.txFn, err = guard.WrapTx(g, scopeTx, fn); err != nil {
		return err
	}
	if b.txReplayFn, err = guard.WrapTx(g, scopeTxReplay, fn); err != nil {
		return err
	}
	b.txCachedFn, err = guard.WrapTx(cached, scopeTxReplay, fn)
	return err
}

// populateTx completes a transactional record for each replay input, and
// primes the cached guard's cache with them.
func (b *bench) populateTx(ctx context.Context) error {
	for i, in := range b.replayIn {
		if _, err := b.txReplayFn(ctx, in); err != nil {
			return fmt.Errorf("completing transactional replay record %d: %w", i, err)
		}
		if _, err := b.txCachedFn(ctx, in); err != nil {
			return fmt.Errorf("priming the cache with transactional record %d: %w", i, err)
		}
	}
	return nil
}

// effectItem is the business write of the transactional scenarios.
func effectItem(o Order) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		"id":     strAttr(o.OrderID),
		"amount": &types.AttributeValueMemberN{Value: strconv.FormatInt(o.Amount, 10)},
	}
}

// rawTx sends the business write as one TransactWriteItems, as a caller
// writing it transactionally without a guard would, after running the
// function and encoding its result as the guarded call does.
func (b *bench) rawTx(ctx context.Context, in Order) error {
	b.bodyRuns.Add(1)
	if _, err := json.Marshal(charge(in)); err != nil {
		return err
	}
	_, err := b.client.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{
		ClientRequestToken: aws.String(newToken()),
		TransactItems:      []types.TransactWriteItem{{Put: &types.Put{TableName: aws.String(b.effects), Item: effectItem(in)}}},
	}, b.optFns...)
	return err
}

// The transactional completion, as store/dynamodb sends it for a record
// without a payload hash, result kind or compression: fenced by the token
// and the in-progress status (TestTxProtocolRawSendsTheStoresRequest holds
// it to the store's).
const (
	txCompleteCondition = "(#0 = :0) AND (#1 = :1)"
	txCompleteUpdate    = "REMOVE #2, #3, #4, #5\nSET #1 = :2, #6 = :3, #7 = :4, #8 = :5\n"
)

var txCompleteNames = map[string]string{
	"#0": "token", "#1": "status", "#2": "in_progress_expiration", "#3": "validation",
	"#4": "result_kind", "#5": "data_encoding", "#6": "expiration", "#7": "data", "#8": "format",
}

// txCompletion is the completion action of a claim under token with the
// JSON result data, expiring at expires.
func (b *bench) txCompletion(key, token string, data []byte, expires time.Time) types.TransactWriteItem {
	return types.TransactWriteItem{Update: &types.Update{
		TableName:                aws.String(b.table),
		Key:                      map[string]types.AttributeValue{"id": strAttr(key)},
		ConditionExpression:      aws.String(txCompleteCondition),
		UpdateExpression:         aws.String(txCompleteUpdate),
		ExpressionAttributeNames: txCompleteNames,
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":0": strAttr(token),
			":1": strAttr("INPROGRESS"),
			":2": strAttr("COMPLETED"),
			":3": numAttr(epoch.CeilSeconds(expires)),
			":4": strAttr(string(data)),
			":5": numAttr(store.FormatVersion),
		},
	}}
}

// rawTxProtocol claims key, runs the function, and sends its business Put
// and the completion as one TransactWriteItems: the requests of a guarded
// transactional first call, built by hand.
func (b *bench) rawTxProtocol(ctx context.Context, key string, in Order) error {
	token := newToken()
	if err := b.rawClaim(ctx, key, token, time.Now()); err != nil {
		return err
	}
	b.bodyRuns.Add(1)
	data, err := json.Marshal(charge(in))
	if err != nil {
		return err
	}
	_, err = b.client.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{
		ClientRequestToken: aws.String(newToken()),
		TransactItems: []types.TransactWriteItem{
			{Put: &types.Put{TableName: aws.String(b.effects), Item: effectItem(in)}},
			b.txCompletion(key, token, data, time.Now().Add(rawTTL)),
		},
	}, b.optFns...)
	return err
}

// closeTx deletes the business table.
func (b *bench) closeTx() error {
	if b.effects == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := b.client.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(b.effects)})
	var nf *types.ResourceNotFoundException
	if errors.As(err, &nf) {
		return nil
	}
	return err
}
