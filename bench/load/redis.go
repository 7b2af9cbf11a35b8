package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/internal/epoch"
	"github.com/idemguard/idemguard/internal/testing/redistest"
	"github.com/idemguard/idemguard/internal/testing/reqcount"
	"github.com/idemguard/idemguard/store"
	idemredis "github.com/idemguard/idemguard/store/redis"
)

// The Redis scenarios: the guard on store/redis against the raw go-redis
// client sending the store's scripts, EVALSHA of the same Lua with the same
// arguments. They run in the same rounds as the other stores' scenarios
// when a Redis address is given (-redis, default $IDEMGUARD_REDIS_ADDR), on
// one client whose hook (reqcount.Counter) counts round trips: a command,
// or a pipeline, is one; go-redis's connection set-up (HELLO, CLIENT
// SETINFO) is counted apart and left out.

// Redis scenario names. The _store scenarios call store/redis directly,
// without a guard, with records built by hand: between the raw and the
// guarded scenarios, they tell the store's share of the overhead from the
// guard's.
const (
	RedisMissHand            = "redis_miss_hand"
	RedisMissRaw             = "redis_miss_raw"
	RedisMissStore           = "redis_miss_store"
	RedisMissGuarded         = "redis_miss_guarded"
	RedisReplayHand          = "redis_replay_hand"
	RedisReplayRaw           = "redis_replay_raw"
	RedisReplayStore         = "redis_replay_store"
	RedisReplayGuarded       = "redis_replay_guarded"
	RedisReplayCachedGuarded = "redis_replay_cached_guarded"
)

// RedisScenarios lists the Redis scenarios.
var RedisScenarios = []string{RedisMissHand, RedisMissRaw, RedisMissStore, RedisMissGuarded,
	RedisReplayHand, RedisReplayRaw, RedisReplayStore, RedisReplayGuarded, RedisReplayCachedGuarded,
	RedisHTTPHandFirst, RedisHTTPGuardedFirst, RedisHTTPHandReplay, RedisHTTPGuardedReplay}

func isRedis(name string) bool { return slices.Contains(RedisScenarios, name) }

// redisBench is the Redis side of the benchmark.
type redisBench struct {
	guardedSet
	client  *goredis.Client
	counter *reqcount.Counter
	store   *idemredis.Store
	prefix  string // the store's key prefix, unique to the run

	// The SHA-1s of the store's claim and completion scripts, which the
	// raw baseline sends with EVALSHA (loaded once, before the clock).
	acquireSHA, completeSHA string
	grace                   int64 // the store's default expiry grace, ms

	http *httpSide // the HTTP scenarios
}

// newRedisBench connects, loads the scripts and builds the guards.
func newRedisBench(ctx context.Context, cfg Config, b *bench, body func(context.Context, Order) (Receipt, error)) (*redisBench, error) {
	runID := b.runID
	r := &redisBench{
		prefix: "idemguard-bench:" + runID + ":",
		grace:  expiryGrace.Milliseconds(),
		// A connection per caller, and a few for the lease keepers.
		client: goredis.NewClient(&goredis.Options{Addr: cfg.RedisAddr, PoolSize: 2*cfg.Concurrency + 4}),
	}
	r.counter = redistest.CountRequests(r.client)
	scripts := idemredis.Scripts()
	for _, sc := range []struct {
		sha *string
		src string
	}{{&r.acquireSHA, scripts["acquire"]}, {&r.completeSHA, scripts["complete"]}} {
		var err error
		if *sc.sha, err = r.client.ScriptLoad(ctx, sc.src).Result(); err != nil {
			r.client.Close()
			return nil, err
		}
	}
	var err error
	if r.store, err = idemredis.New(r.client, idemredis.WithPrefix(r.prefix)); err != nil {
		r.client.Close()
		return nil, err
	}
	if r.guardedSet, _, err = newGuardedSet(r.store, cfg.ReplayKeys, body); err != nil {
		r.client.Close()
		return nil, err
	}
	if r.http, err = newHTTPSide(r, b); err != nil {
		r.client.Close()
		return nil, err
	}
	return r, nil
}

// close deletes the run's keys and closes the client.
func (r *redisBench) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	defer r.client.Close()
	iter := r.client.Scan(ctx, 0, r.prefix+"*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		return err
	}
	for len(keys) > 0 {
		n := min(len(keys), 1000)
		if err := r.client.Unlink(ctx, keys[:n]...).Err(); err != nil {
			return err
		}
		keys = keys[n:]
	}
	return nil
}

// rawClaim sends the claim script for key under token, with the arguments
// store/redis sends: now (the guard's clock less its skew) in milliseconds,
// the key's PEXPIREAT, the in-progress record's expiration, token and lease
// end (times as int64s, which go-redis writes as decimal text), and the
// record's format. It returns the script's reply: 1 when it claimed, the
// record it met otherwise, packed in one string.
func (r *redisBench) rawClaim(ctx context.Context, key, token string, now time.Time) (any, error) {
	seen := now.Add(-adapt.DefaultClockSkew)
	exp := epoch.CeilSeconds(now.Add(max(rawTTL, rawLease)))
	return r.client.EvalSha(ctx, r.acquireSHA, []string{r.prefix + key},
		epoch.FloorMillis(seen), exp*1000+r.grace, exp, token, epoch.CeilMillis(now.Add(rawLease)),
		fieldFormat, int64(store.FormatVersion)).Result()
}

// rawMiss claims key, runs the function and completes the claim with its
// JSON result: the two scripts of a guarded first call.
func (r *redisBench) rawMiss(ctx context.Context, b *bench, key string, in Order) error {
	token := newToken()
	v, err := r.rawClaim(ctx, key, token, time.Now())
	if err != nil {
		return err
	}
	if n, ok := v.(int64); !ok || n != 1 {
		return fmt.Errorf("miss of %s: the key was taken", key)
	}
	b.bodyRuns.Add(1)
	data, err := json.Marshal(charge(in))
	if err != nil {
		return err
	}
	exp := epoch.CeilSeconds(time.Now().Add(rawTTL))
	v, err = r.client.EvalSha(ctx, r.completeSHA, []string{r.prefix + key},
		token, exp*1000+r.grace, exp, fieldFormat, int64(store.FormatVersion), fieldData, data).Result()
	if err != nil {
		return err
	}
	if n, ok := v.(int64); !ok || n != 1 {
		return fmt.Errorf("completion of %s: the claim was lost", key)
	}
	return nil
}

// rawReplay sends the claim for a completed key, expects the completed
// record back, and decodes the stored result from its data field.
func (r *redisBench) rawReplay(ctx context.Context, key string) error {
	v, err := r.rawClaim(ctx, key, newToken(), time.Now())
	if err != nil {
		return err
	}
	packed, ok := v.(string)
	if !ok || !strings.HasPrefix(packed, "R") {
		return fmt.Errorf("replay of %s: the claim succeeded; the record was missing", key)
	}
	f, err := unpack(packed[1:])
	if err != nil {
		return fmt.Errorf("replay of %s: %w", key, err)
	}
	if f[fieldStatus] != "COMPLETED" || f[fieldData] == "" {
		return errors.New("replay of " + key + ": the record is not a completed one with a result")
	}
	var rc Receipt
	return json.Unmarshal([]byte(f[fieldData]), &rc)
}

// The store's layout (store/redis's package documentation): the fields of
// a record's hash, and how long after a record's expiry the server deletes
// its key by default. The load benchmark's tests compare the commands this
// baseline sends with the store's, field names and all.
const (
	fieldStatus     = "status"
	fieldExpiry     = "expiration"
	fieldLease      = "in_progress_expiration"
	fieldData       = "data"
	fieldValidation = "validation"
	fieldToken      = "token"
	fieldResultKind = "result_kind"
	fieldEncoding   = "data_encoding"
	fieldFormat     = "format"

	expiryGrace = time.Minute
)

// packed are the fields of the record the claim script returns, in order
// (store/redis's scripts.go).
var packed = [...]string{fieldStatus, fieldExpiry, fieldLease, fieldToken,
	fieldValidation, fieldResultKind, fieldEncoding, fieldData, fieldFormat}

// unpack reads the fields of a record the claim script returns, after its
// "R": each "-" when absent, or its length, ":" and its value. It returns
// them by field name.
func unpack(s string) (map[string]string, error) {
	f := make(map[string]string, 4)
	for _, name := range packed {
		switch {
		case s == "":
			return nil, errors.New("a truncated record")
		case s[0] == '-':
			s = s[1:]
			continue
		}
		i := strings.IndexByte(s, ':')
		if i < 0 {
			return nil, errors.New("a malformed record")
		}
		n, err := strconv.Atoi(s[:i])
		if err != nil || n > len(s)-i-1 {
			return nil, errors.New("a malformed record")
		}
		f[name], s = s[i+1:i+1+n], s[i+1+n:]
	}
	return f, nil
}
