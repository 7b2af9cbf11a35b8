package redis

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idemguard/idemguard/store"
)

const (
	// defaultListLimit is the page size of [Store.List] when the query
	// gives none; maxListLimit caps the size a query may ask for.
	defaultListLimit = 100
	maxListLimit     = 1000
	// maxScansPerPage bounds the SCAN calls of one List page, so that a
	// filter that matches little returns a short page (with a cursor)
	// rather than scanning the whole keyspace in one call.
	maxScansPerPage = 64
)

// listCursor is the state of a listing between pages: the node being
// scanned (an index into the sorted masters), its SCAN cursor, and the keys
// a SCAN returned beyond the last page's limit, which the next page reads
// first.
type listCursor struct {
	Node    int      `json:"n,omitempty"`
	Scan    uint64   `json:"c,omitempty"`
	Pending []string `json:"k,omitempty"`
}

func (c *listCursor) encode() string {
	b, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(s string) (*listCursor, error) {
	var c listCursor
	if s == "" {
		return &c, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err == nil {
		err = json.Unmarshal(b, &c)
	}
	if err != nil || c.Node < 0 {
		return nil, fmt.Errorf("redis: invalid list cursor %.40q", s)
	}
	return &c, nil
}

// List implements [store.Admin] with SCAN MATCH <prefix><q.Prefix>* TYPE
// hash on each master in turn (one for a standalone server), reading the
// keys it finds with pipelined HGETALLs. A page holds at most q.Limit
// records (default 100, at most 1,000); it may hold
// fewer while more remain when a status filter matches few records, since a
// page makes a bounded number of SCAN calls. Keys SCAN returns beyond the
// limit travel in the cursor, so none is skipped. As SCAN guarantees, a
// record present for the whole listing is listed at least once; one
// written or deleted meanwhile may or may not be, and a record may be
// listed twice if the server resizes its keyspace during the listing.
// Records are in no particular order (NewestFirst is false). A hash that
// cannot be read as a record is left out and logged.
func (s *Store) List(ctx context.Context, q store.Query) (store.Page, error) {
	const op = "List"
	var page store.Page
	if err := ctx.Err(); err != nil {
		return page, s.opErr(op, q.Prefix, err)
	}
	limit := q.Limit
	if limit <= 0 {
		limit = defaultListLimit
	}
	limit = min(limit, maxListLimit)
	cur, err := decodeCursor(q.Cursor)
	if err != nil {
		return page, s.opErr(op, q.Prefix, err)
	}
	nodes, err := s.nodes(ctx)
	if err != nil {
		return page, s.opErr(op, q.Prefix, err)
	}
	match := globEscape(s.prefix+q.Prefix) + "*"
	for scans := 0; ; {
		for len(cur.Pending) > 0 && len(page.Records) < limit {
			n := min(len(cur.Pending), limit-len(page.Records))
			recs, err := s.readListed(ctx, cur.Pending[:n], q)
			if err != nil {
				return store.Page{}, s.opErr(op, q.Prefix, err)
			}
			page.Records = append(page.Records, recs...)
			cur.Pending = cur.Pending[n:]
		}
		if len(page.Records) >= limit || cur.Node >= len(nodes) || scans >= maxScansPerPage {
			break
		}
		keys, next, err := nodes[cur.Node].ScanType(ctx, cur.Scan, match, int64(limit-len(page.Records)), "hash").Result()
		if err != nil {
			return store.Page{}, s.opErr(op, q.Prefix, err)
		}
		scans++
		for _, k := range keys {
			if strings.HasPrefix(k, s.prefix) { // always, but SCAN's match is the server's
				cur.Pending = append(cur.Pending, strings.TrimPrefix(k, s.prefix))
			}
		}
		if next == 0 {
			cur.Node, cur.Scan = cur.Node+1, 0
		} else {
			cur.Scan = next
		}
	}
	if cur.Node < len(nodes) || len(cur.Pending) > 0 {
		page.Next = cur.encode()
	}
	return page, nil
}

// readListed reads the records keys for List, keeping those that match q.
func (s *Store) readListed(ctx context.Context, keys []string, q store.Query) ([]*store.Record, error) {
	got := make(map[string]*store.Record, len(keys))
	corrupt, err := s.readMany(ctx, "List", keys, got)
	if err != nil {
		return nil, err
	}
	for _, err := range corrupt {
		s.log.Warn("idemguard/redis: List left out a record it cannot read", slog.Any("error", err))
	}
	recs := make([]*store.Record, 0, len(got))
	for _, k := range keys {
		if r := got[k]; r != nil && (q.Status == 0 || r.Status == q.Status) {
			recs = append(recs, r)
		}
	}
	return recs, nil
}

// Delete implements [store.Admin] with DEL, whatever the record holds. It
// returns [store.ErrNotFound] if the key does not exist.
func (s *Store) Delete(ctx context.Context, key string) error {
	const op = "Delete"
	if err := ctx.Err(); err != nil {
		return s.opErr(op, key, err)
	}
	n, err := s.client.Del(ctx, s.prefix+key).Result()
	if err != nil {
		return s.opErr(op, key, err)
	}
	if n == 0 {
		return store.ErrNotFound
	}
	return nil
}

// nodes returns the servers that hold the store's keys, in a stable order:
// the masters of a Cluster or the shards of a Ring sorted by address, else
// the client itself.
func (s *Store) nodes(ctx context.Context) ([]goredis.UniversalClient, error) {
	var (
		got []*goredis.Client
		err error
	)
	switch c := s.client.(type) {
	case *goredis.ClusterClient:
		got, err = collectNodes(ctx, c.ForEachMaster)
	case *goredis.Ring:
		got, err = collectNodes(ctx, c.ForEachShard)
	default:
		return []goredis.UniversalClient{s.client}, nil
	}
	if err != nil {
		return nil, err
	}
	if len(got) == 0 {
		return nil, errors.New("redis: the client knows no servers")
	}
	out := make([]goredis.UniversalClient, len(got))
	for i, c := range got {
		out[i] = c
	}
	return out, nil
}

// clusterMasters returns a client for each master of a Cluster, sorted by
// address.
func clusterMasters(ctx context.Context, cc *goredis.ClusterClient) ([]*goredis.Client, error) {
	return collectNodes(ctx, cc.ForEachMaster)
}

// collectNodes returns the clients forEach visits, sorted by address.
func collectNodes(ctx context.Context, forEach func(context.Context, func(context.Context, *goredis.Client) error) error) ([]*goredis.Client, error) {
	var (
		mu  sync.Mutex
		got []*goredis.Client
	)
	err := forEach(ctx, func(_ context.Context, c *goredis.Client) error {
		mu.Lock()
		got = append(got, c)
		mu.Unlock()
		return nil
	})
	sortByAddr(got)
	return got, err
}

func sortByAddr(cs []*goredis.Client) {
	sort.Slice(cs, func(i, j int) bool { return cs[i].Options().Addr < cs[j].Options().Addr })
}

// globEscape escapes the characters SCAN's MATCH pattern treats specially,
// so that the pattern matches s literally. It works byte by byte, as Redis
// matches: a key need not be UTF-8.
func globEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '*', '?', '[', ']', '\\', '^', '-':
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
