// Command load measures what a guard costs against DynamoDB, next to the raw
// SDK doing the same requests, against PostgreSQL, next to raw pgx sending
// the same statements and to a hand-written pgx client, and against Redis,
// next to raw go-redis sending the same scripts and to a hand-written
// go-redis client, in one process and one run.
//
//	IDEMGUARD_SERVICES="dynamodb postgres redis" scripts/harness.sh run go run ./bench/load
//	go run ./bench/load -endpoint http://127.0.0.1:8000 -ops 4000 -concurrency 32
//	go run ./bench/load -postgres postgres://app@127.0.0.1:5432/app -scenarios pg_tx_raw,pg_tx_guarded
//	go run ./bench/load -endpoint '' -redis 127.0.0.1:6379
//
// It creates a fresh table on the endpoint (DynamoDB Local or another
// server that accepts the static credentials "local"/"local"), runs a
// warm-up pass, then runs every scenario in several rounds, round-robin and
// in a rotated order each round, so that noise on a shared machine hits all
// scenarios alike. It prints one JSON line per scenario on standard output
// and a check of the targets of issue 7 on standard error; it exits with
// status 1 if a request-count target (the deterministic ones) is missed, or,
// with -strict, any target.
//
// Scenarios (see docs/benchmarks.md):
//
//	miss_raw              conditional PutItem + UpdateItem, built by hand, as the store sends them
//	miss_guarded          a guarded call with a fresh key: claim, run, complete
//	replay_raw            the conditional PutItem, failing, returning the old item (ALL_OLD)
//	replay_guarded        a guarded call whose key is completed: one failed claim, replay
//	replay_cached_guarded the same with guard.WithCache: no request
//	hotkey_wait           -hot-calls concurrent calls with one key, guard.WithWait
//	hotkey_reject         the same with guard.WithWait(0)
//	tx_raw                TransactWriteItems of one business Put, under a ClientRequestToken
//	tx_protocol_raw       the claim's PutItem, then TransactWriteItems of the Put and the completion, built by hand
//	tx_guarded            the same Put through guard.WrapTx: the claim, then TransactWriteItems of the Put and the completion
//	tx_replay_guarded     a guard.WrapTx call whose key is completed: one failed claim, no transaction
//	tx_replay_cached_guarded the same with guard.WithCache: no request
//
// With a PostgreSQL URL (-postgres, default $IDEMGUARD_POSTGRES_URL), in
// the same rounds, on one pgx pool whose tracer counts round trips:
//
//	pg_miss_hand             hand-written: the key from encoding/json and SHA-256, one claim-or-read statement, a fenced UPDATE
//	pg_miss_raw              the claim's statement and the completion's UPDATE, as store/postgres sends them
//	pg_miss_store            the same through store/postgres's Acquire and Complete, records built by hand, no guard
//	pg_miss_guarded          a guarded call with a fresh key
//	pg_replay_hand           hand-written: the key, the claim-or-read statement returning the stored result
//	pg_replay_raw            the claim's statement on a completed key, the result decoded from its row
//	pg_replay_store          the same through store/postgres's Acquire, no guard
//	pg_replay_guarded        a guarded call whose key is completed
//	pg_replay_cached_guarded the same with guard.WithCache
//	pg_tx_raw                a plain transaction at READ COMMITTED: BEGIN, the business INSERT, COMMIT
//	pg_tx_guarded            the same INSERT through postgres.WrapTx: claim, BEGIN, INSERT, completion, COMMIT
//
// With a Redis address (-redis, default $IDEMGUARD_REDIS_ADDR), in the same
// rounds, on one go-redis client whose hook counts round trips:
//
//	redis_miss_hand             hand-written: the key from encoding/json and SHA-256, SET NX GET PX, the function, SET PX
//	redis_miss_raw              EVALSHA of the store's claim script, the function, EVALSHA of its completion script
//	redis_miss_store            the same through store/redis's Acquire and Complete, records built by hand, no guard
//	redis_miss_guarded          a guarded call with a fresh key
//	redis_replay_hand           hand-written: the key, SET NX GET PX returning the stored result
//	redis_replay_raw            the claim script on a completed key, the result decoded from the record it returns
//	redis_replay_store          the same through store/redis's Acquire, no guard
//	redis_replay_guarded        a guarded call whose key is completed
//	redis_replay_cached_guarded the same with guard.WithCache
//	redis_http_hand_first       an HTTP request through a hand-written SET NX GET idempotency handler, fresh key
//	redis_http_guarded_first    the same through httpguard's middleware on store/redis
//	redis_http_hand_replay      the hand-written handler, a completed key: the stored response
//	redis_http_guarded_replay   httpguard's middleware, a completed key
//
// PostgreSQL's and Redis's guarded scenarios are compared with the
// hand-written ones, and so are the raw and store scenarios.
//
// Every DynamoDB scenario uses the same SDK client (one HTTP client, one
// retryer, one request-counting middleware); every PostgreSQL scenario the
// same pool; every Redis scenario the same client.
//
// Flags: -concurrency (16), -ops (2000 per scenario), -rounds (20),
// -warmup (300 per scenario), -hot-calls (2000), -scenarios, -v (figures of
// every round on standard error), -cpuprofile (samples labelled
// scenario=<name>: go tool pprof -tagfocus scenario=miss_guarded; against a
// server, HTTP connection goroutines keep the label of the scenario that
// dialled them, so compare labels with -stub), and
// -stub, which answers the requests in process instead of sending them, so
// that the client's CPU time can be measured without the server's noise.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/idemguard/idemguard/internal/testing/dynamodbtest"
	"github.com/idemguard/idemguard/internal/testing/postgrestest"
	"github.com/idemguard/idemguard/internal/testing/redistest"
)

func main() {
	cfg := DefaultConfig()
	flag.StringVar(&cfg.Endpoint, "endpoint", os.Getenv(dynamodbtest.EndpointEnv), "DynamoDB endpoint URL (default $"+dynamodbtest.EndpointEnv+")")
	flag.StringVar(&cfg.PostgresURL, "postgres", os.Getenv(postgrestest.URLEnv), "PostgreSQL URL for the pg_ scenarios (default $"+postgrestest.URLEnv+"; empty: none)")
	flag.StringVar(&cfg.StoreIndex, "store-index", "", "replace the store's (expires_at, key) index, to measure it: expires_at, brin or none (default: as postgres.CreateTable makes it)")
	flag.BoolVar(&cfg.HandIndex, "hand-index", false, "give the hand-written PostgreSQL baseline's table the store's index on (expires_at, key), which its expired rows' deletion would need")
	flag.StringVar(&cfg.RedisAddr, "redis", os.Getenv(redistest.AddrEnv), "Redis host:port for the redis_ scenarios (default $"+redistest.AddrEnv+"; empty: none)")
	flag.IntVar(&cfg.Concurrency, "concurrency", cfg.Concurrency, "concurrent callers in the miss and replay scenarios")
	flag.IntVar(&cfg.Ops, "ops", cfg.Ops, "operations per miss and replay scenario, over all rounds")
	flag.IntVar(&cfg.Rounds, "rounds", cfg.Rounds, "rounds the operations are split into, scenarios interleaved")
	flag.IntVar(&cfg.Warmup, "warmup", cfg.Warmup, "operations per scenario in the warm-up pass (not reported)")
	flag.IntVar(&cfg.ReplayKeys, "replay-keys", cfg.ReplayKeys, "distinct completed keys the replay scenarios cycle through")
	flag.IntVar(&cfg.HotCalls, "hot-calls", cfg.HotCalls, "concurrent calls with one key in each hot-key burst (one burst per round)")
	flag.DurationVar(&cfg.HotHold, "hot-hold", cfg.HotHold, "how long the hot-key function runs once every caller has started (wait mode)")
	flag.BoolVar(&cfg.Verbose, "v", false, "write each scenario's figures in each round to standard error")
	stub := flag.Bool("stub", false, "answer the requests in process instead of sending them, to measure the client's CPU time alone (no server, no network)")
	scenarios := flag.String("scenarios", "", "comma-separated scenarios to run (default all)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the measured rounds to `file` (samples labelled scenario=<name>)")
	timeout := flag.Duration("timeout", 15*time.Minute, "give up after this long")
	strict := flag.Bool("strict", false, "exit with status 1 when a throughput or CPU target is missed too")
	flag.Parse()
	if *scenarios != "" {
		cfg.Scenarios = strings.Split(*scenarios, ",")
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fatal(err)
		}
		defer f.Close()
		cfg.Profile = f
	}
	if *stub {
		cfg.Endpoint = "http://127.0.0.1:9" // never dialled
		cfg.httpClient = newStubDynamo()
		cfg.PostgresURL = "" // no stub for PostgreSQL
		cfg.RedisAddr = ""   // nor for Redis
	}
	if cfg.Endpoint == "" && cfg.PostgresURL == "" && cfg.RedisAddr == "" {
		fatal(fmt.Errorf("no server: set -endpoint or %s, -postgres or %s, or -redis or %s, or run under scripts/harness.sh",
			dynamodbtest.EndpointEnv, postgrestest.URLEnv, redistest.AddrEnv))
	}

	// Cancelled, not given a deadline: a deadline on the callers' context
	// would change the guard's lease (it follows the context deadline).
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	stop := time.AfterFunc(*timeout, cancel)
	defer stop.Stop()

	results, err := Run(ctx, cfg, os.Stdout, os.Stderr)
	if err != nil {
		fatal(err)
	}
	hard, soft := Check(results, os.Stderr)
	if hard > 0 || (*strict && soft > 0) {
		os.Exit(1)
	}
}

func fatal(err error) {
	pprof.StopCPUProfile()
	fmt.Fprintln(os.Stderr, "load:", err)
	os.Exit(2)
}
