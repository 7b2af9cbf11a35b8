// Command linz is the long linearizability run of make chaos: for each
// store (memory, DynamoDB Local, redis-server, PostgreSQL) it records
// histories of concurrent clients on a few hot keys through the store's
// fault proxy and checks each with Porcupine against the store contract's
// model (store/storetest), on loopback servers (IDEMGUARD_DYNAMODB_ENDPOINT,
// IDEMGUARD_REDIS_ADDR, IDEMGUARD_POSTGRES_URL; scripts/harness.sh sets
// them):
//
//	IDEMGUARD_SERVICES="dynamodb redis postgres" scripts/harness.sh run go run ./chaos/cmd/linz
//	go run ./chaos/cmd/linz -store memory -rounds 20
//
// It prints a line per store and one JSON line, and exits 1 if a history
// was not shown linearizable; the report names the visualisation of each
// failing history and lists its minimal failing operations.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/idemguard/idemguard/chaos"
)

func main() {
	cfg := chaos.DefaultLinzConfig()
	stores := flag.String("store", strings.Join(cfg.Stores, ","), "stores to check, comma-separated: memory, dynamodb, redis, postgres")
	flag.IntVar(&cfg.Rounds, "rounds", cfg.Rounds, "histories per store, each on fresh keys")
	flag.IntVar(&cfg.History.Ops, "ops", cfg.History.Ops, "operations per history")
	flag.IntVar(&cfg.History.Clients, "clients", cfg.History.Clients, "concurrent clients")
	flag.IntVar(&cfg.History.Keys, "keys", cfg.History.Keys, "hot keys")
	flag.Float64Var(&cfg.FaultRate, "fault-rate", cfg.FaultRate, "share of store requests faulted")
	flag.Uint64Var(&cfg.Seed, "seed", 0, "seed of the clients and the faults (0: random)")
	flag.StringVar(&cfg.Dir, "dir", "", "where the visualisations of failing histories go (default: the temporary directory)")
	flag.Parse()
	cfg.Stores = strings.Split(*stores, ",")
	cfg.Log = os.Stderr

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := chaos.RunLinearizability(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "linz:", err)
		os.Exit(2)
	}
	rep.Print(os.Stdout)
	if !rep.OK() {
		os.Exit(1)
	}
}
