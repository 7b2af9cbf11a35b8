// Command consumer is the program that make release-check builds in a
// module of its own outside the repository, against the released modules
// fetched as a user fetches them (docs/releasing.md): a guarded call on the
// memory store runs once and its duplicate replays. It imports
// store/dynamodb, watermillguard and lambdaguard as well, so that the build proves the
// README's install lines fetch them. Its go.mod is the workspace's only:
// make release-check copies main.go alone into a new module. Inside the
// repository it builds against the working tree, so an API change that
// breaks it fails make vet.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/lambdaguard"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/dynamodb"
	"github.com/idemguard/idemguard/store/memory"
	"github.com/idemguard/idemguard/watermillguard"
)

// The released packages beyond the guard, linked in by name.
var (
	_ = dynamodb.New
	_ = watermillguard.Middleware
	_ = lambdaguard.Wrap
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "consumer:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx := context.Background()
	g, err := guard.New(memory.New())
	if err != nil {
		return err
	}
	charges := 0
	charge := func(context.Context) (string, error) {
		charges++
		return fmt.Sprintf("receipt-%d", charges), nil
	}
	order := map[string]any{"order_id": "o-1", "cents": 4200}
	var out guard.Outcome
	hook := guard.WithOutcomeHook(func(_ context.Context, _ string, _ *store.Record, o guard.Outcome) { out = o })
	first, err := guard.Do(ctx, g, "charge", order, charge, guard.WithKeyPath("order_id"), hook)
	if err != nil {
		return err
	}
	o1 := out
	second, err := guard.Do(ctx, g, "charge", order, charge, guard.WithKeyPath("order_id"), hook)
	if err != nil {
		return err
	}
	o2 := out
	if o1 != guard.OutcomeExecuted || o2 != guard.OutcomeReplayed || second != first || charges != 1 {
		return fmt.Errorf("the duplicate did not replay: %s %q then %s %q, %d charges", o1, first, o2, second, charges)
	}
	fmt.Printf("consumer: first call %s %q, duplicate %s %q; the function ran %d time\n", o1, first, o2, second, charges)
	return nil
}
