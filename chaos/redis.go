package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idemguard/idemguard/store"
)

// The Redis scenario (-store redis): the DynamoDB scenario's keyed and
// plain bodies, workflows, kills and pauses, with the idempotency records
// in store/redis on a redis-server reached through [faultproxy.Redis], and the
// ledger on the same server reached directly, one string key per entry.

// StoreRedis is the value of Config.Store for the Redis scenario.
const StoreRedis = "redis"

// redisLedger is the ledger as Redis keys: prefix + the entry's id, holding
// the entry as JSON, written only if absent (SET NX) and never changed.
type redisLedger struct {
	client goredis.UniversalClient
	prefix string
}

// Put writes e, refusing to overwrite (ids are unique by construction; a
// clash would be a bug in the suite).
func (l *redisLedger) Put(ctx context.Context, e *Entry) error {
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	ok, err := l.client.SetNX(ctx, l.prefix+e.ID, b, 0).Result()
	if err == nil && !ok {
		err = fmt.Errorf("chaos: ledger entry %s exists", e.ID)
	}
	return err
}

// PutOnce writes e unless an entry with its id exists; then it returns
// that entry and false. SET NX GET does both in one atomic command.
func (l *redisLedger) PutOnce(ctx context.Context, e *Entry) (Entry, bool, error) {
	b, err := json.Marshal(e)
	if err != nil {
		return Entry{}, false, err
	}
	old, err := l.client.SetArgs(ctx, l.prefix+e.ID, b, goredis.SetArgs{Mode: "NX", Get: true}).Result()
	if errors.Is(err, goredis.Nil) {
		return *e, true, nil
	}
	if err != nil {
		return Entry{}, false, err
	}
	var got Entry
	if err := json.Unmarshal([]byte(old), &got); err != nil {
		return Entry{}, false, fmt.Errorf("chaos: ledger entry %s: %w", e.ID, err)
	}
	return got, false, nil
}

// Scan reads every entry.
func (l *redisLedger) Scan(ctx context.Context) ([]Entry, error) {
	keys, err := scanKeys(ctx, l.client, l.prefix)
	if err != nil {
		return nil, fmt.Errorf("chaos: reading the ledger: %w", err)
	}
	var out []Entry
	for len(keys) > 0 {
		n := min(len(keys), 1000)
		vals, err := l.client.MGet(ctx, keys[:n]...).Result()
		if err != nil {
			return nil, fmt.Errorf("chaos: reading the ledger: %w", err)
		}
		for i, v := range vals {
			s, ok := v.(string)
			var e Entry
			if !ok || json.Unmarshal([]byte(s), &e) != nil || e.ID == "" || e.Kind == "" || e.Op == "" {
				return nil, fmt.Errorf("chaos: ledger entry %s is unreadable: %v", keys[i], v)
			}
			out = append(out, e)
		}
		keys = keys[n:]
	}
	return out, nil
}

// scanKeys returns every key that starts with prefix (which holds no glob
// characters).
func scanKeys(ctx context.Context, c goredis.UniversalClient, prefix string) ([]string, error) {
	var keys []string
	iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	return keys, iter.Err()
}

// deleteKeys deletes every key that starts with prefix.
func deleteKeys(ctx context.Context, c goredis.UniversalClient, prefix string) error {
	keys, err := scanKeys(ctx, c, prefix)
	for err == nil && len(keys) > 0 {
		n := min(len(keys), 1000)
		err = c.Unlink(ctx, keys[:n]...).Err()
		keys = keys[n:]
	}
	return err
}

// scanStoreRecords reads every idempotency record through the store's
// List, noting the ones it cannot read.
func scanStoreRecords(ctx context.Context, s store.Admin) (map[string]*store.Record, []string, error) {
	recs := map[string]*store.Record{}
	var corrupt []string
	q := store.Query{Limit: 1000}
	for pages := 0; ; pages++ {
		if pages > 100000 {
			return nil, nil, errors.New("chaos: listing the idempotency records did not end")
		}
		page, err := s.List(ctx, q)
		if err != nil && !errors.Is(err, store.ErrCorrupt) {
			return nil, nil, fmt.Errorf("chaos: listing the idempotency records: %w", err)
		}
		if err != nil {
			corrupt = append(corrupt, err.Error())
		}
		for _, rec := range page.Records {
			recs[rec.Key] = rec
		}
		if page.Next == "" {
			return recs, corrupt, nil
		}
		q.Cursor = page.Next
	}
}

// redisClient returns a client for the Redis server at addr with a pool
// of poolSize connections and, if retry, go-redis's default retries (up to
// three of a command that met a reset, EOF, LOADING or the like); without
// it, none.
func redisClient(addr string, poolSize int, retry bool) *goredis.Client {
	o := &goredis.Options{Addr: addr, PoolSize: poolSize, DialTimeout: 5 * time.Second}
	if !retry {
		o.MaxRetries = -1
	}
	return goredis.NewClient(o)
}
