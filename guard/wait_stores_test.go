package guard_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/internal/testing/dynamodbtest"
	"github.com/idemguard/idemguard/internal/testing/postgrestest"
	"github.com/idemguard/idemguard/internal/testing/redistest"
	"github.com/idemguard/idemguard/store"
	idemddb "github.com/idemguard/idemguard/store/dynamodb"
	"github.com/idemguard/idemguard/store/memory"
	"github.com/idemguard/idemguard/store/postgres"
	idemredis "github.com/idemguard/idemguard/store/redis"
)

// Waiting and looking up on every store, with the holder and the waiters
// in two processes' clients of one store (two clients, two store values).
// The servers come from scripts/harness.sh; without them the subtests
// skip, or fail when CI=true.

// twoClients returns, per store, a function making two clients of one
// fresh table, prefix or in-process store.
func twoClients() []struct {
	name string
	make func(t *testing.T) (a, b store.Store)
} {
	return []struct {
		name string
		make func(t *testing.T) (a, b store.Store)
	}{
		{"memory", func(t *testing.T) (store.Store, store.Store) {
			m := memory.New()
			return m, &watchStore{Store: m}
		}},
		{"redis", func(t *testing.T) (store.Store, store.Store) {
			a := redistest.NewStore(t, redistest.NewClient(t))
			b, err := idemredis.New(redistest.NewClient(t), idemredis.WithPrefix(a.Prefix()))
			if err != nil {
				t.Fatal(err)
			}
			return a, b
		}},
		{"postgres", func(t *testing.T) (store.Store, store.Store) {
			pa, pb := postgrestest.NewPool(t), postgrestest.NewPool(t)
			table := postgrestest.NewTable(t, pa, "")
			a, err := postgres.New(pa, postgres.WithTable(table))
			if err != nil {
				t.Fatal(err)
			}
			b, err := postgres.New(pb, postgres.WithTable(table))
			if err != nil {
				t.Fatal(err)
			}
			return a, b
		}},
		{"dynamodb", func(t *testing.T) (store.Store, store.Store) {
			client := dynamodbtest.NewClient(t)
			table := dynamodbtest.NewTable(t, client)
			a, err := idemddb.New(client, table)
			if err != nil {
				t.Fatal(err)
			}
			b, err := idemddb.New(dynamodbtest.NewClient(t), table)
			if err != nil {
				t.Fatal(err)
			}
			return a, b
		}},
	}
}

// TestWaitStores: duplicates in another process than the holder's return
// its result once it completes, and the function ran once, on every
// store: pushed on Redis, PostgreSQL and memory, polled with reads on
// DynamoDB.
func TestWaitStores(t *testing.T) {
	for _, tc := range twoClients() {
		t.Run(tc.name, func(t *testing.T) {
			a, b := tc.make(t)
			holder := mustGuard(t, a)
			cl, _, err := adapt.Obtain(ctx, holder, "pay", "w-1")
			if err != nil || cl == nil {
				t.Fatalf("claim: %v, %v", cl, err)
			}
			const n = 10
			ch := make(chan waited, n)
			for range n {
				g := mustGuard(t, b)
				go func() {
					v, out, err := adapt.Execute(ctx, g, "pay", "w-1", func(context.Context) (int, error) { return 8, nil }, guard.WithWait(time.Minute))
					ch <- waited{v, out, err}
				}()
			}
			waitFor(t, "every duplicate waiting", func() bool { return guard.WaitingOn(cl.Key) == n })
			b7, _ := json.Marshal(7)
			if _, err := adapt.Complete(ctx, holder, *cl, store.ResultValue, b7); err != nil {
				t.Fatal(err)
			}
			for range n {
				got := result(t, "duplicate", ch)
				if got.err != nil || got.v != 7 || got.out != guard.OutcomeReplayed {
					t.Fatalf("duplicate: %d, %v, %v; want the holder's 7, replayed", got.v, got.out, got.err)
				}
			}
		})
	}
}

// TestLookupStores: a look-up reports none, in progress (with the lease
// end) and completed (the value or the definite error decoded as a replay
// would), claims nothing, and refuses another payload, on every store.
func TestLookupStores(t *testing.T) {
	errDeclined := errors.New("card declined")
	for _, tc := range twoClients() {
		t.Run(tc.name, func(t *testing.T) {
			a, b := tc.make(t)
			g, look := mustGuard(t, a), mustGuard(t, b)
			definite := guard.WithDefiniteErrors(func(err error) bool { return errors.Is(err, errDeclined) })
			type order struct {
				ID     string `json:"id"`
				Amount int    `json:"amount"`
			}
			o := order{"l-1", 5}
			keyed := []guard.CallOption{guard.WithKeyPath("id"), guard.WithPayloadValidation("@")}

			v, rec, err := guard.Lookup[int](ctx, look, "pay", o, keyed...)
			if err != nil || rec != nil || v != 0 {
				t.Fatalf("before any call: %v, %+v, %v; want none", v, rec, err)
			}
			cl, _, err := adapt.Obtain(ctx, g, "pay", o, keyed...)
			if err != nil || cl == nil {
				t.Fatalf("claim: %v, %v", cl, err)
			}
			v, rec, err = guard.Lookup[int](ctx, look, "pay", o, keyed...)
			// (Stores keep times to the millisecond.)
			if err != nil || rec == nil || rec.Status != store.StatusInProgress || rec.LeaseExpiresAt.Sub(cl.LeaseExpiresAt).Abs() > time.Millisecond {
				t.Fatalf("while held: %v, %+v, %v; want in progress until %v", v, rec, err, cl.LeaseExpiresAt)
			}
			// The look-up claimed nothing: the holder completes.
			if _, err := adapt.Finish(ctx, g, *cl, 42, nil, keyed...); err != nil {
				t.Fatalf("finish after a look-up: %v", err)
			}
			v, rec, err = guard.Lookup[int](ctx, look, "pay", o, keyed...)
			if err != nil || rec == nil || rec.Status != store.StatusCompleted || v != 42 || rec.ExpiresAt.IsZero() {
				t.Fatalf("completed: %v, %+v, %v; want 42", v, rec, err)
			}
			if _, rec, err := guard.Lookup[int](ctx, look, "pay", order{"l-1", 6}, keyed...); !errors.Is(err, guard.ErrPayloadMismatch) || rec != nil {
				t.Errorf("another payload under the key: %+v, %v, want ErrPayloadMismatch", rec, err)
			}

			// A definite error, looked up as a replay returns it.
			if _, err := guard.Do(ctx, g, "pay", "l-2", func(context.Context) (int, error) { return 0, errDeclined }, definite); !errors.Is(err, errDeclined) {
				t.Fatalf("call: %v", err)
			}
			_, rec, err = guard.Lookup[int](ctx, look, "pay", "l-2")
			_, replayed := guard.Do(ctx, look, "pay", "l-2", func(context.Context) (int, error) { return 1, nil })
			if rec == nil || rec.Status != store.StatusCompleted || err == nil || !guard.IsDefinite(err) || replayed == nil || err.Error() != replayed.Error() {
				t.Fatalf("definite error: %+v, %v; want completed with the error a replay returns (%v)", rec, err, replayed)
			}
		})
	}
}
