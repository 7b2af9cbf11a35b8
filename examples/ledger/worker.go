package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/store/postgres"
)

// workerConfig is what the driver hands a worker process.
type workerConfig struct {
	URL        string        `json:"url"`
	Tables     tables        `json:"tables"`
	Lease      time.Duration `json:"lease"`
	Skew       time.Duration `json:"skew"`
	Visibility time.Duration `json:"visibility"`
}

func createIdempotencyTable(ctx context.Context, pool *pgxpool.Pool, name string) error {
	return postgres.CreateTable(ctx, pool, name)
}

// workerMain is a worker process: it takes deliveries from the queue and
// applies each transfer with the transactional guard until the queue is
// empty.
func workerMain(raw string) int {
	var cfg workerConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "ledger worker: bad configuration:", err)
		return 2
	}
	if err := work(context.Background(), cfg); err != nil {
		fmt.Fprintf(os.Stderr, "ledger worker %d: %v\n", os.Getpid(), err)
		return 1
	}
	return 0
}

func work(ctx context.Context, cfg workerConfig) error {
	pool, err := pgxpool.New(ctx, cfg.URL)
	if err != nil {
		return err
	}
	defer pool.Close()
	s, err := postgres.New(pool, postgres.WithTable(cfg.Tables.Idem))
	if err != nil {
		return err
	}
	// The guard's clock-skew tolerance: a claim is taken over once its
	// lease has lapsed by this much on the claimant's clock.
	g, err := guard.New(s, guard.WithClockSkew(cfg.Skew))
	if err != nil {
		return err
	}
	w := &worker{cfg: cfg, pool: pool, pid: os.Getpid(), driver: bufio.NewReader(os.Stdin)}
	// The transfer, guarded: keyed by its ID, run in a transaction that
	// also completes the key's record. The key is required: a transfer
	// without an ID fails with guard.ErrKeyMissing, never runs unguarded.
	transfer, err := guard.WrapTx(g, "transfer", w.apply, guard.WithKeyPath("id"), guard.WithLease(cfg.Lease))
	if err != nil {
		return err
	}
	for {
		seq, tr, err := w.receive(ctx)
		if errors.Is(err, errQueueEmpty) {
			return nil
		}
		if err != nil {
			return err
		}
		if seq == 0 {
			time.Sleep(50 * time.Millisecond) // the rest are in flight elsewhere
			continue
		}
		if _, err := transfer(ctx, tr); err != nil {
			// Not acknowledged: the delivery comes back after its
			// visibility timeout. ErrInProgress (a duplicate delivery
			// while the first runs) and ErrLeaseLost (this worker was
			// frozen and its transfer taken over) end up here.
			fmt.Fprintf(os.Stderr, "ledger worker %d: %s: %v\n", w.pid, tr.ID, err)
			continue
		}
		if _, err := pool.Exec(ctx, "DELETE FROM "+ident(cfg.Tables.Queue)+" WHERE seq = $1", seq); err != nil {
			return err
		}
	}
}

type worker struct {
	cfg    workerConfig
	pool   *pgxpool.Pool
	pid    int
	driver *bufio.Reader // the driver's "go" lines
}

var errQueueEmpty = errors.New("queue empty")

// receive takes the next visible delivery and hides it for the visibility
// timeout; seq is 0 when every delivery left is hidden.
func (w *worker) receive(ctx context.Context) (seq int64, tr Transfer, err error) {
	q := ident(w.cfg.Tables.Queue)
	err = w.pool.QueryRow(ctx, `UPDATE `+q+` SET visible_at = now() + $1::interval
WHERE seq = (SELECT seq FROM `+q+` WHERE visible_at <= now() ORDER BY seq LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING seq, transfer`, w.cfg.Visibility).Scan(&seq, &tr)
	if errors.Is(err, pgx.ErrNoRows) {
		var left int
		if err := w.pool.QueryRow(ctx, "SELECT count(*) FROM "+q).Scan(&left); err != nil {
			return 0, tr, err
		}
		if left == 0 {
			return 0, tr, errQueueEmpty
		}
		return 0, tr, nil
	}
	return seq, tr, err
}

// apply is the guarded function: the transfer's writes, in the guard's
// transaction. It stops twice for the driver (see driver.run).
func (w *worker) apply(ctx context.Context, tx pgx.Tx, tr Transfer) (string, error) {
	e := ident(w.cfg.Tables.Entries)
	if _, err := tx.Exec(ctx, `INSERT INTO `+e+` (transfer, account, cents, pid) VALUES ($1, $2, $3, $5), ($1, $4, -$3, $5)`,
		tr.ID, tr.To, tr.Cents, tr.From, w.pid); err != nil {
		return "", err
	}
	w.stop("entries", tr.ID)
	// Lock the two accounts in id order, so that transfers never deadlock.
	a := ident(w.cfg.Tables.Accounts)
	first, second := tr.From, tr.To
	if second < first {
		first, second = second, first
	}
	for _, id := range []int{first, second} {
		delta := tr.Cents
		if id == tr.From {
			delta = -tr.Cents
		}
		if _, err := tx.Exec(ctx, `UPDATE `+a+` SET balance = balance + $2 WHERE id = $1`, id, delta); err != nil {
			return "", err
		}
	}
	w.stop("balances", tr.ID)
	return fmt.Sprintf("%s applied by pid %d", tr.ID, w.pid), nil
}

// stop tells the driver where this worker is and waits for its word; the
// driver may kill or freeze the process instead.
func (w *worker) stop(point, transfer string) {
	fmt.Printf("%s %s\n", point, transfer)
	if _, err := w.driver.ReadString('\n'); err != nil {
		fmt.Fprintln(os.Stderr, "ledger worker: the driver is gone")
		os.Exit(3)
	}
}
