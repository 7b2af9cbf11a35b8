package postgres_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/postgres"
	"github.com/idemguard/idemguard/store/postgres/postgrestest"
	"github.com/idemguard/idemguard/store/storetest"
)

func TestConformance(t *testing.T) {
	pool := postgrestest.NewPool(t, func(c *pgxpool.Config) { c.MaxConns = 40 })
	t.Run("default", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) store.Store {
			return postgrestest.NewStore(t, pool)
		}, storetest.WithTooLarge(postgres.DefaultMaxResultSize+1))
	})
	// A schema-qualified name whose parts need quoting: upper case, a
	// space, a quote and a dot in the table's part.
	t.Run("schema-qualified", func(t *testing.T) {
		ctx := context.Background()
		if _, err := pool.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS "Idem Guard"`); err != nil {
			t.Fatal(err)
		}
		storetest.Run(t, func(t *testing.T) store.Store {
			table := postgrestest.NewTable(t, pool, `Idem Guard.Records "v1".`+postgrestest.TableName(t)[3:])
			s, err := postgres.New(pool, postgres.WithTable(table), postgres.WithMaxResultSize(300<<10))
			if err != nil {
				t.Fatal(err)
			}
			return s
		}, storetest.WithTooLarge(300<<10+1))
	})
}
