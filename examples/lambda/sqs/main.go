// Command sqs is an SQS-triggered Lambda function that ships each order
// once, however often SQS delivers its message: lambdaguard.WrapSQS guards
// every message, keyed by the order ID in its body, and answers with the
// messages to redeliver (the event source mapping reports batch item
// failures).
//
// Build it for the provided.al2023 runtime:
//
//	GOOS=linux GOARCH=arm64 CGO_ENABLED=0 go build -tags lambda.norpc -o bootstrap ./examples/lambda/sqs
package main

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/idemguard/idemguard/examples/lambda/internal/fnenv"
	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/lambdaguard"
)

// Order is a message's body.
type Order struct {
	OrderID   string `json:"order_id"`
	Warehouse string `json:"warehouse"`
}

var errWarehouseClosed = errors.New("the warehouse is closed")

func main() {
	env := fnenv.New()
	ship := func(ctx context.Context, m events.SQSMessage) error {
		var o Order
		if err := json.Unmarshal([]byte(m.Body), &o); err != nil {
			return err
		}
		if o.Warehouse == "closed" {
			return errWarehouseClosed // reported: SQS redelivers the message later
		}
		_, err := guard.Step(ctx, "ship", func(ctx context.Context) (struct{}, error) {
			return struct{}{}, env.Ship(ctx, o.OrderID)
		})
		return err
	}
	lambda.Start(lambdaguard.Must(lambdaguard.WrapSQS(env.Guard, ship,
		lambdaguard.WithGuardOptions(
			guard.WithKeyPath("powertools_json(body).order_id"), // the same order sent twice ships once
			guard.WithPayloadValidation("body")))))
}
