package lambdaguard_test

import (
	"context"
	"fmt"

	"github.com/aws/aws-lambda-go/events"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/lambdaguard"
	"github.com/idemguard/idemguard/store/memory"
)

// A handler guarded by the order ID in its event: the duplicate replays
// the first answer, and the order is charged once.
func ExampleWrap() {
	g, _ := guard.New(memory.New()) // a DynamoDB store in a real function
	charges := 0
	h, err := lambdaguard.Wrap(g, func(ctx context.Context, o order) (receipt, error) {
		charges++
		return receipt{Charge: "ch_" + o.OrderID}, nil
	}, lambdaguard.WithScope("orders"), lambdaguard.WithGuardOptions(guard.WithKeyPath("order_id")))
	if err != nil {
		panic(err)
	}
	for range 2 {
		out, err := h.Invoke(context.Background(), []byte(`{"order_id":"42","amount":1200}`))
		fmt.Println(string(out), err)
	}
	fmt.Println("charges:", charges) // lambda.Start(h) in a real function
	// Output:
	// {"charge":"ch_42"} <nil>
	// {"charge":"ch_42"} <nil>
	// charges: 1
}

// An SQS batch: the message whose handler fails is reported for
// redelivery, the others are done.
func ExampleWrapSQS() {
	g, _ := guard.New(memory.New())
	h, err := lambdaguard.WrapSQS(g, func(ctx context.Context, m events.SQSMessage) error {
		if m.Body == "broken" {
			return fmt.Errorf("cannot ship %s", m.MessageId)
		}
		return nil
	}, lambdaguard.WithScope("orders"))
	if err != nil {
		panic(err)
	}
	resp, _ := h(context.Background(), events.SQSEvent{Records: []events.SQSMessage{
		{MessageId: "m1", Body: "ok"}, {MessageId: "m2", Body: "broken"}, {MessageId: "m3", Body: "ok"},
	}})
	fmt.Println(resp.BatchItemFailures)
	// Output:
	// [{m2}]
}
