package guard_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/store/memory"
)

// A batch of emails, one of them listed twice, sent once per message ID;
// sending the batch again replays every result from one bulk lookup.
func ExampleDoBatch() {
	type email struct {
		ID string `json:"id"`
		To string `json:"to"`
	}
	g, _ := guard.New(memory.New(), guard.WithKeyPath("id"))
	emails := []email{{"m-1", "ada@example.com"}, {"m-2", "bob@example.com"}, {"m-1", "ada@example.com"}}
	send := func(ctx context.Context, e email) (string, error) {
		fmt.Println("sending", e.ID, "to", e.To)
		return "queued " + e.ID, nil
	}

	for range 2 {
		results := guard.DoBatch(context.Background(), g, "send-email", emails, send, guard.WithConcurrency(1))
		for i, r := range results {
			if r.Err != nil {
				fmt.Println(emails[i].ID, "failed:", r.Err)
				continue
			}
			fmt.Printf("%s: %s (%v)\n", emails[i].ID, r.Value, r.Outcome)
		}
	}
	// Output:
	// sending m-1 to ada@example.com
	// sending m-2 to bob@example.com
	// m-1: queued m-1 (executed)
	// m-2: queued m-2 (executed)
	// m-1: queued m-1 (shared)
	// m-1: queued m-1 (replayed)
	// m-2: queued m-2 (replayed)
	// m-1: queued m-1 (replayed)
}

// A batch that stops at its first failure, and picks up where it stopped
// when run again with the progress the first run reported.
func ExampleWithResume() {
	g, _ := guard.New(memory.New())
	items := []int{1, 2, 3, 4, 5}
	failOn := 3
	double := func(ctx context.Context, n int) (int, error) {
		if n == failOn {
			return 0, errors.New("downstream unavailable")
		}
		fmt.Println("doubling", n)
		return 2 * n, nil
	}

	// The first run fails at item 3 and records how many leading items
	// are done, as a checkpoint would.
	done, next := 0, 0
	guard.DoBatch(context.Background(), g, "double", items, double,
		guard.WithConcurrency(1), guard.WithStopOnError(),
		adapt.WithItemDone(func(i int, _ guard.Outcome, err error) {
			if err == nil && i == next {
				done, next = i+1, i+1
			}
		}))
	fmt.Println("done:", done)

	failOn = 0
	for _, r := range guard.DoBatch(context.Background(), g, "double", items, double,
		guard.WithConcurrency(1), adapt.WithResume(done)) {
		fmt.Println(r.Value, r.Outcome)
	}
	// Output:
	// doubling 1
	// doubling 2
	// done: 2
	// doubling 3
	// doubling 4
	// doubling 5
	// 2 replayed
	// 4 replayed
	// 6 executed
	// 8 executed
	// 10 executed
}
