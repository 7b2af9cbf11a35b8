package postgres_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/postgres"
)

// A guard on PostgreSQL: create the table once (or run the statements of
// postgres.DDL in a migration), then guard calls with the store.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app@127.0.0.1:5432/app?sslmode=disable")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if err := postgres.CreateTable(ctx, pool, postgres.DefaultTable); err != nil {
		log.Fatal(err)
	}
	s, err := postgres.New(pool)
	if err != nil {
		log.Fatal(err)
	}
	g, err := guard.New(s)
	if err != nil {
		log.Fatal(err)
	}
	chargeID, err := guard.Do(ctx, g, "charge", map[string]any{"order": 1042, "amount": 4200},
		func(ctx context.Context) (string, error) {
			return "ch_1", nil // the side effect, run once per order
		})
	fmt.Println(chargeID, err)
}

// Purge deletes expired rows; run it on a schedule (a ticker in one
// worker, a cron job, or pg_cron with the equivalent DELETE).
func ExampleStore_Purge() {
	var s *postgres.Store // from postgres.New
	ctx := context.Background()
	for range time.Tick(time.Hour) {
		n, err := s.Purge(ctx, time.Now())
		if err != nil {
			log.Printf("purging idempotency records: %v (%d deleted)", err, n)
		}
	}
}

// The transaction of a completion: the function's writes and the
// completion commit together. guard.DoTx drives these steps; this is what
// it does with the store.
func ExampleTx() {
	var s *postgres.Store   // from postgres.New
	var claim *store.Record // the claim the guard acquired
	var result []byte       // the function's encoded result
	ctx := context.Background()

	tx, err := s.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback(ctx) // harmless after Commit
	pgxTx := tx.Handle()
	if _, err := pgxTx.Exec(ctx, `UPDATE accounts SET balance = balance - 4200 WHERE id = 7`); err != nil {
		log.Fatal(err)
	}
	done := *claim
	done.Status, done.Result = store.StatusCompleted, result
	if err := tx.Complete(ctx, &done); err != nil {
		log.Fatal(err) // store.ErrTokenMismatch: the claim was lost; the deferred Rollback undoes the debit
	}
	if err := tx.Commit(ctx); err != nil {
		log.Fatal(err)
	}
}
