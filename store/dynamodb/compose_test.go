package dynamodb_test

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/guard/guardtest"
	"github.com/idemguard/idemguard/internal/testing/dynamodbtest"
	"github.com/idemguard/idemguard/store"
	idemddb "github.com/idemguard/idemguard/store/dynamodb"
)

// guard.DoTx joins the composition suite on DynamoDB: the body's side
// effects are counters incremented through the call's TxWrites, so they
// are applied with the call's completion (and its steps') or not at all.
func TestCompositionDoTx(t *testing.T) {
	e := newTxEnv(t)
	guardtest.RunComposition(t, guardtest.EntryPoint{
		Name:         "guard.DoTx",
		GuardOptions: []guard.Option{guard.WithKeyPath("key"), guard.WithPayloadValidation("payload")},
		Run: func(ctx context.Context, t *testing.T, g *guard.Guard, call guardtest.Call, _ guardtest.Effect, body guardtest.Body) (string, error) {
			in := map[string]string{"key": call.Key, "payload": call.Payload}
			return guard.DoTx(ctx, g, "compose", in, func(ctx context.Context, w *idemddb.TxWrites) (string, error) {
				return body(ctx, func(ctx context.Context, name string) error {
					if err := context.Cause(ctx); err != nil {
						return err
					}
					return w.Update(e.biz, pk(call.Key+"/"+name), expression.Add(expression.Name("n"), expression.Value(1)))
				})
			})
		},
		Count: func(t *testing.T, key, name string) int { return int(e.number(t, key+"/"+name, "n")) },
	}, guardtest.Stores{"dynamodb": func(t *testing.T) store.Store { return dynamodbtest.NewStore(t, e.client) }})
}
