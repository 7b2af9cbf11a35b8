package lambdaguard_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/testing/teststores"
	"github.com/idemguard/idemguard/lambdaguard"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/memory"
)

func benchHandler(_ context.Context, o order) (receipt, error) {
	return receipt{Charge: "ch_" + o.OrderID}, nil
}

// BenchmarkInvoke is a warm invocation of a small handler through
// aws-lambda-go's handler (decode, call, encode), unguarded, and guarded
// on its first call (a new order: claim, run, complete) and on a replay,
// on the memory store and on DynamoDB Local (docs/benchmarks.md).
func BenchmarkInvoke(b *testing.B) {
	stores := map[string]func(b *testing.B) store.Store{
		"memory":   func(*testing.B) store.Store { return memory.New() },
		"dynamodb": func(b *testing.B) store.Store { s, _ := teststores.DynamoDB(b); return s },
	}
	for _, name := range []string{"memory", "dynamodb"} {
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			events := make([][]byte, 0, 1<<10)
			event := func(i int) []byte { return []byte(`{"order_id":"` + strconv.Itoa(i) + `","amount":1200}`) }
			for i := range cap(events) {
				events = append(events, event(i))
			}
			b.Run("unguarded", func(b *testing.B) {
				h := lambda.NewHandler(benchHandler)
				for i := 0; b.Loop(); i++ {
					if _, err := h.Invoke(ctx, events[i%len(events)]); err != nil {
						b.Fatal(err)
					}
				}
			})
			g, err := guard.New(stores[name](b))
			if err != nil {
				b.Fatal(err)
			}
			h := lambdaguard.Must(lambdaguard.Wrap(g, benchHandler, lambdaguard.WithScope(fmt.Sprintf("bench-%p", g)),
				lambdaguard.WithGuardOptions(guard.WithKeyPath("order_id"))))
			// Warm the store (DynamoDB Local's first requests are slow).
			for i := range 200 {
				if _, err := h.Invoke(ctx, event(1<<30+i)); err != nil {
					b.Fatal(err)
				}
			}
			b.Run("first", func(b *testing.B) {
				for i := 0; b.Loop(); i++ {
					if _, err := h.Invoke(ctx, event(1<<20+i)); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("replay", func(b *testing.B) {
				if _, err := h.Invoke(ctx, events[0]); err != nil {
					b.Fatal(err)
				}
				for b.Loop() {
					if _, err := h.Invoke(ctx, events[0]); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

// BenchmarkConstruction is what the guard adds to a cold start: guard.New
// over a store and the wrapper's construction, with a key path never
// compiled before in the process (expressions are cached by source).
func BenchmarkConstruction(b *testing.B) {
	s := memory.New()
	for i := 0; b.Loop(); i++ {
		g, err := guard.New(s)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := lambdaguard.Wrap(g, benchHandler, lambdaguard.WithScope("fn"),
			lambdaguard.WithGuardOptions(guard.WithKeyPath("order_id_"+strconv.Itoa(i)))); err != nil {
			b.Fatal(err)
		}
	}
}
