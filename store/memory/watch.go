package memory

import (
	"context"

	"github.com/idemguard/idemguard/internal/watchhub"
	"github.com/idemguard/idemguard/store"
)

var _ store.Watcher = (*Store)(nil)

// Watch implements [store.Watcher] in process: Complete and Release end
// the key's watches once the record is written, under the store's lock.
// A watch is in effect as soon as Watch returns, and is never lost.
func (s *Store) Watch(ctx context.Context, key string) (store.Subscription, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	sub, _ := s.watch.Add(key, s.unwatch)
	return sub, nil
}

func (s *Store) unwatch(sub *watchhub.Sub) { s.watch.Remove(sub) }
