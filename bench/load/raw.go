package main

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	mathrand "math/rand/v2"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/internal/epoch"
	"github.com/idemguard/idemguard/store"
)

// The raw baseline sends, with the same client and per-request options, the
// requests store/dynamodb sends for a claim (a conditional PutItem that
// returns the old item when its condition fails) and a completion (an
// UpdateItem conditional on the claim's token): same attributes, same
// expressions, same placeholders, same values. It is what a caller
// hand-rolling the protocol with the SDK would send, with the expressions
// written once as constants instead of built per request, and keys computed
// before the clock starts; the guard's key derivation, expression building,
// record encoding and decoding, tokens and telemetry are all counted as the
// guard's overhead.

const (
	rawTTL   = adapt.DefaultTTL
	rawLease = adapt.DefaultLease

	// The claim's condition: the record is absent, expired, or in progress
	// under a lapsed lease (store/dynamodb Acquire).
	claimCondition = "(attribute_not_exists (#0)) OR (#1 <= :0) OR ((#2 = :1) AND (attribute_exists (#3)) AND (#3 <= :2))"
	// The completion (store/dynamodb Complete): fenced by the token; sets
	// status, expiry, result and format and removes the attributes a completed
	// record without a payload hash, result kind or compression lacks.
	completeCondition = "#0 = :0"
	completeUpdate    = "REMOVE #1, #2, #3, #4\nSET #5 = :1, #6 = :2, #7 = :3, #8 = :4\n"
)

var (
	claimNames = map[string]string{
		"#0": "id", "#1": "expiration", "#2": "status", "#3": "in_progress_expiration",
	}
	completeNames = map[string]string{
		"#0": "token", "#1": "in_progress_expiration", "#2": "validation", "#3": "result_kind",
		"#4": "data_encoding", "#5": "status", "#6": "expiration", "#7": "data", "#8": "format",
	}
)

func numAttr(n int64) *types.AttributeValueMemberN {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}

func strAttr(s string) *types.AttributeValueMemberS {
	return &types.AttributeValueMemberS{Value: s}
}

// newToken returns a 128-bit random fencing token in hex, as the guard
// makes them.
func newToken() string {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], mathrand.Uint64())
	binary.LittleEndian.PutUint64(b[8:], mathrand.Uint64())
	return hex.EncodeToString(b[:])
}

// rawClaim sends the claim's conditional PutItem for key under token.
func (b *bench) rawClaim(ctx context.Context, key, token string, now time.Time) error {
	_, err := b.client.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String(b.table),
		Item: map[string]types.AttributeValue{
			"id":                     strAttr(key),
			"status":                 strAttr("INPROGRESS"),
			"expiration":             numAttr(epoch.CeilSeconds(now.Add(max(rawTTL, rawLease)))),
			"in_progress_expiration": numAttr(epoch.CeilMillis(now.Add(rawLease))),
			"token":                  strAttr(token),
			"format":                 numAttr(store.FormatVersion),
		},
		ConditionExpression:      aws.String(claimCondition),
		ExpressionAttributeNames: claimNames,
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":0": numAttr(epoch.FloorSeconds(now)),
			":1": strAttr("INPROGRESS"),
			":2": numAttr(epoch.FloorMillis(now)),
		},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}, b.optFns...)
	return err
}

// rawMiss claims key, runs the function, and completes the claim with its
// JSON result: the two writes of a guarded first call.
func (b *bench) rawMiss(ctx context.Context, key string, in Order) error {
	token := newToken()
	if err := b.rawClaim(ctx, key, token, time.Now()); err != nil {
		return err
	}
	b.bodyRuns.Add(1)
	data, err := json.Marshal(charge(in))
	if err != nil {
		return err
	}
	_, err = b.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                aws.String(b.table),
		Key:                      map[string]types.AttributeValue{"id": strAttr(key)},
		ConditionExpression:      aws.String(completeCondition),
		UpdateExpression:         aws.String(completeUpdate),
		ExpressionAttributeNames: completeNames,
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":0": strAttr(token),
			":1": strAttr("COMPLETED"),
			":2": numAttr(epoch.CeilSeconds(time.Now().Add(rawTTL))),
			":3": strAttr(string(data)),
			":4": numAttr(store.FormatVersion),
		},
	}, b.optFns...)
	return err
}

// rawReplay sends the claim for a completed key, expects its condition to
// fail with the old item, and decodes the stored result from it.
func (b *bench) rawReplay(ctx context.Context, key string) error {
	err := b.rawClaim(ctx, key, newToken(), time.Now())
	var ccf *types.ConditionalCheckFailedException
	if !errors.As(err, &ccf) {
		if err == nil {
			return fmt.Errorf("replay of %s: the claim succeeded; the record was missing", key)
		}
		return err
	}
	st, _ := ccf.Item["status"].(*types.AttributeValueMemberS)
	data, _ := ccf.Item["data"].(*types.AttributeValueMemberS)
	if st == nil || st.Value != "COMPLETED" || data == nil {
		return fmt.Errorf("replay of %s: the old item is not a completed record with a result", key)
	}
	var r Receipt
	return json.Unmarshal([]byte(data.Value), &r)
}
