package linz_test

import (
	"context"
	"fmt"

	"github.com/idemguard/idemguard/internal/testing/linz"
	"github.com/idemguard/idemguard/store/memory"
)

// Record a history of concurrent clients on a store and check it against
// the store contract's model. A store behind a network takes a fault proxy
// instead of Faults, and its Precision (DynamoDB and Redis keep expiry in
// seconds).
func ExampleRecordHistory() {
	h, err := linz.RecordHistory(context.Background(), memory.New(), linz.HistoryConfig{
		Clients: 4, Keys: 2, Ops: 500, Faults: 0.1, Seed: 1,
	})
	if err != nil {
		panic(err)
	}
	res := h.Check(linz.Precision{}, linz.CheckOptions{})
	fmt.Println("linearizable:", res.Linearizable)
	if !res.Linearizable {
		fmt.Println(res.Report()) // names the visualisation, lists the minimal failing operations
	}
	// Output: linearizable: true
}
