package guard

import (
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/idemguard/idemguard/store"
)

// cache is the local cache of completed records (WithCache): each is
// served until its expiry or for maxAge after it was read from the store,
// whichever comes first, so that a record an operator deleted stops being
// replayed within maxAge.
type cache struct {
	lru    *lru.Cache[string, cached]
	maxAge time.Duration // 0: until the record expires
}

type cached struct {
	rec   *store.Record
	until time.Time
}

func newCache(size int, maxAge time.Duration) *cache {
	l, _ := lru.New[string, cached](size)
	return &cache{lru: l, maxAge: maxAge}
}

// get returns the record cached for key if it may still be served at now,
// and drops it if not.
func (c *cache) get(key string, now time.Time) (*store.Record, bool) {
	e, ok := c.lru.Get(key)
	if !ok {
		return nil, false
	}
	if !now.Before(e.until) || !e.rec.Live(now) {
		c.lru.Remove(key)
		return nil, false
	}
	return e.rec, true
}

// put caches a completed record read from (or written to) the store at now.
func (c *cache) put(rec *store.Record, now time.Time) {
	until := rec.ExpiresAt
	if c.maxAge > 0 && now.Add(c.maxAge).Before(until) {
		until = now.Add(c.maxAge)
	}
	c.lru.Add(rec.Key, cached{rec: rec, until: until})
}
