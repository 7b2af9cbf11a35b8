package memory

import (
	"context"

	"github.com/idemguard/idemguard/store"
)

var _ store.BatchGetter = (*Store)(nil)

// GetMany implements [store.BatchGetter]: it reads every key under one lock,
// so the records form one consistent snapshot.
func (s *Store) GetMany(ctx context.Context, keys []string) (map[string]*store.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := make(map[string]*store.Record, len(keys))
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range keys {
		if _, seen := out[k]; seen {
			continue
		}
		if r, ok := s.records[k]; ok {
			out[k] = &r
		}
	}
	return out, nil
}
