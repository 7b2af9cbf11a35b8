package postgres_test

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemguard/idemguard/internal/testing/postgrestest"
	"github.com/idemguard/idemguard/store/postgres"
)

func TestNewValidatesOptions(t *testing.T) {
	// A pool that never connects: New checks options, not the server.
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	for _, c := range []struct {
		name string
		opts []postgres.Option
	}{
		{"empty table", []postgres.Option{postgres.WithTable("")}},
		{"empty schema", []postgres.Option{postgres.WithTable(".t")}},
		{"empty table part", []postgres.Option{postgres.WithTable("s.")}},
		{"NUL", []postgres.Option{postgres.WithTable("a\x00b")}},
		{"zero result size", []postgres.Option{postgres.WithMaxResultSize(0)}},
		{"zero purge batch", []postgres.Option{postgres.WithPurgeBatchSize(0)}},
		{"purge batch over the maximum", []postgres.Option{postgres.WithPurgeBatchSize(postgres.MaxPurgeBatch + 1)}},
	} {
		if s, err := postgres.New(pool, c.opts...); err == nil {
			t.Errorf("%s: New = %v, nil; want an error", c.name, s)
		}
	}
	if _, err := postgres.DDL(""); err == nil {
		t.Errorf("DDL of an empty name succeeded")
	}
	if _, err := postgres.New(nil); err == nil {
		t.Errorf("New(nil pool) succeeded")
	}
	s, err := postgres.New(pool, postgres.WithTable("s.t.u"), postgres.WithMaxResultSize(1), postgres.WithPurgeBatchSize(postgres.MaxPurgeBatch))
	if err != nil {
		t.Fatalf("valid options: %v", err)
	}
	if s.Name() != "postgres" {
		t.Errorf("Name() = %q", s.Name())
	}
}

func TestDDL(t *testing.T) {
	ddl, err := postgres.DDL(`app.Idem "keys"`)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`CREATE TABLE IF NOT EXISTS "app"."Idem ""keys"""`,
		`CREATE INDEX IF NOT EXISTS "Idem ""keys""_expires_at_key_idx" ON "app"."Idem ""keys""" (expires_at, key)`,
		"key              text        PRIMARY KEY",
	} {
		if !strings.Contains(ddl, want) {
			t.Errorf("DDL lacks %q:\n%s", want, ddl)
		}
	}
	// docs/postgres.md shows the default table's statements as they are.
	doc, err := os.ReadFile("../../docs/postgres.md")
	if err != nil {
		t.Fatal(err)
	}
	if def, _ := postgres.DDL(postgres.DefaultTable); !strings.Contains(string(doc), "```sql\n"+def+"```") {
		t.Errorf("docs/postgres.md does not show DDL(%q) as it is:\n%s", postgres.DefaultTable, def)
	}
	// A name too long for "<name>_expires_at_key_idx": the index gets a
	// shortened, hashed name that is still its own.
	long := strings.Repeat("x", 60)
	ddl, _ = postgres.DDL(long)
	i := strings.Index(ddl, "CREATE INDEX IF NOT EXISTS ")
	name := strings.Fields(ddl[i:])[5]
	if n := len(strings.Trim(name, `"`)); n > 63 || strings.Trim(name, `"`) == long {
		t.Errorf("index name %s (%d bytes) for a 60-byte table name", name, n)
	}
}

// CreateTable is idempotent and safe to run from many processes at once,
// and the table it makes has its index, even under a long name.
func TestCreateTable(t *testing.T) {
	pool := postgrestest.NewPool(t)
	ctx := context.Background()
	for _, name := range []string{postgrestest.TableName(t), postgrestest.TableName(t) + strings.Repeat("_long", 6)} {
		var wg sync.WaitGroup
		errs := make([]error, 4)
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = postgres.CreateTable(ctx, pool, name)
			}()
		}
		wg.Wait()
		t.Cleanup(func() { pool.Exec(context.Background(), `DROP TABLE IF EXISTS "`+name+`"`) })
		for i, err := range errs {
			if err != nil {
				t.Errorf("concurrent CreateTable %d of %q: %v", i, name, err)
			}
		}
		if err := postgres.CreateTable(ctx, pool, name); err != nil {
			t.Errorf("CreateTable of an existing %q: %v", name, err)
		}
		var indexes int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_indexes WHERE tablename = $1`, name).Scan(&indexes); err != nil {
			t.Fatal(err)
		}
		if indexes != 2 {
			t.Errorf("%q has %d indexes, want 2 (the primary key and (expires_at, key))", name, indexes)
		}
	}
}
