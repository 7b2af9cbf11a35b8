package redis

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/idemguard/idemguard/internal/compress"
)

const (
	// defaultPrefix starts the key of every record unless [WithPrefix] says
	// otherwise: a record's key is the prefix followed by the idempotency
	// key ("<scope>#<hash>").
	defaultPrefix = "idemguard:"
	// defaultCompressAbove is the result size above which results are
	// gzip-compressed, unless [WithCompressAbove] says otherwise: 16 KiB, as
	// in the DynamoDB store.
	defaultCompressAbove = compress.DefaultAbove
	// defaultMaxResultSize is the largest result stored when neither
	// [WithMaxResultSize] nor the server's proto-max-bulk-len (read at
	// [New]) says otherwise: 512 MiB, Redis's default proto-max-bulk-len.
	defaultMaxResultSize = 512 << 20
	// defaultExpiryGrace is how long after a record's expiry the server
	// deletes its key, unless [WithExpiryGrace] says otherwise.
	defaultExpiryGrace = time.Minute
)

// Option configures a [Store].
type Option func(*config)

type config struct {
	prefix        string
	logger        *slog.Logger
	replicas      int
	replicaWait   time.Duration
	maxResult     int // 0: the server's limit
	compressAbove int
	expiryGrace   time.Duration
	skipCheck     bool
	errs          []error
}

func newConfig(opts []Option) (*config, error) {
	c := &config{
		prefix:        defaultPrefix,
		compressAbove: defaultCompressAbove,
		expiryGrace:   defaultExpiryGrace,
	}
	for _, o := range opts {
		if o != nil {
			o(c)
		}
	}
	if c.logger == nil {
		c.logger = slog.Default()
	}
	if err := errors.Join(c.errs...); err != nil {
		return nil, fmt.Errorf("redis: invalid options: %w", err)
	}
	return c, nil
}

// WithPrefix sets the prefix of every record's key. Stores with different
// prefixes on one server are independent. The prefix is also what
// [Store.List] scans for (SCAN MATCH prefix*), so a prefix that no other
// key of the server starts with keeps listing cheap. An empty prefix is
// allowed: records then use the idempotency keys themselves. Default
// "idemguard:".
func WithPrefix(prefix string) Option { return func(c *config) { c.prefix = prefix } }

// WithLogger sets where [New] logs its warnings (a maxmemory-policy that can
// evict records, a configuration it could not read). Default
// [slog.Default].
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithReplicas makes every claim, lease extension and completion wait
// until n replicas have acknowledged it, for at most timeout: the store
// sends WAIT n timeout in the same pipeline as the write, so it costs no
// extra round trip, only the replication delay. When fewer replicas
// acknowledge in time the write is still on the primary, and the call
// returns an error matching [ErrNotReplicated]; a claim that was not
// replicated is released again so that it does not block its key.
//
// Redis replicates asynchronously: without this option a failover can
// promote a replica that never saw an acknowledged claim or completion,
// and the next call with the same key runs the side effect again. WAIT
// narrows that window; it does not make Redis strongly consistent (a
// replica that acknowledged may still not be the one promoted). See
// docs/redis.md.
//
// The client must be a *redis.Client (standalone or Sentinel) or a
// *redis.ClusterClient, so that WAIT reaches the node that took the write.
// n must be at least 1 and timeout positive.
func WithReplicas(n int, timeout time.Duration) Option {
	return func(c *config) {
		if n < 1 || timeout <= 0 {
			c.errs = append(c.errs, fmt.Errorf("WithReplicas(%d, %v): need at least 1 replica and a positive timeout", n, timeout))
			return
		}
		c.replicas, c.replicaWait = n, timeout
	}
}

// WithMaxResultSize sets the largest result, in bytes before compression,
// that Complete stores; a larger one is refused before anything is sent,
// with an error matching store.ErrTooLarge, and the guard records the call
// without its result (replays get guard.ErrResultUnavailable; the function
// does not run again). The store never stores more than the server's
// proto-max-bulk-len, read at [New], allows. Default: that limit, or
// 512 MiB when it cannot be read.
func WithMaxResultSize(n int) Option {
	return func(c *config) {
		if n < 1 {
			c.errs = append(c.errs, fmt.Errorf("WithMaxResultSize(%d): need at least 1 byte", n))
			return
		}
		c.maxResult = n
	}
}

// WithCompressAbove sets the size above which results are gzip-compressed
// before they are stored. A compressed result is stored only if it is
// smaller than the original. n < 0 turns compression off. Default
// 16 KiB.
func WithCompressAbove(n int) Option { return func(c *config) { c.compressAbove = n } }

// WithExpiryGrace sets how long after a record's expiry the server deletes
// its key (PEXPIREAT). Liveness is decided by the store's scripts against
// the time the guard passes, never by the server's clock; the grace only
// keeps a server clock that runs ahead of the guards' from deleting a
// record the guards still treat as live. Set it to at least the clock
// skew you allow between guards and server. d must not be negative.
// Default a minute.
func WithExpiryGrace(d time.Duration) Option {
	return func(c *config) {
		if d < 0 {
			c.errs = append(c.errs, fmt.Errorf("WithExpiryGrace(%v): must not be negative", d))
			return
		}
		c.expiryGrace = d
	}
}

// WithoutServerCheck makes [New] send nothing: it neither checks
// maxmemory-policy nor reads proto-max-bulk-len nor loads the scripts.
// Use it where New must not wait for the server; the scripts are then sent
// with EVAL on their first use (one extra round trip each).
func WithoutServerCheck() Option { return func(c *config) { c.skipCheck = true } }
