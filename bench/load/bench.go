package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/internal/testing/dynamodbtest"
	"github.com/idemguard/idemguard/internal/testing/reqcount"
	"github.com/idemguard/idemguard/store"
	idemddb "github.com/idemguard/idemguard/store/dynamodb"
	"github.com/idemguard/idemguard/store/memory"
)

// Config says what to run.
type Config struct {
	// Endpoint is the DynamoDB endpoint URL; empty runs the PostgreSQL
	// scenarios only.
	Endpoint string
	// PostgresURL is a PostgreSQL database for the pg_ scenarios; empty
	// leaves them out.
	PostgresURL string
	// HandIndex gives the hand-written PostgreSQL baseline's table the
	// index on (expires_at, key) that store/postgres keeps for Purge.
	HandIndex bool
	// StoreIndex replaces the index CreateTable gives the store's table
	// on (expires_at, key), to measure what it costs: "expires_at" (a
	// btree on expires_at alone), "brin" (a BRIN index on expires_at), or
	// "none". Empty keeps the table as CreateTable makes it.
	StoreIndex string
	// RedisAddr is a Redis server's host:port for the redis_ scenarios;
	// empty leaves them out.
	RedisAddr string
	// Concurrency is the number of concurrent callers in the miss and
	// replay scenarios.
	Concurrency int
	// Ops is the number of operations per miss and replay scenario, over
	// all rounds.
	Ops int
	// Rounds is the number of rounds the operations are split into; every
	// round runs every scenario once, in an order rotated by one each round.
	Rounds int
	// Warmup is the number of operations per scenario in the warm-up pass.
	Warmup int
	// ReplayKeys is the number of completed keys the replay scenarios cycle
	// through; it is raised to Concurrency if lower, since each caller
	// replays keys of its own (concurrent calls with one key would share
	// one request).
	ReplayKeys int
	// HotCalls is the number of concurrent calls with one key in a hot-key
	// burst; each round runs one burst per hot-key scenario.
	HotCalls int
	// HotHold is how long the hot-key function runs, in wait mode, once
	// every caller has started.
	HotHold time.Duration
	// Scenarios names the scenarios to run; nil runs all.
	Scenarios []string
	// Profile, if set, receives a CPU profile of the measured rounds.
	Profile io.Writer
	// Verbose writes each scenario's figures in each round to the log.
	Verbose bool

	// httpClient replaces the SDK's HTTP client (tests: a stub server).
	httpClient aws.HTTPClient
}

// DefaultConfig returns the defaults of the load command.
func DefaultConfig() Config {
	return Config{
		Concurrency: 16,
		Ops:         2000,
		Rounds:      20,
		Warmup:      300,
		ReplayKeys:  500,
		HotCalls:    2000,
		HotHold:     100 * time.Millisecond,
	}
}

// Scenario names.
const (
	MissRaw             = "miss_raw"
	MissGuarded         = "miss_guarded"
	ReplayRaw           = "replay_raw"
	ReplayGuarded       = "replay_guarded"
	ReplayCachedGuarded = "replay_cached_guarded"
	HotKeyWait          = "hotkey_wait"
	HotKeyReject        = "hotkey_reject"
)

// DynamoScenarios lists the DynamoDB scenarios in the order of the first
// round.
var DynamoScenarios = []string{MissRaw, MissGuarded, ReplayRaw, ReplayGuarded, ReplayCachedGuarded, HotKeyWait, HotKeyReject,
	TxRaw, TxProtocolRaw, TxGuarded, TxReplayGuarded, TxReplayCachedGuarded}

// AllScenarios lists every scenario: DynamoDB's, PostgreSQL's, Redis's.
var AllScenarios = append(append(append([]string(nil), DynamoScenarios...), PgScenarios...), RedisScenarios...)

// baselines maps a guarded scenario to the raw scenario it is compared with.
var baselines = map[string]string{
	MissGuarded:           MissRaw,
	ReplayGuarded:         ReplayRaw,
	ReplayCachedGuarded:   ReplayRaw,
	TxGuarded:             TxRaw,
	TxReplayGuarded:       ReplayRaw,
	TxReplayCachedGuarded: ReplayRaw,
	// PostgreSQL and Redis: against the hand-written baselines (hand.go),
	// the store's own commands sent by hand included.
	PgMissRaw:             PgMissHand,
	PgMissStore:           PgMissHand,
	PgMissGuarded:         PgMissHand,
	PgReplayRaw:           PgReplayHand,
	PgReplayStore:         PgReplayHand,
	PgReplayGuarded:       PgReplayHand,
	PgReplayCachedGuarded: PgReplayHand,
	PgTxGuarded:           PgTxRaw,

	RedisMissRaw:             RedisMissHand,
	RedisMissStore:           RedisMissHand,
	RedisMissGuarded:         RedisMissHand,
	RedisReplayRaw:           RedisReplayHand,
	RedisReplayStore:         RedisReplayHand,
	RedisReplayGuarded:       RedisReplayHand,
	RedisReplayCachedGuarded: RedisReplayHand,
	RedisHTTPGuardedFirst:    RedisHTTPHandFirst,
	RedisHTTPGuardedReplay:   RedisHTTPHandReplay,
}

// Order is the input of the guarded function: what a payment job receives.
type Order struct {
	OrderID  string `json:"order_id"`
	Customer string `json:"customer"`
	Amount   int64  `json:"amount_cents"`
	Currency string `json:"currency"`
}

// Receipt is the guarded function's result, stored and replayed.
type Receipt struct {
	ChargeID string `json:"charge_id"`
	Status   string `json:"status"`
}

func newOrder(id string) Order {
	return Order{OrderID: id, Customer: "cus_4f1c9a", Amount: 4999, Currency: "EUR"}
}

// charge is the side effect of the miss and replay scenarios: trivial, so
// that the guard's cost is not hidden behind the function's.
func charge(o Order) Receipt { return Receipt{ChargeID: "ch_" + o.OrderID, Status: "charged"} }

const (
	scopeMiss   = "bench-miss"
	scopeReplay = "bench-replay"
	scopeHot    = "bench-hot"
)

// bench holds the client, the store, the guards and the state of the
// scenarios. Scenarios run one at a time.
type bench struct {
	cfg     Config
	client  *dynamodb.Client
	counter *reqcount.Counter
	retry   aws.Retryer
	optFns  []func(*dynamodb.Options) // what the store passes on every request
	table   string
	runID   string
	g       *guard.Guard

	missFn     func(context.Context, Order) (Receipt, error) // guard.Wrap of charge
	replayFn   func(context.Context, Order) (Receipt, error)
	cachedFn   func(context.Context, Order) (Receipt, error) // on a guard with a cache
	hotWait    func(context.Context, Order) (Receipt, error)
	hotRejct   func(context.Context, Order) (Receipt, error)
	txFn       func(context.Context, Order) (Receipt, error) // guard.WrapTx: the transactional scenarios
	txReplayFn func(context.Context, Order) (Receipt, error)
	txCachedFn func(context.Context, Order) (Receipt, error) // on the guard with a cache
	effects    string                                        // their business table

	bodyRuns  atomic.Int64
	replayIn  []Order  // inputs of the completed records
	replayKey []string // their keys, as the guard derived them
	seq       atomic.Int64
	hot       atomic.Pointer[burst] // the burst in progress

	pg *pgBench    // the PostgreSQL scenarios' side; nil without them
	rd *redisBench // the Redis scenarios' side; nil without them
}

// guardedSet is what the miss and replay scenarios of a store other than
// DynamoDB call: a guarded function for fresh keys, one for completed keys
// and the same on a guard with a local cache, and the inputs and keys of
// the completed records the replay scenarios read.
type guardedSet struct {
	missFn   func(context.Context, Order) (Receipt, error)
	replayFn func(context.Context, Order) (Receipt, error)
	cachedFn func(context.Context, Order) (Receipt, error) // on a guard with a cache

	replayIn  []Order
	replayKey []string // as the guard derived them
}

// newGuardedSet wraps body on a guard over s, and on one with a cache of
// cacheSize records; it returns the set and the guard without the cache.
func newGuardedSet(s store.Store, cacheSize int, body func(context.Context, Order) (Receipt, error)) (guardedSet, *guard.Guard, error) {
	var gs guardedSet
	g, err := guard.New(s)
	if err != nil {
		return gs, nil, err
	}
	cached, err := guard.New(s, guard.WithCache(cacheSize, 0))
	if err != nil {
		return gs, nil, err
	}
	if gs.missFn, err = guard.Wrap(g, scopeMiss, body); err != nil {
		return gs, nil, err
	}
	if gs.replayFn, err = guard.Wrap(g, scopeReplay, body); err != nil {
		return gs, nil, err
	}
	gs.cachedFn, err = guard.Wrap(cached, scopeReplay, body)
	return gs, g, err
}

// populate completes n records for the replay scenarios, with order IDs
// idPrefix-0 … idPrefix-(n-1), notes their keys as keyer derives them (keys
// do not depend on the store) and primes the cache.
func (gs *guardedSet) populate(ctx context.Context, n int, idPrefix string, keyer *guard.Guard) error {
	gs.replayIn, gs.replayKey = make([]Order, n), make([]string, n)
	for i := range n {
		in := newOrder(fmt.Sprintf("%s-%d", idPrefix, i))
		if _, err := gs.replayFn(ctx, in); err != nil {
			return fmt.Errorf("completing replay record %d: %w", i, err)
		}
		key, _, err := keyer.Key(scopeReplay, in)
		if err != nil {
			return err
		}
		gs.replayIn[i], gs.replayKey[i] = in, key
		if _, err := gs.cachedFn(ctx, in); err != nil {
			return fmt.Errorf("priming the cache with record %d: %w", i, err)
		}
	}
	return nil
}

// newBench connects to the endpoint, creates a table and builds the
// guards, for DynamoDB if cfg.Scenarios has a DynamoDB scenario, for
// PostgreSQL if it has a pg_ one and for Redis if it has a redis_ one.
func newBench(ctx context.Context, cfg Config) (*bench, error) {
	cfg.ReplayKeys = max(cfg.ReplayKeys, cfg.Concurrency, 1)
	b := &bench{cfg: cfg, runID: randomHex(4)}
	body := func(_ context.Context, o Order) (Receipt, error) {
		b.bodyRuns.Add(1)
		return charge(o), nil
	}
	var needDynamo, needPg, needRedis bool
	for _, n := range cfg.Scenarios {
		needPg = needPg || isPg(n)
		needRedis = needRedis || isRedis(n)
		needDynamo = needDynamo || !isPg(n) && !isRedis(n)
	}
	if needRedis {
		if cfg.RedisAddr == "" {
			return nil, errors.New("the redis_ scenarios need a Redis address (-redis)")
		}
		var err error
		if b.rd, err = newRedisBench(ctx, cfg, b, body); err != nil {
			return nil, fmt.Errorf("redis: %w", err)
		}
	}
	if needPg {
		if cfg.PostgresURL == "" {
			return nil, errors.New("the pg_ scenarios need a PostgreSQL URL (-postgres)")
		}
		var err error
		if b.pg, err = newPgBench(ctx, cfg, b.runID, body); err != nil {
			return nil, fmt.Errorf("PostgreSQL: %w", err)
		}
	}
	if !needDynamo {
		return b, nil
	}
	// One retryer for the store and the raw requests: the store's default,
	// the SDK's standard retryer with 8 attempts and 25 ms–1 s jittered
	// backoff, passed per request as the store passes it.
	b.retry = idemddb.NewRetryer(0)
	b.optFns = []func(*dynamodb.Options){func(o *dynamodb.Options) { o.Retryer = b.retry }}
	opts := dynamodbtest.Options(cfg.Endpoint)
	// Keep a connection per concurrent caller: the SDK's default keeps 10
	// idle connections per host, which would make a run at concurrency 16
	// measure reconnects.
	idle := max(cfg.Concurrency, 16) * 2
	opts.HTTPClient = awshttp.NewBuildableClient().WithTransportOptions(func(t *http.Transport) {
		t.MaxIdleConns, t.MaxIdleConnsPerHost = idle, idle
	})
	if cfg.httpClient != nil {
		opts.HTTPClient = cfg.httpClient
	}
	b.client = dynamodb.New(opts, func(o *dynamodb.Options) { b.counter = dynamodbtest.CountRequests(o) })

	b.table = "idemguard-bench-" + b.runID
	err := idemddb.CreateTable(ctx, b.client, b.table)
	if err != nil && !errors.Is(err, idemddb.ErrTTLNotEnabled) {
		return nil, err
	}
	s, err := idemddb.New(b.client, b.table, idemddb.WithRetryer(b.retry))
	if err != nil {
		return nil, err
	}
	g, err := guard.New(s)
	if err != nil {
		return nil, err
	}
	b.g = g
	cached, err := guard.New(s, guard.WithCache(cfg.ReplayKeys, 0))
	if err != nil {
		return nil, err
	}
	if b.missFn, err = guard.Wrap(g, scopeMiss, body); err != nil {
		return nil, err
	}
	if b.replayFn, err = guard.Wrap(g, scopeReplay, body); err != nil {
		return nil, err
	}
	if b.cachedFn, err = guard.Wrap(cached, scopeReplay, body); err != nil {
		return nil, err
	}
	if b.hotWait, err = guard.Wrap(g, scopeHot, b.hotBody, guard.WithWait(time.Minute)); err != nil {
		return nil, err
	}
	if b.hotRejct, err = guard.Wrap(g, scopeHot, b.hotBody, guard.WithWait(0)); err != nil {
		return nil, err
	}
	if err := b.setUpTx(ctx, g, s, body); err != nil {
		return nil, err
	}
	return b, nil
}

// close deletes the tables.
func (b *bench) close() error {
	var errs []error
	if b.pg != nil {
		errs = append(errs, b.pg.close())
	}
	if b.rd != nil {
		errs = append(errs, b.rd.close())
	}
	if b.client != nil {
		errs = append(errs, b.closeTx())
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := b.client.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(b.table)})
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// populate completes ReplayKeys records through the guard, records their
// keys for the raw replay, and fills the cached guard's cache.
func (b *bench) populate(ctx context.Context) error {
	n := b.cfg.ReplayKeys
	keyer, err := guard.New(memory.New()) // derives keys only: they do not depend on the store
	if err != nil {
		return err
	}
	if b.pg != nil {
		if err := b.pg.populate(ctx, n, "pg-replay-"+b.runID, keyer); err != nil {
			return err
		}
		for i, in := range b.pg.replayIn {
			if err := b.pg.handMiss(ctx, b, scopeReplay, in); err != nil {
				return fmt.Errorf("completing hand-written replay record %d: %w", i, err)
			}
		}
	}
	if b.rd != nil {
		if err := b.rd.populate(ctx, n, "redis-replay-"+b.runID, keyer); err != nil {
			return err
		}
		for i, in := range b.rd.replayIn {
			if err := b.rd.handMiss(ctx, b, scopeReplay, in); err != nil {
				return fmt.Errorf("completing hand-written replay record %d: %w", i, err)
			}
		}
		if err := b.rd.http.populate(n, "http-replay-"+b.runID); err != nil {
			return err
		}
	}
	if b.client == nil {
		return nil
	}
	b.replayIn = make([]Order, n)
	b.replayKey = make([]string, n)
	// The scope, guard and result of replayFn, so the records are the ones
	// the replay scenarios read; the function also notes the key the guard
	// derived, which the raw replay uses as a raw caller would.
	var key string
	complete, err := guard.Wrap(b.g, scopeReplay, func(ctx context.Context, o Order) (Receipt, error) {
		key, _ = guard.KeyFromContext(ctx)
		return charge(o), nil
	})
	if err != nil {
		return err
	}
	for i := range n {
		in := newOrder(fmt.Sprintf("replay-%s-%d", b.runID, i))
		key = ""
		if _, err := complete(ctx, in); err != nil {
			return fmt.Errorf("completing replay record %d: %w", i, err)
		}
		if key == "" {
			return fmt.Errorf("replay record %d: the function did not run (key reused?)", i)
		}
		b.replayIn[i], b.replayKey[i] = in, key
	}
	for i, in := range b.replayIn {
		if _, err := b.cachedFn(ctx, in); err != nil {
			return fmt.Errorf("priming the cache with record %d: %w", i, err)
		}
	}
	return b.populateTx(ctx)
}

// storeMiss is a first call through store s, without a guard: Acquire of an
// in-progress record built by hand, the function, Complete.
func storeMiss(ctx context.Context, b *bench, s store.Store, key string, in Order) error {
	now := time.Now()
	claim := &store.Record{Key: key, Status: store.StatusInProgress, Token: newToken(),
		ExpiresAt: now.Add(max(rawTTL, rawLease)), LeaseExpiresAt: now.Add(rawLease)}
	if _, err := s.Acquire(ctx, claim, now.Add(-adapt.DefaultClockSkew)); err != nil {
		return err
	}
	b.bodyRuns.Add(1)
	data, err := json.Marshal(charge(in))
	if err != nil {
		return err
	}
	return s.Complete(ctx, &store.Record{Key: key, Status: store.StatusCompleted, Token: claim.Token,
		Result: data, ExpiresAt: time.Now().Add(rawTTL)})
}

// storeReplay is a replay through store s, without a guard.
func storeReplay(ctx context.Context, s store.Store, key string) error {
	now := time.Now()
	claim := &store.Record{Key: key, Status: store.StatusInProgress, Token: newToken(),
		ExpiresAt: now.Add(max(rawTTL, rawLease)), LeaseExpiresAt: now.Add(rawLease)}
	old, err := s.Acquire(ctx, claim, now.Add(-adapt.DefaultClockSkew))
	if !errors.Is(err, store.ErrConflict) {
		if err == nil {
			return fmt.Errorf("replay of %s: the claim succeeded; the record was missing", key)
		}
		return err
	}
	if old.Status != store.StatusCompleted || old.Result == nil {
		return errors.New("replay of " + key + ": the record is not a completed one with a result")
	}
	var rc Receipt
	return json.Unmarshal(old.Result, &rc)
}
