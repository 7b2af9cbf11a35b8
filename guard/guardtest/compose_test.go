package guardtest_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/guard/guardtest"
	"github.com/idemguard/idemguard/internal/testing/teststores"
)

// payloadOptions validate the payload the composition suite's calls carry.
var payloadOptions = []guard.Option{guard.WithKeyPath("key"), guard.WithPayloadValidation("payload")}

// request is what the Do and DoBatch entry points key: the caller's key
// and the payload.
type request struct {
	Key     string `json:"key"`
	Payload string `json:"payload"`
}

// guard.Do joins the composition suite on every store.
func TestCompositionDo(t *testing.T) {
	guardtest.RunComposition(t, guardtest.EntryPoint{
		Name:         "guard.Do",
		GuardOptions: payloadOptions,
		Run: func(ctx context.Context, t *testing.T, g *guard.Guard, call guardtest.Call, effect guardtest.Effect, body guardtest.Body) (string, error) {
			return guard.Do(ctx, g, "compose", request{call.Key, call.Payload}, func(ctx context.Context) (string, error) {
				return body(ctx, effect)
			})
		},
	}, teststores.All())
}

// guard.DoBatch joins the composition suite on every store: the call is an
// item of a batch beside another item, of a key of its own (calls that run
// at once must not meet at it).
func TestCompositionDoBatch(t *testing.T) {
	var batches atomic.Int64
	guardtest.RunComposition(t, guardtest.EntryPoint{
		Name:         "guard.DoBatch",
		GuardOptions: payloadOptions,
		Run: func(ctx context.Context, t *testing.T, g *guard.Guard, call guardtest.Call, effect guardtest.Effect, body guardtest.Body) (string, error) {
			items := []request{{call.Key, call.Payload}, {fmt.Sprintf("%s-other-%d", call.Key, batches.Add(1)), "other"}}
			res := guard.DoBatch(ctx, g, "compose", items, func(ctx context.Context, in request) (string, error) {
				if in.Key != call.Key {
					return "other", nil
				}
				return body(ctx, effect)
			})
			if res[1].Err != nil {
				return "", fmt.Errorf("the other item: %w", res[1].Err)
			}
			return res[0].Value, res[0].Err
		},
	}, teststores.All())
}
