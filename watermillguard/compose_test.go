package watermillguard_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/guard/guardtest"
	"github.com/idemguard/idemguard/internal/testing/teststores"
	"github.com/idemguard/idemguard/watermillguard"
)

// The middleware joins the composition suite on every store: a call is a
// delivery of a message whose UUID is the key and whose payload is
// validated; the body's result is the payload of the message it produces.
// With the guard disabled, a handler that uses guard.Step handles every
// delivery.
func TestComposition(t *testing.T) {
	guardtest.RunComposition(t, guardtest.EntryPoint{
		Name: "watermillguard",
		Run: func(ctx context.Context, t *testing.T, g *guard.Guard, call guardtest.Call, effect guardtest.Effect, body guardtest.Body) (string, error) {
			mw := newMiddleware(t, g, watermillguard.WithGuardOptions(guard.WithPayloadValidation("@")))
			payload, _ := json.Marshal(call.Payload)
			out, err := through(ctx, mw, call.Key, payload, func(ctx context.Context, _ *message.Message) ([]*message.Message, error) {
				v, err := body(ctx, effect)
				if err != nil {
					return nil, err
				}
				return []*message.Message{message.NewMessage(call.Key+"-out", []byte(v))}, nil
			})
			if err != nil {
				return "", err
			}
			if len(out) != 1 {
				return "", errors.New("the handler produced no message")
			}
			return string(out[0].Payload), nil
		},
	}, teststores.All())
}
