package lambdaguard_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/testing/dynamodbtest"
	"github.com/idemguard/idemguard/lambdaguard"
	idemddb "github.com/idemguard/idemguard/store/dynamodb"
)

// Records in the exact format AWS Powertools for Python 3.x writes
// (persistence/base.py, dynamodb.py; the same from 3.2.1a1 to key_prefix) — data is json.dumps(response, sort_keys=True) with
// its default separators, in_progress_expiration is epoch milliseconds,
// there is no fencing token — put under the key the Go guard derives, are
// read by lambdaguard.Wrap: a COMPLETED one replays its data as the
// handler's answer, an INPROGRESS one whose lease still runs is in
// progress, and one whose lease lapsed is taken over.
func TestPowertoolsRecords(t *testing.T) {
	client := dynamodbtest.NewClient(t)
	table := dynamodbtest.NewTable(t, client)
	s, err := idemddb.New(client, table)
	if err != nil {
		t.Fatal(err)
	}
	g := newGuard(t, s)
	var runs atomic.Int64
	h := lambdaguard.Must(lambdaguard.Wrap(g, func(o order) (receipt, error) {
		runs.Add(1)
		return receipt{"ch_go_" + o.OrderID}, nil
	}, lambdaguard.WithScope("orders-fn"), lambdaguard.WithGuardOptions(guard.WithKeyPath("order_id"))))
	ctx := context.Background()
	now := time.Now()
	put := func(event string, status string, lease time.Time, data string) {
		key, _, err := g.Key("orders-fn", json.RawMessage(event), guard.WithKeyPath("order_id"))
		if err != nil {
			t.Fatal(err)
		}
		item := map[string]types.AttributeValue{
			"id":                     &types.AttributeValueMemberS{Value: key},
			"expiration":             &types.AttributeValueMemberN{Value: strconv.FormatInt(now.Add(time.Hour).Unix(), 10)},
			"in_progress_expiration": &types.AttributeValueMemberN{Value: strconv.FormatInt(lease.UnixMilli(), 10)},
			"status":                 &types.AttributeValueMemberS{Value: status},
		}
		if data != "" {
			item["data"] = &types.AttributeValueMemberS{Value: data}
		}
		if _, err := client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: item}); err != nil {
			t.Fatal(err)
		}
	}
	// json.dumps({"order_id": "7", "charge": "ch_py_7"}, sort_keys=True)
	put(`{"order_id":"7"}`, "COMPLETED", now.Add(time.Minute), `{"charge": "ch_py_7", "order_id": "7"}`)
	put(`{"order_id":"8"}`, "INPROGRESS", now.Add(time.Minute), "")
	put(`{"order_id":"9"}`, "INPROGRESS", now.Add(-time.Minute), "")

	if out, err := invoke(t, ctx, h, `{"order_id":"7"}`); err != nil || out != `{"charge": "ch_py_7", "order_id": "7"}` {
		t.Errorf("over a Powertools COMPLETED record = %s, %v; want its data replayed", out, err)
	}
	var busy *lambdaguard.IdempotencyAlreadyInProgressError
	if _, err := invoke(t, ctx, h, `{"order_id":"8"}`); !errors.As(err, &busy) {
		t.Errorf("over a live Powertools INPROGRESS record = %v, want IdempotencyAlreadyInProgressError", err)
	}
	if out, err := invoke(t, ctx, h, `{"order_id":"9"}`); err != nil || out != `{"charge":"ch_go_9"}` {
		t.Errorf("over a lapsed Powertools INPROGRESS record = %s, %v; want the handler run", out, err)
	}
	if runs.Load() != 1 {
		t.Errorf("the handler ran %d times, want once (order 9)", runs.Load())
	}
}
