package guard_test

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/memory"
)

// countingStore counts calls per method and can inject failures.
type countingStore struct {
	store.Store
	acquires, completes, extends, releases, gets atomic.Int64

	mu           sync.Mutex
	failExtend   error                   // returned by Extend while set
	failComplete func(n int64) error     // returned by the n-th Complete (1-based) if non-nil
	tooLarge     int                     // Complete refuses results longer than this (0: no limit)
	onAcquire    func(rec *store.Record) // called before each Acquire
}

func newCounting(s store.Store) *countingStore { return &countingStore{Store: s} }

func (c *countingStore) Acquire(ctx context.Context, rec *store.Record, now time.Time) (*store.Record, error) {
	c.acquires.Add(1)
	c.mu.Lock()
	hook := c.onAcquire
	c.mu.Unlock()
	if hook != nil {
		hook(rec)
	}
	return c.Store.Acquire(ctx, rec, now)
}

func (c *countingStore) Complete(ctx context.Context, rec *store.Record) error {
	n := c.completes.Add(1)
	c.mu.Lock()
	fail, limit := c.failComplete, c.tooLarge
	c.mu.Unlock()
	if fail != nil {
		if err := fail(n); err != nil {
			return err
		}
	}
	if limit > 0 && len(rec.Result) > limit {
		return store.ErrTooLarge
	}
	return c.Store.Complete(ctx, rec)
}

func (c *countingStore) Extend(ctx context.Context, key, token string, lease, exp time.Time) error {
	c.extends.Add(1)
	c.mu.Lock()
	fail := c.failExtend
	c.mu.Unlock()
	if fail != nil {
		return fail
	}
	return c.Store.Extend(ctx, key, token, lease, exp)
}

func (c *countingStore) Release(ctx context.Context, key, token string) error {
	c.releases.Add(1)
	return c.Store.Release(ctx, key, token)
}

func (c *countingStore) Get(ctx context.Context, key string) (*store.Record, error) {
	c.gets.Add(1)
	return c.Store.Get(ctx, key)
}

func (c *countingStore) set(f func(c *countingStore)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f(c)
}

// fakeClock adapts clockwork's fake clock to adapt.Clock.
type fakeClock struct{ *clockwork.FakeClock }

func (c fakeClock) AfterFunc(d time.Duration, f func()) func() bool {
	return c.FakeClock.AfterFunc(d, f).Stop
}

func newFakeClock() fakeClock {
	return fakeClock{clockwork.NewFakeClockAt(time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC))}
}

func mustGuard(t testing.TB, s store.Store, opts ...guard.Option) *guard.Guard {
	t.Helper()
	// Quiet by default: the tests provoke the warnings on purpose.
	opts = append([]guard.Option{guard.WithLogger(slog.New(slog.DiscardHandler))}, opts...)
	g, err := guard.New(s, opts...)
	if err != nil {
		t.Fatalf("guard.New: %v", err)
	}
	return g
}

func newMemory() (*memory.Store, *countingStore) {
	m := memory.New()
	return m, newCounting(m)
}

// waitFor polls cond until it holds or a few seconds pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

type order struct {
	ID     string `json:"id"`
	Amount int    `json:"amount"`
}

type charge struct {
	ChargeID string `json:"charge_id"`
	Amount   int    `json:"amount"`
}

// memoryStore is a memory store that can list its records.
type memoryStore struct {
	*memory.Store
	mu   sync.Mutex
	keys map[string]bool
}

func newMemoryStore() *memoryStore { return &memoryStore{Store: memory.New(), keys: map[string]bool{}} }

func (m *memoryStore) Acquire(ctx context.Context, rec *store.Record, now time.Time) (*store.Record, error) {
	m.mu.Lock()
	m.keys[rec.Key] = true
	m.mu.Unlock()
	return m.Store.Acquire(ctx, rec, now)
}

func (m *memoryStore) each(f func(store.Record)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k := range m.keys {
		if r, err := m.Store.Get(context.Background(), k); err == nil {
			f(*r)
		}
	}
}
