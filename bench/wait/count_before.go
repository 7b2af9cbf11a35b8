//go:build idemguard_before

package main

import (
	"context"
	"sync/atomic"

	"github.com/idemguard/idemguard/store"
)

// countCalls counts the calls to s, on a tree that has no store.Watcher.
func countCalls(s store.Store, n *atomic.Int64) store.Store { return counted{Store: s, n: n} }

// warmWatch does nothing on a tree that has no store.Watcher.
func warmWatch(context.Context, store.Store, string) error { return nil }
