//go:build !idemguard_before

package main

import (
	"context"
	"sync/atomic"

	"github.com/idemguard/idemguard/store"
)

// countCalls counts the calls to s, a watch included where s can watch.
// A tree without store.Watcher builds this benchmark with the tag
// idemguard_before (count_before.go).
func countCalls(s store.Store, n *atomic.Int64) store.Store {
	c := counted{Store: s, n: n}
	if w, ok := s.(store.Watcher); ok {
		return countedWatcher{counted: c, w: w}
	}
	return c
}

// countedWatcher is a counted store that watches.
type countedWatcher struct {
	counted
	w store.Watcher
}

func (c countedWatcher) Watch(ctx context.Context, key string) (store.Subscription, error) {
	c.n.Add(1)
	return c.w.Watch(ctx, key)
}
