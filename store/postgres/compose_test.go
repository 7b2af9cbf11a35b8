package postgres_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/guard/guardtest"
	"github.com/idemguard/idemguard/internal/testing/postgrestest"
	"github.com/idemguard/idemguard/store"
)

// guard.DoTx joins the composition suite on PostgreSQL: the body's side
// effects are rows written through the call's transaction, so they commit
// with the call's completion (and its steps') or not at all.
func TestCompositionDoTx(t *testing.T) {
	pool := postgrestest.NewPool(t)
	effects := postgrestest.TableName(t)
	if _, err := pool.Exec(t.Context(), `CREATE TABLE "`+effects+`" (key text NOT NULL, name text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), `DROP TABLE IF EXISTS "`+effects+`"`) })
	guardtest.RunComposition(t, guardtest.EntryPoint{
		Name:         "guard.DoTx",
		GuardOptions: []guard.Option{guard.WithKeyPath("key"), guard.WithPayloadValidation("payload")},
		Run: func(ctx context.Context, t *testing.T, g *guard.Guard, call guardtest.Call, _ guardtest.Effect, body guardtest.Body) (string, error) {
			in := map[string]string{"key": call.Key, "payload": call.Payload}
			return guard.DoTx(ctx, g, "compose", in, func(ctx context.Context, tx pgx.Tx) (string, error) {
				return body(ctx, func(ctx context.Context, name string) error {
					if err := context.Cause(ctx); err != nil {
						return err
					}
					_, err := tx.Exec(ctx, `INSERT INTO "`+effects+`" (key, name) VALUES ($1, $2)`, call.Key, name)
					return err
				})
			})
		},
		Count: func(t *testing.T, key, name string) int {
			var n int
			if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM "`+effects+`" WHERE key = $1 AND name = $2`, key, name).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		},
	}, guardtest.Stores{"postgres": func(t *testing.T) store.Store { return postgrestest.NewStore(t, pool) }})
}
