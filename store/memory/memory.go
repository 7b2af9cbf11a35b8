// Package memory is an in-process [store.Store]: a map guarded by a mutex.
//
// It is correct under concurrency and passes the storetest conformance suite,
// so it is the store for tests, examples and single-process programs. It
// implements [store.BatchGetter], so batches replay their completed items
// with one lookup, [store.Admin], for tests that play an operator, and
// [store.Watcher], whose watches Complete and Release end in process. It
// keeps records only for the life of the process and shares them only between
// guards that use the same *Store. It checks expiry lazily against the time
// the guard passes in, so it starts no goroutine and needs no Close; expired
// records are dropped when the key is next acquired or by [Store.Sweep].
package memory

import (
	"context"
	"sync"
	"time"

	"github.com/idemguard/idemguard/internal/watchhub"
	"github.com/idemguard/idemguard/store"
)

// Store is an in-process [store.Store]. The zero value is ready to use.
type Store struct {
	mu      sync.Mutex
	records map[string]store.Record // protected by mu
	watch   watchhub.Set            // Watch's subscriptions
}

var (
	_ store.Store      = (*Store)(nil)
	_ store.KeyLimiter = (*Store)(nil)
)

// New returns an empty Store.
func New() *Store { return &Store{} }

// Acquire implements [store.Store].
func (s *Store) Acquire(ctx context.Context, rec *store.Record, now time.Time) (*store.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old, ok := s.records[rec.Key]
	if ok && old.Live(now) {
		return &old, store.ErrConflict
	}
	if s.records == nil {
		s.records = make(map[string]store.Record)
	}
	s.records[rec.Key] = clone(rec)
	if ok && old.Status == store.StatusInProgress && now.Before(old.ExpiresAt) {
		// Not live, not expired: a claim whose lease lapsed, taken over.
		return &old, nil
	}
	return nil, nil
}

// Complete implements [store.Store].
func (s *Store) Complete(ctx context.Context, rec *store.Record) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.records[rec.Key]; !ok || old.Token != rec.Token {
		return store.ErrTokenMismatch
	}
	c := clone(rec)
	c.Status = store.StatusCompleted
	s.records[rec.Key] = c
	s.watch.Notify(rec.Key)
	return nil
}

// Extend implements [store.Store].
func (s *Store) Extend(ctx context.Context, key, token string, leaseExpiresAt, expiresAt time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old, ok := s.records[key]
	if !ok || old.Token != token || old.Status != store.StatusInProgress {
		return store.ErrTokenMismatch
	}
	old.LeaseExpiresAt = leaseExpiresAt
	old.ExpiresAt = expiresAt
	s.records[key] = old
	return nil
}

// Release implements [store.Store].
func (s *Store) Release(ctx context.Context, key, token string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.records[key]; !ok || old.Token != token || old.Status != store.StatusInProgress {
		return store.ErrTokenMismatch
	}
	delete(s.records, key)
	s.watch.Notify(key)
	return nil
}

// Get implements [store.Store].
func (s *Store) Get(ctx context.Context, key string) (*store.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old, ok := s.records[key]
	if !ok {
		return nil, store.ErrNotFound
	}
	return &old, nil
}

// Len returns the number of records held, live or not.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.records)
}

// Sweep deletes the records that are expired at now and returns how many it
// deleted. Long-running programs with many distinct keys call it now and then
// to bound memory.
func (s *Store) Sweep(now time.Time) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for k, r := range s.records {
		if !now.Before(r.ExpiresAt) {
			delete(s.records, k)
			n++
		}
	}
	return n
}

// clone copies rec, including its Result bytes, so the caller's slice may be
// reused. Records handed out share the stored Result, which the store never
// modifies in place.
func clone(rec *store.Record) store.Record {
	c := *rec
	if rec.Result != nil {
		c.Result = append([]byte(nil), rec.Result...)
	}
	return c
}

// Name returns "memory", the store's name in telemetry.
func (s *Store) Name() string { return "memory" }

// MaxKeyBytes implements [store.KeyLimiter]: 0, the store holds keys of
// any length.
func (s *Store) MaxKeyBytes() int { return 0 }
