// Command chaos runs idemguard's chaos suite against a Temporal dev server
// and DynamoDB Local, or PostgreSQL with -store postgres, or redis-server
// with -store redis, on loopback addresses (IDEMGUARD_TEMPORAL_ADDRESS,
// IDEMGUARD_DYNAMODB_ENDPOINT, IDEMGUARD_POSTGRES_URL, IDEMGUARD_REDIS_ADDR;
// scripts/harness.sh sets them):
//
//	scripts/harness.sh run go run ./chaos/cmd/chaos                  # the full run (make chaos)
//	scripts/harness.sh run go run ./chaos/cmd/chaos -store postgres  # the transactional scenario
//	scripts/harness.sh run go run ./chaos/cmd/chaos -store redis     # Redis through the TCP fault proxy
//	scripts/harness.sh run go run ./chaos/cmd/chaos -store dynamodb-tx  # transactional bodies on DynamoDB
//	scripts/harness.sh run go run ./chaos/cmd/chaos -short           # the short run of make test
//	scripts/harness.sh run go run ./chaos/cmd/chaos -control         # no kills, pauses or faults: nothing may run twice
//
// It prints the figures as lines and as one JSON line, and exits 1 if a
// check failed. The same executable, started by the driver with
// IDEMGUARD_CHAOS_WORKER set, is a worker process.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/idemguard/idemguard/chaos"
)

func main() {
	chaos.RunWorkerIfChild()

	short := flag.Bool("short", false, "the short run of make test (50 workflows, frequent kills)")
	control := flag.Bool("control", false, "a control run: no kills, pauses or store faults; no body may run twice and no lease may be lost")
	storeFlag := flag.String("store", chaos.StoreDynamoDB, "the idempotency store: dynamodb (keyed and plain bodies, through the fault proxy), postgres (transactional bodies, guard.DoTx; needs IDEMGUARD_POSTGRES_URL), redis (keyed and plain bodies, through the TCP fault proxy; needs IDEMGUARD_REDIS_ADDR) or dynamodb-tx (transactional bodies, guard.DoTx, through the fault proxy)")
	def := chaos.DefaultConfig()
	workflows := flag.Int("workflows", 0, fmt.Sprintf("workflows (default %d; short %d)", def.Workflows, chaos.ShortConfig().Workflows))
	ops := flag.Int("ops", def.OpsPerWorkflow, "guarded operations per workflow (of every ten: 3 keyed, 3 plain, 2 explicitly keyed, 2 stepped; transactional stores: 6, 2, 2), plus a conflicting twin of the first explicitly keyed")
	twins := flag.Int("twin-every", def.TwinEvery, "give every n-th workflow a twin with the same keys (0: none)")
	inflight := flag.Int("inflight", 0, "workflows running at once (default: per mode)")
	workers := flag.Int("workers", def.Workers, "worker processes (at least 2)")
	conc := flag.Int("concurrency", 0, "activities per worker at once (default: per mode)")
	rate := flag.Float64("fault-rate", def.Faults.Rate, "probability that a store request gets a fault")
	killMin := flag.Duration("kill-min", 0, "shortest pause between kills (default: per mode)")
	killMax := flag.Duration("kill-max", 0, "longest pause between kills (default: per mode)")
	pauseRatio := flag.Float64("pause-ratio", def.PauseRatio, "share of chaos moments that pause a worker past its lease instead of killing it")
	minPauses := flag.Int("min-pauses", -1, "pauses the run makes at least, after the first kills (default: per mode)")
	pauseMin := flag.Duration("pause-min", def.PauseMin, "shortest pause")
	pauseMax := flag.Duration("pause-max", def.PauseMax, "longest pause")
	longWork := flag.Duration("long-work", def.LongWork, "how long a long body works before its side effect (longer than the 2 s lease; 0: no long bodies)")
	seed := flag.Uint64("seed", 0, "seed for faults and kills (0: random)")
	workDir := flag.String("workdir", "", "keep worker logs and done files here (default: a temporary directory, removed on success)")
	keep := flag.Bool("keep-tables", false, "keep the tables after the run")
	flag.Parse()

	cfg := def
	if *short {
		cfg = chaos.ShortConfig()
	}
	switch *storeFlag {
	case chaos.StorePostgres:
		cfg = cfg.Postgres()
	case chaos.StoreRedis:
		cfg = cfg.Redis()
	case chaos.StoreDynamoDBTx:
		cfg = cfg.DynamoDBTx()
	case chaos.StoreDynamoDB:
	default:
		fmt.Fprintf(os.Stderr, "chaos: unknown -store %q (dynamodb, dynamodb-tx, postgres or redis)\n", *storeFlag)
		os.Exit(2)
	}
	setInt := func(dst *int, v int) {
		if v > 0 {
			*dst = v
		}
	}
	setInt(&cfg.Workflows, *workflows)
	setInt(&cfg.InFlight, *inflight)
	setInt(&cfg.WorkerConcurrency, *conc)
	cfg.OpsPerWorkflow, cfg.TwinEvery, cfg.Workers = *ops, *twins, *workers
	cfg.Faults.Rate = *rate
	cfg.PauseRatio = *pauseRatio
	cfg.PauseMin, cfg.PauseMax, cfg.LongWork = *pauseMin, *pauseMax, *longWork
	if *minPauses >= 0 {
		cfg.MinPauses = *minPauses
	}
	if *killMin > 0 {
		cfg.KillMin = *killMin
	}
	if *killMax > 0 {
		cfg.KillMax = *killMax
	}
	cfg.Seed, cfg.WorkDir, cfg.KeepTables = *seed, *workDir, *keep
	if *control {
		cfg = cfg.ControlRun()
	}
	cfg.Log = os.Stderr

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := chaos.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(2)
	}
	rep.Print(os.Stdout)
	if !rep.OK() {
		os.Exit(1)
	}
}
