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

// watchGetter is store.WatchGetter, named here so that the benchmark
// builds on a tree that has Watcher and not WatchGetter.
type watchGetter interface {
	WatchGet(ctx context.Context, key string) (store.Subscription, *store.Record, error)
}

// warmWatch sets up s's subscriber connection, as a process that has
// watched before has it: a watch (with its read, where the store reads
// with it) of a key that has no record, stopped at once. Its round trips
// are left out of the figures, as the pool's connections are.
func warmWatch(ctx context.Context, s store.Store, key string) error {
	if w, ok := s.(watchGetter); ok {
		sub, _, err := w.WatchGet(ctx, key)
		if sub == nil {
			return err
		}
		sub.Stop()
		return nil
	}
	if w, ok := s.(store.Watcher); ok {
		sub, err := w.Watch(ctx, key)
		if err != nil {
			return err
		}
		sub.Stop()
	}
	return nil
}
