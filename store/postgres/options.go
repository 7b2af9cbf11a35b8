package postgres

import (
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

const (
	// defaultTable is the table a [Store] uses unless [WithTable] names
	// another.
	defaultTable = "idempotency"
	// defaultMaxResultSize is the largest Result, in bytes, that Complete
	// stores unless [WithMaxResultSize] says otherwise.
	defaultMaxResultSize = 1 << 20
	// maxPurgeBatch is the most rows one statement of [Store.Purge]
	// deletes, and the default batch size.
	maxPurgeBatch = 10_000
	// defaultListLimit is the page size of [Store.List] when the query
	// gives none; maxListLimit caps the size a query may ask for.
	defaultListLimit = 100
	// maxListLimit is the largest page [Store.List] returns.
	maxListLimit = 1_000
)

// Option configures a [Store].
type Option func(*config)

type config struct {
	table      string
	maxResult  int
	purgeBatch int
	watchPool  *pgxpool.Pool // WithWatchPool
	errs       []error
}

// WithTable sets the table the store keeps its records in, "name" or
// "schema.name". Each part is taken literally and quoted: "Idem" is a
// different table from "idem", and any character is allowed. The table
// must have the columns [CreateTable] makes. Default "idempotency".
func WithTable(name string) Option {
	return func(c *config) { c.table = name }
}

// WithMaxResultSize sets the largest Result, in bytes, that Complete
// stores; a larger one is refused with an error matching
// [store.ErrTooLarge] before anything is sent, and the guard then records
// the call without its result. n must be positive; default 1 MiB.
// PostgreSQL itself takes
// up to 1 GB in a bytea, but every replay carries the whole result over the
// network: keep results small and the limit near them.
func WithMaxResultSize(n int) Option {
	return func(c *config) {
		if n <= 0 {
			c.errs = append(c.errs, fmt.Errorf("WithMaxResultSize(%d): the limit must be positive", n))
			return
		}
		c.maxResult = n
	}
}

// WithPurgeBatchSize sets how many rows one statement of [Store.Purge]
// deletes at most, from 1 to 10,000 (the default). Smaller
// batches hold fewer row locks for a shorter time.
func WithPurgeBatchSize(n int) Option {
	return func(c *config) {
		if n <= 0 || n > maxPurgeBatch {
			c.errs = append(c.errs, fmt.Errorf("WithPurgeBatchSize(%d): want 1 to %d", n, maxPurgeBatch))
			return
		}
		c.purgeBatch = n
	}
}

func newConfig(opts []Option) (*config, error) {
	c := &config{table: defaultTable, maxResult: defaultMaxResultSize, purgeBatch: maxPurgeBatch}
	for _, o := range opts {
		o(c)
	}
	if _, err := parseTable(c.table); err != nil {
		c.errs = append(c.errs, err)
	}
	if err := errors.Join(c.errs...); err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	return c, nil
}

// parseTable splits "name" or "schema.name" into an identifier. The
// schema is what comes before the first dot, so a table name may hold dots
// only when its schema is given.
func parseTable(name string) (pgx.Identifier, error) {
	if name == "" {
		return nil, errors.New("empty table name")
	}
	if strings.ContainsRune(name, 0) {
		return nil, fmt.Errorf("table name %q holds a NUL byte", name)
	}
	id := pgx.Identifier{name}
	if schema, table, ok := strings.Cut(name, "."); ok {
		id = pgx.Identifier{schema, table}
	}
	for _, part := range id {
		if part == "" {
			return nil, fmt.Errorf("table name %q has an empty part", name)
		}
	}
	return id, nil
}
