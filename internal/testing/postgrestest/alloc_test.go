package postgrestest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

func TestTracerAllocs(t *testing.T) {
	c := &Counter{}
	ctx := context.Background()
	tag := pgconn.NewCommandTag("UPDATE 1")
	var b pgx.Batch
	b.Queue("BEGIN")
	b.Queue("UPDATE t SET x = 1")
	b.Queue("COMMIT")
	if n := testing.AllocsPerRun(1000, func() {
		qctx := c.TraceQueryStart(ctx, nil, pgx.TraceQueryStartData{SQL: "update t set x = 1"})
		c.TraceQueryEnd(qctx, nil, pgx.TraceQueryEndData{CommandTag: tag})
	}); n != 0 {
		t.Errorf("a statement allocates %v", n)
	}
	if n := testing.AllocsPerRun(1000, func() {
		bctx := c.TraceBatchStart(ctx, nil, pgx.TraceBatchStartData{Batch: &b})
		for range 3 {
			c.TraceBatchQuery(bctx, nil, pgx.TraceBatchQueryData{CommandTag: tag})
		}
		c.TraceBatchEnd(bctx, nil, pgx.TraceBatchEndData{})
	}); n != 0 {
		t.Errorf("a batch allocates %v", n)
	}
}
