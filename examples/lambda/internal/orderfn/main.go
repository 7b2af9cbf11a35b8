// Command orderfn is the function the emulator tests run for
// lambdaguard.Wrap: it charges an order in a step (the side effect, counted
// in the shipments table), then waits sleep_ms, so that a test can time an
// invocation out after its side effect, or run a second invocation while
// the first still runs.
package main

import (
	"context"
	"time"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/idemguard/idemguard/examples/lambda/internal/fnenv"
	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/lambdaguard"
)

// Event is the function's event.
type Event struct {
	OrderID string `json:"order_id"`
	SleepMS int    `json:"sleep_ms"`
}

// Receipt is its answer.
type Receipt struct {
	OrderID string `json:"order_id"`
	Charge  string `json:"charge"`
}

func main() {
	env := fnenv.New()
	lambda.Start(lambdaguard.Must(lambdaguard.Wrap(env.Guard, func(ctx context.Context, e Event) (Receipt, error) {
		charge, err := guard.Step(ctx, "charge", func(ctx context.Context) (string, error) {
			return "ch_" + e.OrderID, env.Ship(ctx, e.OrderID)
		})
		if err != nil {
			return Receipt{}, err
		}
		// Past the deadline the runtime stops the process, as Lambda does:
		// the sleep does not watch ctx, so that the invocation dies holding
		// its claim.
		time.Sleep(time.Duration(e.SleepMS) * time.Millisecond)
		return Receipt{OrderID: e.OrderID, Charge: charge}, nil
	}, lambdaguard.WithGuardOptions(guard.WithKeyPath("order_id")))))
}
