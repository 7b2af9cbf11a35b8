// Command ledger moves money between accounts in PostgreSQL exactly once,
// with worker processes that are SIGKILLed and frozen while they work.
//
// Transfers arrive on an at-least-once queue (a table; some are enqueued
// twice, and a delivery that is not acknowledged comes back). Worker
// processes take deliveries and apply each transfer with the transactional
// guard, guard.DoTx: the debit, the credit, the two ledger entries and
// the idempotency record's completion commit in one transaction. The
// driver kills workers (SIGKILL) just after a transfer's writes and before
// its commit, and once freezes one (SIGSTOP) there for longer than its
// lease, so that another worker takes the transfer over and the frozen one
// wakes as a zombie. At the end it checks the ledger's invariant: the
// total is what it was (no money created or lost), and every transfer has
// exactly its two entries (applied once).
//
//	IDEMGUARD_POSTGRES_URL=postgres://… go run ./examples/ledger
//	scripts/harness.sh run go run ./examples/ledger     # a throwaway server
//
// Without IDEMGUARD_POSTGRES_URL it says how to run it and exits with
// status 2, starting nothing. It creates its tables under a fresh prefix
// and drops them at the end.
package main

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// URLEnv names the database; scripts/harness.sh sets it.
const URLEnv = "IDEMGUARD_POSTGRES_URL"

// workerEnv holds a worker process's configuration; its presence makes
// the process a worker.
const workerEnv = "LEDGER_WORKER"

// Config is one run.
type Config struct {
	URL       string
	Accounts  int   // accounts, each opening with Opening cents
	Opening   int64 //
	Transfers int   // distinct transfers; every fourth is enqueued twice
	Workers   int   // worker processes
	Kills     int   // SIGKILLs, each after a transfer's writes and before its commit
	Pauses    int   // SIGSTOPs inside a transfer's transaction, until another worker took it over
	// Lease is the guard's lease, Skew its clock-skew tolerance, and
	// Visibility how long a taken delivery stays hidden before it comes
	// back.
	Lease, Skew, Visibility time.Duration
	// Command starts a worker process: this program, by default.
	Command []string
}

// DefaultConfig is what `go run ./examples/ledger` runs.
func DefaultConfig() Config {
	return Config{
		URL:      os.Getenv(URLEnv),
		Accounts: 12, Opening: 100_000, Transfers: 400, Workers: 3, Kills: 6, Pauses: 1,
		Lease: time.Second, Skew: 250 * time.Millisecond, Visibility: 1500 * time.Millisecond,
	}
}

func main() {
	if raw := os.Getenv(workerEnv); raw != "" {
		os.Exit(workerMain(raw))
	}
	cfg := DefaultConfig()
	flag.IntVar(&cfg.Transfers, "transfers", cfg.Transfers, "distinct transfers (every fourth is delivered twice)")
	flag.IntVar(&cfg.Accounts, "accounts", cfg.Accounts, "accounts (at least 2)")
	flag.IntVar(&cfg.Workers, "workers", cfg.Workers, "worker processes (at least 2)")
	flag.IntVar(&cfg.Kills, "kills", cfg.Kills, "SIGKILLs after a transfer's writes and before its commit")
	flag.IntVar(&cfg.Pauses, "pauses", cfg.Pauses, "workers frozen mid-transfer until the transfer is taken over (0 or 1)")
	flag.Parse()
	if cfg.Accounts < 2 || cfg.Workers < 2 || cfg.Transfers < 1 || cfg.Kills < 0 || cfg.Pauses < 0 || cfg.Pauses > 1 {
		fmt.Fprintln(os.Stderr, "ledger: need at least 2 accounts, 2 workers and 1 transfer, kills ≥ 0 and pauses 0 or 1")
		os.Exit(2)
	}
	if cfg.URL == "" {
		fmt.Fprintf(os.Stderr, `ledger: no database: set %s to a PostgreSQL URL where this example may create tables, e.g.
	%s='postgres://app@127.0.0.1:5432/app?sslmode=disable' go run ./examples/ledger
or let the repository's harness start a throwaway server:
	scripts/harness.sh run go run ./examples/ledger
`, URLEnv, URLEnv)
		os.Exit(2)
	}
	ok, err := Run(context.Background(), os.Stdout, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ledger:", err)
		os.Exit(1)
	}
	if !ok {
		os.Exit(1)
	}
}

// tables are the run's table names.
type tables struct {
	Accounts, Entries, Queue, Idem string
}

func newTables() tables {
	var b [4]byte
	for i := range b {
		b[i] = byte(rand.Uint32())
	}
	p := "ledger_" + hex.EncodeToString(b[:])
	return tables{Accounts: p + "_accounts", Entries: p + "_entries", Queue: p + "_queue", Idem: p + "_idempotency"}
}

// Transfer moves Cents from one account to another. Its ID is the key.
type Transfer struct {
	ID    string `json:"id"`
	From  int    `json:"from"`
	To    int    `json:"to"`
	Cents int64  `json:"cents"`
}

// Run runs the example and writes its report to out; ok is false when the
// invariant does not hold.
func Run(ctx context.Context, out io.Writer, cfg Config) (ok bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, cfg.URL)
	if err != nil {
		return false, err
	}
	defer pool.Close()
	t := newTables()
	if err := setUp(ctx, pool, t, cfg); err != nil {
		return false, err
	}
	defer func() {
		dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer dcancel()
		_, _ = pool.Exec(dctx, fmt.Sprintf("DROP TABLE IF EXISTS %s, %s, %s, %s",
			ident(t.Accounts), ident(t.Entries), ident(t.Queue), ident(t.Idem)))
	}()

	// The transfers, and the queue: every fourth delivered twice, shuffled.
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 42))
	var deliveries []Transfer
	for i := range cfg.Transfers {
		from := rng.IntN(cfg.Accounts)
		to := (from + 1 + rng.IntN(cfg.Accounts-1)) % cfg.Accounts
		tr := Transfer{ID: fmt.Sprintf("tr-%04d", i), From: from, To: to, Cents: 1 + rng.Int64N(5_000)}
		deliveries = append(deliveries, tr)
		if i%4 == 0 {
			deliveries = append(deliveries, tr)
		}
	}
	rng.Shuffle(len(deliveries), func(i, j int) { deliveries[i], deliveries[j] = deliveries[j], deliveries[i] })
	rows := make([][]any, len(deliveries))
	for i, d := range deliveries {
		b, _ := json.Marshal(d)
		rows[i] = []any{string(b)}
	}
	if _, err := pool.CopyFrom(ctx, pgx.Identifier{t.Queue}, []string{"transfer"}, pgx.CopyFromRows(rows)); err != nil {
		return false, err
	}
	fmt.Fprintf(out, "ledger: %d accounts of %s, %d transfers, %d deliveries (%d delivered twice), %d worker processes\n",
		cfg.Accounts, cents(cfg.Opening), cfg.Transfers, len(deliveries), len(deliveries)-cfg.Transfers, cfg.Workers)

	d := &driver{cfg: cfg, t: t, out: out, pool: pool}
	if err := d.run(ctx); err != nil {
		return false, err
	}
	return verify(ctx, pool, out, t, cfg, d)
}

func setUp(ctx context.Context, pool *pgxpool.Pool, t tables, cfg Config) error {
	sql := fmt.Sprintf(`CREATE TABLE %s (id int PRIMARY KEY, balance bigint NOT NULL);
CREATE TABLE %s (transfer text NOT NULL, account int NOT NULL, cents bigint NOT NULL, pid int NOT NULL);
CREATE TABLE %s (seq bigserial PRIMARY KEY, transfer jsonb NOT NULL, visible_at timestamptz NOT NULL DEFAULT now());
INSERT INTO %[1]s SELECT g, %[4]d FROM generate_series(0, %[5]d) AS g;`,
		ident(t.Accounts), ident(t.Entries), ident(t.Queue), cfg.Opening, cfg.Accounts-1)
	if _, err := pool.Exec(ctx, sql); err != nil {
		return fmt.Errorf("creating the tables: %w", err)
	}
	return createIdempotencyTable(ctx, pool, t.Idem)
}

func ident(name string) string { return pgx.Identifier{name}.Sanitize() }

func cents(c int64) string { return fmt.Sprintf("%d.%02d", c/100, c%100) }

// chaosEvent is a kill or a pause the driver made while worker pid was
// inside a transfer's transaction, at the point named by at.
type chaosEvent struct {
	kind     string // "kill" or "pause"
	pid      int
	transfer string
}

// announcement is a worker's line "<point> <transfer>": it has reached
// point inside the transfer's transaction and waits for the driver's
// "go" on its stdin.
type announcement struct {
	point, transfer string
	pid             int
	stdin           io.Writer
}

// driver runs the worker processes and the chaos.
type driver struct {
	cfg  Config
	t    tables
	out  io.Writer
	pool *pgxpool.Pool

	events []chaosEvent
}

// run starts the workers, kills and pauses them inside transactions,
// restarts the killed ones, and returns when every worker has exited by
// itself (the queue is empty).
//
// A worker stops twice inside each transfer's transaction and waits for a
// word from the driver: at "entries", its two ledger entries written, and
// at "balances", the debit and credit written too, just before the guard
// writes the completion and commits. Every few transfers the driver arms;
// the next worker to stop at "balances" is SIGKILLed there. Once, after the
// first kill, a worker stopped at "entries" is frozen instead (SIGSTOP)
// until another worker has taken the transfer over and committed it —
// which it can only do once the frozen worker's lease and the clock skew
// have run out — and then let go on as a zombie.
func (d *driver) run(ctx context.Context) error {
	argv := d.cfg.Command
	if len(argv) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		argv = []string{exe}
	}
	wc, _ := json.Marshal(workerConfig{URL: d.cfg.URL, Tables: d.t, Lease: d.cfg.Lease, Skew: d.cfg.Skew,
		Visibility: d.cfg.Visibility})
	type exit struct {
		slot int
		pid  int
		err  error
	}
	exits := make(chan exit)
	stops := make(chan announcement)
	procs := make([]*exec.Cmd, d.cfg.Workers)
	start := func(slot int) error {
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Env = append(os.Environ(), workerEnv+"="+string(wc))
		cmd.Stderr = os.Stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return err
		}
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return err
		}
		if err := cmd.Start(); err != nil {
			return err
		}
		procs[slot] = cmd
		pid := cmd.Process.Pid
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				if point, tr, ok := strings.Cut(sc.Text(), " "); ok {
					stops <- announcement{point: point, transfer: tr, pid: pid, stdin: stdin}
				}
			}
			exits <- exit{slot, pid, cmd.Wait()}
		}()
		return nil
	}
	for i := range d.cfg.Workers {
		if err := start(i); err != nil {
			return err
		}
	}
	kills, pauses := d.cfg.Kills, d.cfg.Pauses
	killed := map[int]bool{}
	// Arm every gap-th transfer, so the chaos spreads over the run.
	gap := max(1, d.cfg.Transfers/(d.cfg.Kills+d.cfg.Pauses+2))
	seen, armed := 0, false
	resumed := make(chan struct{}, 1)
	running := d.cfg.Workers
	for running > 0 {
		select {
		case <-ctx.Done():
			for _, p := range procs {
				_ = p.Process.Kill()
			}
			return ctx.Err()
		case <-resumed:
		case a := <-stops:
			if a.point == "balances" {
				if seen++; seen%gap == 0 {
					armed = kills > 0 || pauses > 0
				}
			}
			switch {
			case armed && a.point == "balances" && kills > 0:
				armed = false
				kills--
				killed[a.pid] = true
				d.events = append(d.events, chaosEvent{kind: "kill", pid: a.pid, transfer: a.transfer})
				_ = syscall.Kill(a.pid, syscall.SIGKILL)
			case armed && a.point == "entries" && pauses > 0 && (kills < d.cfg.Kills || d.cfg.Kills == 0):
				armed = false
				pauses--
				d.events = append(d.events, chaosEvent{kind: "pause", pid: a.pid, transfer: a.transfer})
				_ = syscall.Kill(a.pid, syscall.SIGSTOP)
				go func() {
					d.awaitTakeover(ctx, a.transfer, a.pid)
					_ = syscall.Kill(a.pid, syscall.SIGCONT)
					fmt.Fprintln(a.stdin, "go")
					resumed <- struct{}{}
				}()
			default:
				fmt.Fprintln(a.stdin, "go")
			}
		case e := <-exits:
			switch {
			case killed[e.pid]:
				if err := start(e.slot); err != nil {
					return err
				}
			case e.err != nil:
				return fmt.Errorf("worker pid %d failed: %w", e.pid, e.err)
			default:
				running--
			}
		}
	}
	return nil
}

// awaitTakeover waits until a worker other than pid has committed
// transfer, for at most a minute.
func (d *driver) awaitTakeover(ctx context.Context, transfer string, pid int) {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		var n int
		err := d.pool.QueryRow(ctx, fmt.Sprintf("SELECT count(*) FROM %s WHERE transfer = $1 AND pid <> $2", ident(d.t.Entries)), transfer, pid).Scan(&n)
		if err == nil && n > 0 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// verify checks the invariant and reports it.
func verify(ctx context.Context, pool *pgxpool.Pool, out io.Writer, t tables, cfg Config, d *driver) (bool, error) {
	var total, entrySum int64
	var drifted int
	err := pool.QueryRow(ctx, fmt.Sprintf(`SELECT
    (SELECT sum(balance) FROM %[1]s),
    (SELECT coalesce(sum(cents), 0) FROM %[2]s),
    (SELECT count(*) FROM %[1]s a WHERE a.balance <> %[3]d + (SELECT coalesce(sum(cents), 0) FROM %[2]s e WHERE e.account = a.id))`,
		ident(t.Accounts), ident(t.Entries), cfg.Opening)).Scan(&total, &entrySum, &drifted)
	if err != nil {
		return false, err
	}
	// Per transfer: its entries, which must be one debit and one credit.
	var applied, once, twice, broken int
	rows, err := pool.Query(ctx, fmt.Sprintf(`SELECT transfer, count(*), sum(cents), min(cents) FROM %s GROUP BY transfer`, ident(t.Entries)))
	if err != nil {
		return false, err
	}
	for rows.Next() {
		var id string
		var n, sum, low int64
		if err := rows.Scan(&id, &n, &sum, &low); err != nil {
			return false, err
		}
		applied++
		switch {
		case n == 2 && sum == 0 && low < 0:
			once++
		case n > 2:
			twice++
		default:
			broken++
		}
	}
	if err := rows.Err(); err != nil {
		return false, err
	}
	var left int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+ident(t.Queue)).Scan(&left); err != nil {
		return false, err
	}
	// Each kill and pause stopped a transaction before its commit: none
	// of those may have committed (a paused one was taken over).
	var killed, paused, committed int
	for _, ev := range d.events {
		if ev.kind == "" {
			continue
		}
		if ev.kind == "kill" {
			killed++
		} else {
			paused++
		}
		var n int
		if err := pool.QueryRow(ctx, fmt.Sprintf("SELECT count(*) FROM %s WHERE transfer = $1 AND pid = $2", ident(t.Entries)), ev.transfer, ev.pid).Scan(&n); err != nil {
			return false, err
		}
		if n > 0 {
			committed++
		}
	}
	want := int64(cfg.Accounts) * cfg.Opening
	fmt.Fprintf(out, "chaos: %d workers SIGKILLed after a transfer's writes and before its commit, %d frozen mid-transfer until another worker took the transfer over; %d of those transactions committed\n",
		killed, paused, committed)
	fmt.Fprintf(out, "ledger: total %s before, %s after; %d of %d transfers applied, %d once, %d more than once, %d malformed; %d accounts off their entries; %d deliveries left\n",
		cents(want), cents(total), applied, cfg.Transfers, once, twice, broken, drifted, left)
	ok := total == want && entrySum == 0 && once == cfg.Transfers && applied == cfg.Transfers && twice == 0 && broken == 0 &&
		drifted == 0 && left == 0 && committed == 0
	if killed < cfg.Kills || paused < cfg.Pauses {
		fmt.Fprintln(out, "chaos: fewer kills or pauses than asked for: the queue ran out first (give it more transfers)")
	}
	if ok {
		fmt.Fprintln(out, "invariant holds: no money created or lost, each transfer applied exactly once")
	} else {
		fmt.Fprintln(out, "invariant BROKEN")
	}
	return ok, nil
}
