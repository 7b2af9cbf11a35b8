package redis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idemguard/idemguard/internal/epoch"
	"github.com/idemguard/idemguard/store"
)

// Store is a [store.Store] that keeps each record as one hash on a Redis or
// Valkey server. It is safe for concurrent use; create it with [New].
type Store struct {
	client        goredis.UniversalClient
	prefix        string
	log           *slog.Logger
	replicas      int
	replicaWait   time.Duration
	maxResult     int
	compressAbove int
	expiryGrace   time.Duration
	watch         watcher // Watch's subscriber connections
}

var (
	_ store.Store       = (*Store)(nil)
	_ store.BatchGetter = (*Store)(nil)
	_ store.Admin       = (*Store)(nil)
	_ store.KeyLimiter  = (*Store)(nil)
)

// checkTimeout bounds the server check [New] makes.
const checkTimeout = 5 * time.Second

// New returns a store that sends its commands through client: a
// *redis.Client (standalone, or Sentinel through redis.NewFailoverClient), a
// *redis.ClusterClient, or any other redis.UniversalClient, with the TLS and
// ACL settings it was built with.
//
// Unless [WithoutServerCheck] is given, New asks the server (each master of
// a Cluster), in one pipeline bounded by five seconds:
//
//   - CONFIG GET maxmemory-policy, and logs a warning when it is not
//     noeviction: under any other policy Redis may evict a record when
//     memory runs out, and an evicted record lets a duplicate run its side
//     effect again. When CONFIG is not permitted (an ACL user without it, a
//     managed service that renames it) or the server does not answer, New
//     logs that it could not check.
//   - CONFIG GET proto-max-bulk-len, the largest value the server accepts,
//     which caps [WithMaxResultSize].
//   - SCRIPT LOAD of the store's scripts, so that the first calls need no
//     EVAL fallback.
//
// None of these failing makes New fail: it returns an error only for a nil
// client or invalid options.
func New(client goredis.UniversalClient, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, errors.New("redis: New: nil client")
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if cfg.replicas > 0 {
		switch client.(type) {
		case *goredis.Client, *goredis.ClusterClient:
		default:
			return nil, fmt.Errorf("redis: invalid options: WithReplicas needs a *redis.Client or *redis.ClusterClient, not a %T", client)
		}
	}
	s := &Store{
		client:        client,
		prefix:        cfg.prefix,
		log:           cfg.logger,
		replicas:      cfg.replicas,
		replicaWait:   cfg.replicaWait,
		compressAbove: cfg.compressAbove,
		expiryGrace:   cfg.expiryGrace,
	}
	serverMax := 0
	if !cfg.skipCheck {
		ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
		serverMax = s.checkServer(ctx)
		cancel()
	}
	s.maxResult = resultLimit(cfg.maxResult, serverMax)
	return s, nil
}

// resultLimit is the largest result the store stores: the option's, capped
// by the server's proto-max-bulk-len; either may be 0 for unknown.
func resultLimit(option, server int) int {
	limit := option
	if limit == 0 {
		limit = server
	}
	if limit == 0 {
		limit = defaultMaxResultSize
	}
	if server > 0 && server < limit {
		limit = server
	}
	return limit
}

// Name returns "redis", the store's name in telemetry (idemguard.store).
func (s *Store) Name() string { return "redis" }

// Prefix returns the prefix of the store's keys.
func (s *Store) Prefix() string { return s.prefix }

// maxRedisKey is the longest key Redis holds: 512 MB, its limit on a
// string.
const maxRedisKey = 512 << 20

// MaxKeyBytes implements [store.KeyLimiter]: Redis holds keys of up to
// 512 MB, the store's prefix included, so in practice every key fits.
func (s *Store) MaxKeyBytes() int { return maxRedisKey - len(s.prefix) }

// MaxResultSize returns the largest result, in bytes before compression,
// that Complete stores: [WithMaxResultSize], capped by the server's
// proto-max-bulk-len.
func (s *Store) MaxResultSize() int { return s.maxResult }

// checkServer makes New's checks on every master and returns the smallest
// proto-max-bulk-len it read, or 0.
func (s *Store) checkServer(ctx context.Context) int {
	var nodes []goredis.UniversalClient
	if cc, ok := s.client.(*goredis.ClusterClient); ok {
		ns, err := clusterMasters(ctx, cc)
		if err != nil {
			s.log.Warn("idemguard/redis: could not reach the Cluster to check maxmemory-policy; make sure it is noeviction on every master",
				slog.Any("error", err))
			return 0
		}
		for _, n := range ns {
			nodes = append(nodes, n)
		}
	} else {
		nodes = []goredis.UniversalClient{s.client}
	}
	limit := 0
	for _, n := range nodes {
		if l := s.checkNode(ctx, n); l > 0 && (limit == 0 || l < limit) {
			limit = l
		}
	}
	return limit
}

// checkNode checks one server (see New) and returns its proto-max-bulk-len,
// or 0 if it could not be read.
func (s *Store) checkNode(ctx context.Context, c goredis.UniversalClient) int {
	pipe := c.Pipeline()
	policy := pipe.ConfigGet(ctx, "maxmemory-policy")
	bulk := pipe.ConfigGet(ctx, "proto-max-bulk-len")
	loads := make([]*goredis.StringCmd, len(allSources))
	for i, src := range allSources {
		loads[i] = pipe.ScriptLoad(ctx, src)
	}
	_, _ = pipe.Exec(ctx)
	addr := nodeAddr(c)
	switch p, err := policy.Result(); {
	case unreachable(err):
		s.log.Warn("idemguard/redis: cannot reach the Redis server; guarded calls fail (guard.ErrStore) until it answers, and its maxmemory-policy is not checked",
			slog.String("server", addr), slog.Any("error", err))
		return 0
	case err != nil:
		s.log.Warn("idemguard/redis: could not check maxmemory-policy (CONFIG GET refused or failed); make sure it is noeviction, or Redis may evict records and let duplicates run again",
			slog.String("server", addr), slog.Any("error", err))
	case p["maxmemory-policy"] == "":
		s.log.Warn("idemguard/redis: the server does not report maxmemory-policy; make sure it is noeviction, or it may evict records and let duplicates run again",
			slog.String("server", addr))
	case p["maxmemory-policy"] != "noeviction":
		s.log.Warn("idemguard/redis: maxmemory-policy is not noeviction: when memory runs out the server may evict idempotency records, and an evicted record lets a duplicate run its side effect again; set maxmemory-policy noeviction",
			slog.String("server", addr), slog.String("maxmemory-policy", p["maxmemory-policy"]))
	}
	for _, l := range loads {
		if err := l.Err(); err != nil {
			s.log.Debug("idemguard/redis: SCRIPT LOAD failed; scripts will be sent with EVAL when the server lacks them",
				slog.String("server", addr), slog.Any("error", err))
			break
		}
	}
	if b, err := bulk.Result(); err == nil {
		if n, err := strconv.Atoi(b["proto-max-bulk-len"]); err == nil && n > 0 {
			return n
		}
	}
	return 0
}

// unreachable reports whether err says the server could not be reached
// (a failed dial, a timeout) rather than that it refused a command.
func unreachable(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded)
}

func nodeAddr(c goredis.UniversalClient) string {
	if cl, ok := c.(*goredis.Client); ok {
		return cl.Options().Addr
	}
	return fmt.Sprintf("%T", c)
}

// scriptArgs returns the argument list of script sc on the record key,
// with room for n more arguments: EVALSHA, the SHA-1, one key, the key.
func (s *Store) scriptArgs(sc *script, key string, n int) []any {
	args := make([]any, 4, 4+n)
	args[0], args[1], args[2], args[3] = "evalsha", sc.sha, "1", s.prefix+key
	return args
}

// scriptCmd returns the command that runs sc with args (from scriptArgs),
// with EVALSHA, or with EVAL when eval is true. Its reply is read as one
// string: the scripts return an integer or a string.
func scriptCmd(ctx context.Context, sc *script, args []any, eval bool) *goredis.StringCmd {
	if eval {
		args = slices.Clone(args)
		args[0], args[1] = "eval", sc.src
	}
	cmd := goredis.NewStringCmd(ctx, args...)
	cmd.SetFirstKeyPos(3)
	return cmd
}

// run runs script sc with args (from scriptArgs): EVALSHA, or EVAL if the
// server lacks the script. With [WithReplicas] and wait it sends WAIT in
// the same pipeline and returns what WAIT answered.
func (s *Store) run(ctx context.Context, sc *script, args []any, wait bool) (string, *waitResult, error) {
	if s.replicas == 0 || !wait {
		cmd := scriptCmd(ctx, sc, args, false)
		err := s.client.Process(ctx, cmd)
		if goredis.HasErrorPrefix(err, "NOSCRIPT") {
			cmd = scriptCmd(ctx, sc, args, true)
			err = s.client.Process(ctx, cmd)
		}
		return cmd.Val(), nil, err
	}
	var node goredis.UniversalClient = s.client
	if cc, ok := s.client.(*goredis.ClusterClient); ok {
		n, err := cc.MasterForKey(ctx, args[3].(string))
		if err != nil {
			return "", nil, err
		}
		node = n
	}
	for _, eval := range []bool{false, true} {
		pipe := node.Pipeline()
		cmd := scriptCmd(ctx, sc, args, eval)
		_ = pipe.Process(ctx, cmd)
		wait := pipe.Do(ctx, "wait", s.replicas, s.replicaWait.Milliseconds())
		_, _ = pipe.Exec(ctx)
		v, err := cmd.Result()
		if !eval && goredis.HasErrorPrefix(err, "NOSCRIPT") {
			continue
		}
		acked, werr := wait.Int64()
		return v, &waitResult{acked: acked, err: werr}, err
	}
	panic("unreachable")
}

// waitResult is WAIT's answer.
type waitResult struct {
	acked int64
	err   error
}

// replicated returns nil when the write that w follows reached enough
// replicas (or no replicas were asked for), else a *replicationError.
func (s *Store) replicated(w *waitResult) error {
	if w == nil || (w.err == nil && w.acked >= int64(s.replicas)) {
		return nil
	}
	return &replicationError{Want: s.replicas, Acked: int(w.acked), Timeout: s.replicaWait, Err: w.err}
}

// wrote reports whether a fenced script's reply, 1 or 0, says it wrote.
func wrote(v string) (bool, error) {
	switch v {
	case "1":
		return true, nil
	case "0":
		return false, nil
	}
	return false, fmt.Errorf("redis: a script returned %.40q, want 0 or 1", v)
}

// Acquire implements [store.Store] with one script (one round trip) that
// checks liveness against now, writes the claim and sets the key to expire
// (PEXPIREAT) at its ExpiresAt plus the expiry grace, or returns the live
// record in the same reply; a claim whose lease lapsed, replaced by the
// write, comes back in the same reply too. A key that holds another type
// than a hash, or a hash that cannot be read as a record, gives an error
// matching [store.ErrCorrupt] and stays in place.
func (s *Store) Acquire(ctx context.Context, rec *store.Record, now time.Time) (*store.Record, error) {
	const op = "Acquire"
	if err := ctx.Err(); err != nil {
		return nil, s.opErr(op, rec.Key, err)
	}
	if rec.Status != store.StatusInProgress {
		return nil, s.opErr(op, rec.Key, fmt.Errorf("redis: record %q has the status %v, want INPROGRESS", rec.Key, rec.Status))
	}
	// The header's second argument, the key's PEXPIREAT, depends on the
	// expiry encode computes: it is set afterwards.
	args, exp, err := s.encode(acquireScript, rec, true, epoch.FloorMillis(now), nil)
	if err != nil {
		return nil, s.opErr(op, rec.Key, err)
	}
	args[5] = s.pexpireAt(exp)
	v, w, err := s.run(ctx, acquireScript, args, true)
	if err != nil {
		return nil, s.opErr(op, rec.Key, err)
	}
	switch {
	case v == "1" || strings.HasPrefix(v, "L"):
		if err := s.replicated(w); err != nil {
			// Not durable: give the key back rather than hold a claim a
			// failover could forget while this caller does not run.
			rargs := append(s.scriptArgs(releaseScript, rec.Key, 1), rec.Token)
			if _, _, rerr := s.run(ctx, releaseScript, rargs, false); rerr != nil {
				err = errors.Join(err, fmt.Errorf("releasing the claim: %w", rerr))
			}
			return nil, s.opErr(op, rec.Key, err)
		}
		if v == "1" {
			return nil, nil
		}
		// A takeover: the script replaced a claim whose lease lapsed and
		// returned it. The claim is ours either way; a replaced record that
		// does not decode is only not reported.
		old, err := s.decodePacked(rec.Key, v)
		if err != nil {
			return nil, nil
		}
		return old, nil
	case strings.HasPrefix(v, "R"):
		old, err := s.decodePacked(rec.Key, v)
		if err != nil {
			return nil, s.opErr(op, rec.Key, err)
		}
		return old, store.ErrConflict
	case strings.HasPrefix(v, "T"):
		return nil, s.opErr(op, rec.Key, notHash(v[1:]))
	}
	return nil, s.opErr(op, rec.Key, fmt.Errorf("redis: the claim script returned %.40q", v))
}

// Complete implements [store.Store] with one script that replaces the
// record if it is held under rec.Token. A result over [Store.MaxResultSize]
// is refused before anything is sent.
func (s *Store) Complete(ctx context.Context, rec *store.Record) error {
	const op = "Complete"
	if err := ctx.Err(); err != nil {
		return s.opErr(op, rec.Key, err)
	}
	args, exp, err := s.encode(completeScript, rec, false, rec.Token, nil)
	if err != nil {
		return s.opErr(op, rec.Key, err)
	}
	args[5] = s.pexpireAt(exp)
	return s.fenced(ctx, op, completeScript, rec.Key, args)
}

// Extend implements [store.Store] with one script conditional on the token
// and on the record being in progress.
func (s *Store) Extend(ctx context.Context, key, token string, leaseExpiresAt, expiresAt time.Time) error {
	const op = "Extend"
	if err := ctx.Err(); err != nil {
		return s.opErr(op, key, err)
	}
	if err := epoch.Check("redis", "expiresAt", expiresAt); err != nil {
		return s.opErr(op, key, err)
	}
	var lease any = ""
	if !leaseExpiresAt.IsZero() {
		if err := epoch.Check("redis", "leaseExpiresAt", leaseExpiresAt); err != nil {
			return s.opErr(op, key, err)
		}
		lease = epoch.CeilMillis(leaseExpiresAt)
	}
	exp := epoch.CeilSeconds(expiresAt)
	return s.fenced(ctx, op, extendScript, key, append(s.scriptArgs(extendScript, key, 4), token, s.pexpireAt(exp), exp, lease))
}

// Release implements [store.Store] with one script that deletes the record
// if it is held under token.
func (s *Store) Release(ctx context.Context, key, token string) error {
	const op = "Release"
	if err := ctx.Err(); err != nil {
		return s.opErr(op, key, err)
	}
	// Without WAIT: a release that a failover forgets leaves a claim that
	// its lease ends.
	v, _, err := s.run(ctx, releaseScript, append(s.scriptArgs(releaseScript, key, 1), token), false)
	return s.fencedResult(op, key, v, nil, err)
}

// fenced runs one of the token-fenced scripts with args (from scriptArgs)
// and maps its reply.
func (s *Store) fenced(ctx context.Context, op string, sc *script, key string, args []any) error {
	v, w, err := s.run(ctx, sc, args, true)
	return s.fencedResult(op, key, v, w, err)
}

func (s *Store) fencedResult(op, key string, v string, w *waitResult, err error) error {
	if err != nil {
		return s.opErr(op, key, err)
	}
	ok, err := wrote(v)
	if err != nil {
		return s.opErr(op, key, err)
	}
	if !ok {
		return store.ErrTokenMismatch
	}
	if err := s.replicated(w); err != nil {
		return s.opErr(op, key, err)
	}
	return nil
}

// Get implements [store.Store] with one HGETALL. Redis reads are strongly
// consistent on the primary the client talks to.
func (s *Store) Get(ctx context.Context, key string) (*store.Record, error) {
	const op = "Get"
	if err := ctx.Err(); err != nil {
		return nil, s.opErr(op, key, err)
	}
	h, err := s.client.HGetAll(ctx, s.prefix+key).Result()
	return s.readResult(op, key, h, err)
}

// readResult maps the reply of an HGETALL of the record key.
func (s *Store) readResult(op, key string, h map[string]string, err error) (*store.Record, error) {
	switch {
	case isWrongType(err):
		return nil, s.opErr(op, key, &store.DecodeError{Reason: "the key is not a hash", Err: err})
	case err != nil:
		return nil, s.opErr(op, key, err)
	case len(h) == 0:
		return nil, store.ErrNotFound
	}
	rec, err := s.decodeMap(key, h)
	if err != nil {
		return nil, s.opErr(op, key, err)
	}
	return rec, nil
}
