// Command api is an API Gateway (REST API, proxy integration) Lambda
// function that creates each order once per Idempotency-Key:
// lambdaguard.WrapAPIGateway runs every request through httpguard, so a
// client that retries a POST with its key gets the stored response
// (Idempotency-Key-Status: replayed), a key reused with another body gets
// 422, and a request without a key gets 400.
//
// Build it for the provided.al2023 runtime:
//
//	GOOS=linux GOARCH=arm64 CGO_ENABLED=0 go build -tags lambda.norpc -o bootstrap ./examples/lambda/api
package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/idemguard/idemguard/examples/lambda/internal/fnenv"
	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/lambdaguard"
)

// Order is a request's body.
type Order struct {
	OrderID string `json:"order_id"`
	Amount  int    `json:"amount"`
}

func main() {
	env := fnenv.New()
	create := func(ctx context.Context, r events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error) {
		var o Order
		if err := json.Unmarshal([]byte(r.Body), &o); err != nil || o.OrderID == "" {
			return events.APIGatewayProxyResponse{StatusCode: 400, Body: `{"error":"a JSON order with an order_id"}`}, nil
		}
		key, _ := guard.KeyFromContext(ctx) // the same on every retry: hand it downstream
		if err := env.Ship(ctx, o.OrderID); err != nil {
			return events.APIGatewayProxyResponse{}, err // 502, and the key is released
		}
		body, _ := json.Marshal(map[string]any{"order_id": o.OrderID, "amount": o.Amount, "ref": key[len(key)-12:]})
		return events.APIGatewayProxyResponse{
			StatusCode: 201,
			Headers:    map[string]string{"Content-Type": "application/json", "Location": fmt.Sprintf("/orders/%s", o.OrderID)},
			Body:       string(body),
		}, nil
	}
	lambda.Start(lambdaguard.Must(lambdaguard.WrapAPIGateway(env.Guard, create)))
}
