package postgres_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemguard/idemguard/internal/testing/postgrestest"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/postgres"
	"github.com/idemguard/idemguard/store/storetest"
)

func TestConformance(t *testing.T) {
	pool := postgrestest.NewPool(t, func(c *pgxpool.Config) { c.MaxConns = 40 })
	t.Run("default", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) store.Store {
			return postgrestest.NewStore(t, pool)
		}, storetest.WithTooLarge(postgres.DefaultMaxResultSize+1), storetest.WithWatchProbe(watchProbe(pool)), storetest.WithNewerFormat(postgres.MarkFormat))
	})
	// A server whose sessions default to SERIALIZABLE: Acquire pins READ
	// COMMITTED, so the claim races hold there too (at SERIALIZABLE a
	// loser's upsert would fail with a serialization error instead of
	// returning the winner's record).
	t.Run("serializable-default", func(t *testing.T) {
		serial := postgrestest.NewPool(t, func(c *pgxpool.Config) {
			c.MaxConns = 40
			c.ConnConfig.RuntimeParams["default_transaction_isolation"] = "serializable"
		})
		storetest.Run(t, func(t *testing.T) store.Store {
			return postgrestest.NewStore(t, serial)
		})
	})
	// A pool whose connections use the simple protocol, where every column
	// comes back as text: the claim's row is scanned through pgx rather
	// than read byte by byte.
	t.Run("simple-protocol", func(t *testing.T) {
		simple := postgrestest.NewPool(t, func(c *pgxpool.Config) {
			c.MaxConns = 40
			c.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
		})
		storetest.Run(t, func(t *testing.T) store.Store {
			return postgrestest.NewStore(t, simple)
		}, storetest.WithNewerFormat(postgres.MarkFormat))
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
		}, storetest.WithTooLarge(300<<10+1), storetest.WithWatchProbe(watchProbe(pool)), storetest.WithNewerFormat(postgres.MarkFormat))
	})
}
