// Command wait measures how soon duplicates waiting for a running call
// learn of its completion, and how many store calls they make meanwhile,
// with the waiters in other guard instances as other processes would be
// (issue 38).
//
//	IDEMGUARD_SERVICES="dynamodb redis postgres" scripts/harness.sh run go run ./bench/wait
//	go run ./bench/wait -stores redis -durations 2s -waiters 10 -runs 1
//	go run ./bench/wait -compare before=/tmp/wait-before,after=/tmp/wait-after
//
// For each store, first-call duration and number of waiters, a holder in
// this process claims a fresh key through its own guard and store client
// and runs a function that sleeps for the duration; once it holds the key,
// the waiters call the same key with guard.WithWait(-budget) from child
// processes of this binary (-procs of them, or fewer when there are fewer
// waiters; each child a store client of its own, each waiter a guard.New
// of its own on it, so that no two waiters share a call in process), and
// return its result as a replay. Reported per configuration and run:
//
//	p50_ms, p99_ms, max_ms  how long after the holder's function returned
//	                        its result (just before the guard's completion
//	                        is sent) each waiter returned, wall clock
//	calls_per_waiter        the store round trips the children made while
//	                        their waiters waited, over the waiters (each
//	                        child counts its client's: internal/reqcount)
//	runs                    how many times the function ran: 1
//
// The memory store cannot span processes: its waiters are goroutines of
// this process, each with a guard.New of its own on the one store.
//
// With -compare, each configuration runs once with each binary named
// (built from two trees, each with this directory), alternating, and the
// summary puts them side by side: before and after in one run.
//
// Flags: -stores (memory and every store whose server is given:
// -postgres, -redis, -endpoint, by default from the harness's
// environment), -durations (200ms,2s,10s), -waiters (1,10,100), -procs
// (4), -runs (3, the summary gives the median of the runs), -budget (1m),
// -json (every run's figures, one JSON object a line, on standard output).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"time"

	"github.com/idemguard/idemguard/internal/testing/dynamodbtest"
	"github.com/idemguard/idemguard/internal/testing/postgrestest"
	"github.com/idemguard/idemguard/internal/testing/redistest"
)

func main() {
	var cfg config
	flag.StringVar(&cfg.postgresURL, "postgres", os.Getenv(postgrestest.URLEnv), "PostgreSQL URL (default $"+postgrestest.URLEnv+")")
	flag.StringVar(&cfg.redisAddr, "redis", os.Getenv(redistest.AddrEnv), "Redis host:port (default $"+redistest.AddrEnv+")")
	flag.StringVar(&cfg.endpoint, "endpoint", os.Getenv(dynamodbtest.EndpointEnv), "DynamoDB endpoint (default $"+dynamodbtest.EndpointEnv+")")
	stores := flag.String("stores", "", "comma-separated stores: memory, redis, postgres, dynamodb (default memory and every store whose server is given)")
	durations := flag.String("durations", "200ms,2s,10s", "comma-separated first-call durations")
	waiters := flag.String("waiters", "1,10,100", "comma-separated numbers of waiters")
	flag.IntVar(&cfg.procs, "procs", 4, "child processes the waiters are spread over")
	flag.IntVar(&cfg.runs, "runs", 3, "runs of each configuration (the summary gives their median)")
	flag.DurationVar(&cfg.budget, "budget", time.Minute, "each waiter's wait budget (guard.WithWait)")
	flag.BoolVar(&cfg.jsonOut, "json", false, "write every run's figures as JSON lines on standard output")
	compare := flag.String("compare", "", "name=binary,name=binary: run every configuration with each binary, alternating")
	child := flag.Bool("child", false, "internal: run as a child process serving waiters")
	single := flag.Bool("single", false, "internal: run one configuration (-stores, -durations, -waiters one each) and write its figures as JSON lines")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if *child {
		if err := serveChild(ctx, os.Stdin, os.Stdout); err != nil {
			fatal(err)
		}
		return
	}
	var err error
	if cfg.durations, err = parseDurations(*durations); err != nil {
		fatal(err)
	}
	if cfg.waiters, err = parseInts(*waiters); err != nil {
		fatal(err)
	}
	cfg.stores = splitList(*stores)
	if len(cfg.stores) == 0 {
		cfg.stores = []string{"memory"}
		for _, s := range []struct{ name, addr string }{{"redis", cfg.redisAddr}, {"postgres", cfg.postgresURL}, {"dynamodb", cfg.endpoint}} {
			if s.addr != "" {
				cfg.stores = append(cfg.stores, s.name)
			}
		}
	}
	switch {
	case *single:
		err = runSingle(ctx, cfg, os.Stdout)
	case *compare != "":
		err = runCompare(ctx, cfg, *compare, os.Stdout, os.Stderr)
	default:
		err = runAll(ctx, cfg, os.Stdout, os.Stderr)
	}
	if err != nil {
		fatal(err)
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "wait:", err)
	os.Exit(1)
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func parseDurations(s string) ([]time.Duration, error) {
	var out []time.Duration
	for _, f := range splitList(s) {
		d, err := time.ParseDuration(f)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("-durations: %q is not a positive duration", f)
		}
		out = append(out, d)
	}
	return out, nil
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range splitList(s) {
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-waiters: %q is not a positive number", f)
		}
		out = append(out, n)
	}
	return out, nil
}
