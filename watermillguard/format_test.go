package watermillguard_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/testing/dynamodbtest"
	"github.com/idemguard/idemguard/internal/testing/postgrestest"
	"github.com/idemguard/idemguard/internal/testing/redistest"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/postgres"
)

// A message whose record a newer release wrote, in a format this build
// cannot read (a rolling deploy, docs/compatibility.md), is handed back to
// the broker, to be redelivered once the deploy is done: the delivery
// fails with the guard's store error, the handler does not run, and
// nothing it published before is published again.
func TestNewerFormatIsNacked(t *testing.T) {
	newer := strconv.Itoa(store.FormatVersion + 1)
	for _, sp := range []struct {
		name string
		// open returns a store on a fresh key space and a function that
		// marks every record in it as written in format newer.
		open func(t *testing.T) (store.Store, func())
	}{
		{"dynamodb", func(t *testing.T) (store.Store, func()) {
			client := dynamodbtest.NewClient(t)
			s := dynamodbtest.NewStore(t, client)
			return s, func() {
				out, err := client.Scan(t.Context(), &dynamodb.ScanInput{TableName: aws.String(s.Table())})
				if err != nil {
					t.Fatal(err)
				}
				for _, item := range out.Items {
					if _, err := client.UpdateItem(t.Context(), &dynamodb.UpdateItemInput{
						TableName:                 aws.String(s.Table()),
						Key:                       map[string]types.AttributeValue{"id": item["id"]},
						UpdateExpression:          aws.String("SET #f = :f"),
						ExpressionAttributeNames:  map[string]string{"#f": "format"},
						ExpressionAttributeValues: map[string]types.AttributeValue{":f": &types.AttributeValueMemberN{Value: newer}},
					}); err != nil {
						t.Fatal(err)
					}
				}
			}
		}},
		{"redis", func(t *testing.T) (store.Store, func()) {
			client := redistest.NewClient(t)
			s := redistest.NewStore(t, client)
			return s, func() {
				keys, err := client.Keys(t.Context(), s.Prefix()+"*").Result()
				if err != nil {
					t.Fatal(err)
				}
				for _, k := range keys {
					if err := client.HSet(t.Context(), k, "format", newer).Err(); err != nil {
						t.Fatal(err)
					}
				}
			}
		}},
		{"postgres", func(t *testing.T) (store.Store, func()) {
			pool := postgrestest.NewPool(t)
			table := postgrestest.NewTable(t, pool, "")
			s, err := postgres.New(pool, postgres.WithTable(table))
			if err != nil {
				t.Fatal(err)
			}
			return s, func() {
				if _, err := pool.Exec(t.Context(), fmt.Sprintf("UPDATE %s SET format = %s", table, newer)); err != nil {
					t.Fatal(err)
				}
			}
		}},
	} {
		t.Run(sp.name, func(t *testing.T) {
			s, mark := sp.open(t)
			mw := newMiddleware(t, newGuard(t, s))
			key := watermill.NewUUID()
			var runs atomic.Int32
			body := func(context.Context, *message.Message) ([]*message.Message, error) {
				runs.Add(1)
				return produce("handler", 1), nil
			}
			if _, err := through(t.Context(), mw, key, []byte(`{}`), body); err != nil {
				t.Fatalf("first delivery: %v", err)
			}
			mark()
			out, err := through(t.Context(), mw, key, []byte(`{}`), body)
			var fe *store.FormatError
			if !errors.Is(err, guard.ErrStore) || !errors.As(err, &fe) || !errors.Is(err, store.ErrNewerFormat) {
				t.Errorf("a redelivery over a record in a newer format returned %v; want guard.ErrStore wrapping a *store.FormatError, so that the message is nacked", err)
			}
			if len(out) != 0 {
				t.Errorf("the redelivery published %d messages; want none", len(out))
			}
			if n := runs.Load(); n != 1 {
				t.Errorf("the handler ran %d times; want once, on the first delivery", n)
			}
		})
	}
}
