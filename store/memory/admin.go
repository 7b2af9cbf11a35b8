package memory

import (
	"context"
	"slices"
	"strings"

	"github.com/idemguard/idemguard/store"
)

var _ store.Admin = (*Store)(nil)

// defaultLimit is the page size of a List without a Limit.
const defaultLimit = 100

// List implements [store.Admin]: the records whose key starts with
// q.Prefix, in key order, a page at a time; the cursor is the last key of
// the page.
func (s *Store) List(ctx context.Context, q store.Query) (store.Page, error) {
	if err := ctx.Err(); err != nil {
		return store.Page{}, err
	}
	limit := q.Limit
	if limit <= 0 {
		limit = defaultLimit
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var keys []string
	for k, r := range s.records {
		if strings.HasPrefix(k, q.Prefix) && k > q.Cursor && (q.Status == 0 || r.Status == q.Status) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var p store.Page
	for _, k := range keys {
		if len(p.Records) == limit {
			p.Next = p.Records[len(p.Records)-1].Key
			break
		}
		r := s.records[k]
		p.Records = append(p.Records, &r)
	}
	return p, nil
}

// Delete implements [store.Admin]: it deletes the record key whatever it
// holds, or returns [store.ErrNotFound].
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.records[key]; !ok {
		return store.ErrNotFound
	}
	delete(s.records, key)
	return nil
}
