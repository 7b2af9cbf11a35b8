package chaos

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemguard/idemguard/internal/testing/faultproxy"
	"github.com/idemguard/idemguard/internal/testing/linz"
	"github.com/idemguard/idemguard/store"
	idemddb "github.com/idemguard/idemguard/store/dynamodb"
	"github.com/idemguard/idemguard/store/memory"
	"github.com/idemguard/idemguard/store/postgres"
	idemredis "github.com/idemguard/idemguard/store/redis"
)

// The linearizability run (make chaos, after the chaos run; command
// chaos/cmd/linz): the long form of each store's TestLinearizable. For
// every store it records histories of concurrent clients on a few hot keys
// through the store's fault proxy (internal/testing/faultproxy; the memory store
// faults in process) with linz.RecordHistory, each on fresh keys, and
// checks each with storetest's Porcupine model. A history that is not
// linearizable fails the run, with Porcupine's visualisation written to a
// file the report names and its minimal failing operations.

// StoreMemory names the memory store in [LinzConfig.Stores].
const StoreMemory = "memory"

// LinzConfig is one linearizability run. Start from [DefaultLinzConfig].
type LinzConfig struct {
	// Stores are the stores to check: [StoreMemory], [StoreDynamoDB],
	// [StoreRedis], [StorePostgres].
	Stores []string
	// Rounds is the number of histories per store, each on fresh keys.
	Rounds int
	// History shapes each history (clients, keys, operations); its Seed
	// is derived from Seed and the round.
	History linz.HistoryConfig
	// FaultRate is the share of requests the fault proxy faults (and of
	// operations the memory store's recorder faults).
	FaultRate float64
	// MaxLatency is the longest delay the proxy injects.
	MaxLatency time.Duration
	// Seed seeds the clients and the faults; zero means a random seed.
	Seed uint64
	// CheckTimeout bounds the check of one history.
	CheckTimeout time.Duration
	// Dir is where visualisations of failing histories go; empty means the
	// system's temporary directory.
	Dir string

	DynamoDBEndpoint, RedisAddr, PostgresURL string

	// Log receives progress lines; nil discards them.
	Log io.Writer
}

// DefaultLinzConfig is the run of make chaos: every store, 10 histories of
// 5,000 operations by 8 clients on 4 keys, 8% faults, the servers from the
// environment.
func DefaultLinzConfig() LinzConfig {
	return LinzConfig{
		Stores:           []string{StoreMemory, StoreDynamoDB, StoreRedis, StorePostgres},
		Rounds:           10,
		History:          linz.HistoryConfig{Clients: 8, Keys: 4, Ops: 5000, Duration: 5 * time.Minute},
		FaultRate:        0.08,
		MaxLatency:       150 * time.Millisecond,
		CheckTimeout:     5 * time.Minute,
		DynamoDBEndpoint: os.Getenv(DynamoDBEndpointEnv),
		RedisAddr:        os.Getenv(RedisAddrEnv),
		PostgresURL:      os.Getenv(PostgresURLEnv),
	}
}

// LinzStoreReport is what the run found on one store.
type LinzStoreReport struct {
	Store        string            `json:"store"`
	Histories    int               `json:"histories"`
	Linearizable int               `json:"linearizable"`
	TimedOut     int               `json:"timed_out"`
	Operations   int               `json:"operations"`
	LostAnswers  int               `json:"lost_answers"`
	Requests     int64             `json:"requests"`
	Faults       faultproxy.Counts `json:"faults"`
	Recording    time.Duration     `json:"-"`
	Checking     time.Duration     `json:"-"`
	Failures     []string          `json:"failures,omitempty"`
}

// LinzReport is the result of [RunLinearizability].
type LinzReport struct {
	Seed    uint64            `json:"seed"`
	Stores  []LinzStoreReport `json:"stores"`
	Elapsed time.Duration     `json:"-"`
}

// OK reports whether every history checked was shown linearizable.
func (r *LinzReport) OK() bool {
	for _, s := range r.Stores {
		if s.Linearizable != s.Histories {
			return false
		}
	}
	return len(r.Stores) > 0
}

// Print writes the report as lines, then one JSON line.
func (r *LinzReport) Print(w io.Writer) {
	status := "PASS"
	if !r.OK() {
		status = "FAIL"
	}
	fmt.Fprintf(w, "linearizability run (seed %d): %s\n", r.Seed, status)
	for _, s := range r.Stores {
		faults := fmt.Sprintf("%d requests, %d faults (%s)", s.Requests, s.Faults.Total(), s.Faults)
		if s.Store == StoreMemory {
			faults = "faults injected in process"
		}
		fmt.Fprintf(w, "  %-9s %d/%d histories linearizable (%d timed out): %d operations, %d with lost answers; %s; recorded in %.1fs, checked in %.1fs\n",
			s.Store+":", s.Linearizable, s.Histories, s.TimedOut, s.Operations, s.LostAnswers,
			faults, s.Recording.Seconds(), s.Checking.Seconds())
		for _, f := range s.Failures {
			fmt.Fprintf(w, "  FAILURE (%s): %s\n", s.Store, f)
		}
	}
	fmt.Fprintf(w, "  elapsed: %.1fs\n", r.Elapsed.Seconds())
	b, _ := json.Marshal(struct {
		*LinzReport
		OK             bool    `json:"ok"`
		ElapsedSeconds float64 `json:"elapsed_seconds"`
	}{r, r.OK(), round(r.Elapsed.Seconds())})
	fmt.Fprintf(w, "%s\n", b)
}

// RunLinearizability runs cfg: for each store, cfg.Rounds histories, each
// recorded and checked.
func RunLinearizability(ctx context.Context, cfg LinzConfig) (*LinzReport, error) {
	began := time.Now()
	if cfg.Seed == 0 {
		var b [8]byte
		rand.Read(b[:])
		for _, x := range b {
			cfg.Seed = cfg.Seed<<8 | uint64(x)
		}
		cfg.Seed >>= 1
	}
	if cfg.Rounds <= 0 {
		cfg.Rounds = 1
	}
	logw := cfg.Log
	if logw == nil {
		logw = io.Discard
	}
	rep := &LinzReport{Seed: cfg.Seed}
	for _, name := range cfg.Stores {
		sr := LinzStoreReport{Store: name, Faults: faultproxy.Counts{}}
		for round := range cfg.Rounds {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			seed := cfg.Seed + uint64(round)*7919
			s, proxy, cleanup, err := linzStore(ctx, cfg, name, seed)
			if err != nil {
				return nil, err
			}
			hc := cfg.History
			hc.Seed = seed
			if name == StoreMemory {
				hc.Faults = cfg.FaultRate
			}
			t0 := time.Now()
			h, err := linz.RecordHistory(ctx, s, hc)
			sr.Recording += time.Since(t0)
			if proxy != nil {
				sr.Requests += proxy.Requests()
				for k, n := range proxy.Counts() {
					sr.Faults[k] += n
				}
			}
			cleanup()
			if err != nil {
				return nil, err
			}
			res := h.Check(linzPrecision(name), linz.CheckOptions{Timeout: cfg.CheckTimeout, Dir: cfg.Dir, Name: fmt.Sprintf("chaos-%s-%d", name, round)})
			sr.Checking += res.Elapsed
			sr.Histories++
			sr.Operations += res.Ops
			sr.LostAnswers += res.Unknown
			switch {
			case res.Linearizable:
				sr.Linearizable++
			case res.TimedOut:
				sr.TimedOut++
				sr.Failures = append(sr.Failures, res.Report())
			default:
				sr.Failures = append(sr.Failures, res.Report())
			}
			fmt.Fprintf(logw, "linz: %s history %d/%d: %s\n", name, round+1, cfg.Rounds, res)
		}
		rep.Stores = append(rep.Stores, sr)
	}
	rep.Elapsed = time.Since(began)
	return rep, nil
}

// linzPrecision is how finely each store keeps times.
func linzPrecision(name string) linz.Precision {
	switch name {
	case StoreDynamoDB, StoreRedis:
		return linz.Precision{Expiry: time.Second, Lease: time.Millisecond}
	case StorePostgres:
		return linz.Precision{Expiry: time.Microsecond, Lease: time.Microsecond}
	}
	return linz.Precision{}
}

// counted is a fault proxy's counters.
type counted interface {
	Requests() int64
	Counts() faultproxy.Counts
}

// linzStore makes a fresh store of kind name behind its fault proxy, with
// the client's own retries off, and a function that removes what it made.
func linzStore(ctx context.Context, cfg LinzConfig, name string, seed uint64) (store.Store, counted, func(), error) {
	faults := faultproxy.Config{Rate: cfg.FaultRate, MaxLatency: cfg.MaxLatency, Seed: seed}
	var b [6]byte
	rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	cleanupCtx := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	}
	switch name {
	case StoreMemory:
		return memory.New(), nil, func() {}, nil
	case StoreDynamoDB:
		if cfg.DynamoDBEndpoint == "" {
			return nil, nil, nil, fmt.Errorf("chaos: no DynamoDB endpoint (set %s)", DynamoDBEndpointEnv)
		}
		u, err := url.Parse(cfg.DynamoDBEndpoint)
		if err != nil {
			return nil, nil, nil, err
		}
		if err := checkLoopback(u.Host); err != nil {
			return nil, nil, nil, err
		}
		direct := dynamodb.New(dynamoOptions(cfg.DynamoDBEndpoint))
		table := "linz-" + id
		if err := idemddb.CreateTable(ctx, direct, table); err != nil && !errors.Is(err, idemddb.ErrTTLNotEnabled) {
			return nil, nil, nil, fmt.Errorf("chaos: creating %s: %w", table, err)
		}
		drop := func() {
			c, cancel := cleanupCtx()
			defer cancel()
			direct.DeleteTable(c, &dynamodb.DeleteTableInput{TableName: aws.String(table)})
		}
		p, err := faultproxy.NewDynamoDB(cfg.DynamoDBEndpoint, faults)
		if err != nil {
			drop()
			return nil, nil, nil, err
		}
		client := dynamodb.New(dynamoOptions(p.URL()), func(o *dynamodb.Options) { o.RetryMaxAttempts = 1 })
		s, err := idemddb.New(client, table, idemddb.WithMaxAttempts(1))
		if err != nil {
			p.Close()
			drop()
			return nil, nil, nil, err
		}
		return s, p, func() { p.Close(); drop() }, nil
	case StoreRedis:
		if cfg.RedisAddr == "" {
			return nil, nil, nil, fmt.Errorf("chaos: no Redis address (set %s)", RedisAddrEnv)
		}
		p, err := faultproxy.NewRedis(cfg.RedisAddr, faults)
		if err != nil {
			return nil, nil, nil, err
		}
		client := redisClient(p.Addr(), 16, false)
		prefix := "linz:" + id + ":"
		s, err := idemredis.New(client, idemredis.WithPrefix(prefix), idemredis.WithoutServerCheck())
		if err != nil {
			client.Close()
			p.Close()
			return nil, nil, nil, err
		}
		return s, p, func() {
			client.Close()
			p.Close()
			direct := redisClient(cfg.RedisAddr, 1, true)
			defer direct.Close()
			c, cancel := cleanupCtx()
			defer cancel()
			deleteKeys(c, direct, prefix)
		}, nil
	case StorePostgres:
		if cfg.PostgresURL == "" {
			return nil, nil, nil, fmt.Errorf("chaos: no PostgreSQL URL (set %s)", PostgresURLEnv)
		}
		if err := checkLoopbackURL(cfg.PostgresURL); err != nil {
			return nil, nil, nil, err
		}
		u, err := url.Parse(cfg.PostgresURL)
		if err != nil {
			return nil, nil, nil, err
		}
		direct, err := pgxpool.New(ctx, cfg.PostgresURL)
		if err != nil {
			return nil, nil, nil, err
		}
		table := "linz_" + id
		if err := postgres.CreateTable(ctx, direct, table); err != nil {
			direct.Close()
			return nil, nil, nil, err
		}
		drop := func() {
			c, cancel := cleanupCtx()
			defer cancel()
			direct.Exec(c, "DROP TABLE IF EXISTS "+pgx.Identifier{table}.Sanitize())
			direct.Close()
		}
		p, err := faultproxy.NewPostgres(u.Host, faults)
		if err != nil {
			drop()
			return nil, nil, nil, err
		}
		pu := *u
		pu.Host = p.Addr()
		pool, err := pgxpool.New(ctx, pu.String())
		if err != nil {
			p.Close()
			drop()
			return nil, nil, nil, err
		}
		s, err := postgres.New(pool, postgres.WithTable(table))
		if err != nil {
			pool.Close()
			p.Close()
			drop()
			return nil, nil, nil, err
		}
		return s, p, func() { pool.Close(); p.Close(); drop() }, nil
	}
	return nil, nil, nil, fmt.Errorf("chaos: unknown store %q (%s)", name, strings.Join([]string{StoreMemory, StoreDynamoDB, StoreRedis, StorePostgres}, ", "))
}
