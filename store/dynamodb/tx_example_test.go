package dynamodb_test

import (
	"context"
	"errors"
	"log"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemguard/idemguard/guard"
	idemddb "github.com/idemguard/idemguard/store/dynamodb"
)

// A charge recorded and an account debited exactly once: the two writes
// are added to the transaction and sent with the completion of the
// charge's record, as one TransactWriteItems, only if the balance covers
// the charge.
func ExampleTxWrites() {
	ctx := context.Background()
	client := dynamodb.New(dynamodb.Options{Region: "eu-west-1"})
	s, err := idemddb.New(client, "idempotency")
	if err != nil {
		log.Fatal(err)
	}
	g, err := guard.New(s)
	if err != nil {
		log.Fatal(err)
	}

	type Charge struct {
		ID      string `json:"id"`
		Account string `json:"account"`
		Cents   int64  `json:"cents"`
	}
	c := Charge{ID: "ch-1001", Account: "acct-7", Cents: 4200}
	str := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }

	receipt, err := guard.DoTx(ctx, g, "charge", c, func(ctx context.Context, w *idemddb.TxWrites) (string, error) {
		err := w.Put("wallet", map[string]types.AttributeValue{
			"pk":    str("charge#" + c.ID),
			"cents": &types.AttributeValueMemberN{Value: strconv.FormatInt(c.Cents, 10)},
		})
		if err != nil {
			return "", err // a refused write (a limit): nothing is sent
		}
		err = w.Update("wallet", map[string]types.AttributeValue{"pk": str("acct#" + c.Account)},
			expression.Add(expression.Name("balance"), expression.Value(-c.Cents)),
			idemddb.If(expression.Name("balance").GreaterThanEqual(expression.Value(c.Cents))),
			idemddb.ReturnOldOnFailure())
		return "receipt-" + c.ID, err
	}, guard.WithKeyPath("id"))

	var ce *idemddb.TxCanceledError
	switch {
	case errors.As(err, &ce):
		// Nothing was written and the key was released: the balance did
		// not cover the charge (or another of the function's conditions
		// failed). ce.ConditionFailed() says which, with the item's old
		// values.
		for _, f := range ce.ConditionFailed() {
			log.Printf("charge %s refused: %s on %s failed its condition; the account was %v", c.ID, f.Kind, f.Table, f.Old)
		}
	case err != nil:
		log.Fatal(err)
	default:
		log.Print(receipt)
	}
}
