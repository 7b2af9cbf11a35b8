package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"

	"github.com/idemguard/idemguard/internal/testing/dynamodbtest"
	"github.com/idemguard/idemguard/internal/testing/postgrestest"
	"github.com/idemguard/idemguard/internal/testing/redistest"
	"github.com/idemguard/idemguard/internal/testing/reqcount"
	"github.com/idemguard/idemguard/store"
	idemddb "github.com/idemguard/idemguard/store/dynamodb"
	"github.com/idemguard/idemguard/store/memory"
	"github.com/idemguard/idemguard/store/postgres"
	idemredis "github.com/idemguard/idemguard/store/redis"
)

// resource names where a store keeps the run's records, for every process
// that connects to it.
type resource struct {
	Kind     string `json:"kind"`
	URL      string `json:"url,omitempty"`      // postgres
	Addr     string `json:"addr,omitempty"`     // redis
	Endpoint string `json:"endpoint,omitempty"` // dynamodb
	Table    string `json:"table,omitempty"`    // postgres, dynamodb
	Prefix   string `json:"prefix,omitempty"`   // redis
}

// conn is one process's client of a store, with its round-trip counter.
type conn struct {
	store store.Store
	calls func() int // round trips so far, set-up left out
	close func()
	// warm opens the client's connections ahead, where it keeps a pool
	// that opens them on demand.
	warm func(ctx context.Context) error
}

// warmConns is how many connections a PostgreSQL client opens at its
// warm-up: as many as a child's waiters use at once (100 waiters in 4
// processes), and one for the LISTEN connection, which the store takes
// out of the pool.
const warmConns = 26

// newResource makes a fresh table or prefix for a run of kind, and
// returns it with what removes it.
func newResource(ctx context.Context, cfg config, kind, runID string) (resource, func(), error) {
	r := resource{Kind: kind}
	switch kind {
	case "memory":
		return r, func() {}, nil
	case "redis":
		if cfg.redisAddr == "" {
			return r, nil, errors.New("redis: no server (-redis)")
		}
		r.Addr, r.Prefix = cfg.redisAddr, "idemguard-bench-wait:"+runID+":"
		return r, func() {
			c := goredis.NewClient(&goredis.Options{Addr: r.Addr})
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			iter := c.Scan(ctx, 0, r.Prefix+"*", 1000).Iterator()
			for iter.Next(ctx) {
				c.Del(ctx, iter.Val())
			}
		}, nil
	case "postgres":
		if cfg.postgresURL == "" {
			return r, nil, errors.New("postgres: no server (-postgres)")
		}
		r.URL, r.Table = cfg.postgresURL, "bench_wait_"+runID
		pool, err := pgxpool.New(ctx, r.URL)
		if err != nil {
			return r, nil, err
		}
		if err := postgres.CreateTable(ctx, pool, r.Table); err != nil {
			pool.Close()
			return r, nil, err
		}
		return r, func() {
			defer pool.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			pool.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{r.Table}.Sanitize())
		}, nil
	case "dynamodb":
		if cfg.endpoint == "" {
			return r, nil, errors.New("dynamodb: no endpoint (-endpoint)")
		}
		r.Endpoint, r.Table = cfg.endpoint, "idemguard-bench-wait-"+runID
		client := dynamodb.New(dynamodbtest.Options(r.Endpoint))
		if err := idemddb.CreateTable(ctx, client, r.Table); err != nil && !errors.Is(err, idemddb.ErrTTLNotEnabled) {
			return r, nil, err
		}
		return r, func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			client.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(r.Table)})
		}, nil
	}
	return r, nil, fmt.Errorf("unknown store %q (memory, redis, postgres, dynamodb)", kind)
}

// sharedMemory is the memory store of this process: the holder and the
// in-process waiters share it.
var sharedMemory = memory.New()

// connect opens a client of r's store, counting its round trips, and
// warms it up: a few reads of a key that does not exist, so that the
// client's first connections and the server's first requests are not in
// the figures (and, on PostgreSQL, as many connections as its waiters use
// at once: warmConns), and a watch of such a key, so that neither is the set-up of
// the store's subscriber connection (PostgreSQL's LISTEN connection,
// Redis's pub/sub connection), which a process pays once while it
// watches anything.
func connect(ctx context.Context, r resource) (*conn, error) {
	c, err := open(ctx, r)
	if err != nil {
		return nil, err
	}
	for range 5 {
		if _, err := c.store.Get(ctx, "warm-up#"+randomHex(8)); err != nil && !errors.Is(err, store.ErrNotFound) {
			c.close()
			return nil, fmt.Errorf("warming up: %w", err)
		}
	}
	if c.warm != nil {
		if err := c.warm(ctx); err != nil {
			c.close()
			return nil, fmt.Errorf("warming up: %w", err)
		}
	}
	if err := warmWatch(ctx, c.store, "warm-up#"+randomHex(8)); err != nil {
		c.close()
		return nil, fmt.Errorf("warming up the watch: %w", err)
	}
	return c, nil
}

// open opens a client of r's store, counting its round trips.
func open(ctx context.Context, r resource) (*conn, error) {
	switch r.Kind {
	case "memory":
		var n atomic.Int64
		return &conn{store: countCalls(sharedMemory, &n), calls: func() int { return int(n.Load()) }, close: func() {}}, nil
	case "redis":
		c := goredis.NewClient(&goredis.Options{Addr: r.Addr, PoolSize: 64})
		counter := redistest.CountRequests(c)
		s, err := idemredis.New(c, idemredis.WithPrefix(r.Prefix))
		if err != nil {
			c.Close()
			return nil, err
		}
		return &conn{store: s, calls: counter.Total, close: func() { c.Close() }}, nil
	case "postgres":
		pc, err := pgxpool.ParseConfig(r.URL)
		if err != nil {
			return nil, err
		}
		counter := postgrestest.CountStatements(pc)
		// pgxpool pings a connection idle for more than a second before
		// it hands it out (its default, kept), a round trip the tracer
		// does not see: counted here.
		pc.ShouldPing = func(_ context.Context, p pgxpool.ShouldPingParams) bool {
			if p.IdleDuration > time.Second {
				counter.Trip("PING")
				return true
			}
			return false
		}
		pc.MaxConns = 32
		pool, err := pgxpool.NewWithConfig(ctx, pc)
		if err != nil {
			return nil, err
		}
		s, err := postgres.New(pool, postgres.WithTable(r.Table))
		if err != nil {
			pool.Close()
			return nil, err
		}
		warm := func(ctx context.Context) error {
			var held []*pgxpool.Conn
			defer func() {
				for _, c := range held {
					c.Release()
				}
			}()
			for range warmConns {
				c, err := pool.Acquire(ctx)
				if err != nil {
					return err
				}
				held = append(held, c)
			}
			return nil
		}
		return &conn{store: s, calls: counter.Total, close: pool.Close, warm: warm}, nil
	case "dynamodb":
		opts := dynamodbtest.Options(r.Endpoint)
		opts.HTTPClient = awshttp.NewBuildableClient().WithTransportOptions(func(t *http.Transport) {
			t.MaxIdleConns, t.MaxIdleConnsPerHost = 128, 128
		})
		var counter *reqcount.Counter
		client := dynamodb.New(opts, func(o *dynamodb.Options) { counter = dynamodbtest.CountRequests(o) })
		s, err := idemddb.New(client, r.Table)
		if err != nil {
			return nil, err
		}
		return &conn{store: s, calls: counter.Total, close: func() {}}, nil
	}
	return nil, fmt.Errorf("unknown store %q", r.Kind)
}

// counted is a store whose calls are counted: the memory store's round
// trips, which no client hook sees.
type counted struct {
	store.Store
	n *atomic.Int64
}

func (c counted) Acquire(ctx context.Context, rec *store.Record, now time.Time) (*store.Record, error) {
	c.n.Add(1)
	return c.Store.Acquire(ctx, rec, now)
}

func (c counted) Complete(ctx context.Context, rec *store.Record) error {
	c.n.Add(1)
	return c.Store.Complete(ctx, rec)
}

func (c counted) Extend(ctx context.Context, key, token string, lease, exp time.Time) error {
	c.n.Add(1)
	return c.Store.Extend(ctx, key, token, lease, exp)
}

func (c counted) Release(ctx context.Context, key, token string) error {
	c.n.Add(1)
	return c.Store.Release(ctx, key, token)
}

func (c counted) Get(ctx context.Context, key string) (*store.Record, error) {
	c.n.Add(1)
	return c.Store.Get(ctx, key)
}

func (c counted) Name() string { return "memory" }
