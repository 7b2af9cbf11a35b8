// Package watchhub is what the stores' [store.Watcher] implementations
// share: a subscription that its first notification or a loss ends, and
// the open subscriptions of one server connection by key, which the
// store counts to know when a key's server subscription is needed.
package watchhub

import (
	"sync"

	"github.com/idemguard/idemguard/store"
)

// Sub is one watch of a key: a [store.Subscription].
type Sub struct {
	key  string
	done chan struct{}
	once sync.Once
	err  error // written before done is closed

	stopOnce sync.Once
	stop     func(*Sub)
}

var _ store.Subscription = (*Sub)(nil)

// Key returns the key watched.
func (s *Sub) Key() string { return s.key }

// Done implements [store.Subscription].
func (s *Sub) Done() <-chan struct{} { return s.done }

// Err implements [store.Subscription].
func (s *Sub) Err() error {
	select {
	case <-s.done:
		return s.err
	default:
		return nil
	}
}

// Stop implements [store.Subscription]: it runs the stop function the
// subscription was made with, once.
func (s *Sub) Stop() {
	s.stopOnce.Do(func() {
		if s.stop != nil {
			s.stop(s)
		}
	})
}

// fire ends the subscription with err (nil for a notification), once.
func (s *Sub) fire(err error) {
	s.once.Do(func() {
		s.err = err
		close(s.done)
	})
}

// Set holds the open subscriptions of one server connection by key: a
// subscription counts from [Set.Add] to its Stop, notified or not. The
// zero Set is ready to use; it is safe for concurrent use.
type Set struct {
	mu   sync.Mutex
	keys map[string]map[*Sub]struct{} // protected by mu
	n    int                          // protected by mu
	lost error                        // protected by mu; set by LoseAll
}

// Add registers a new subscription to key, which calls stop (if not nil)
// when it is stopped, and reports whether it is key's only open one. On a
// Set that [Set.LoseAll] ended, the subscription is ended with that loss
// at once.
func (s *Set) Add(key string, stop func(*Sub)) (sub *Sub, first bool) {
	sub = &Sub{key: key, done: make(chan struct{}), stop: stop}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.keys == nil {
		s.keys = make(map[string]map[*Sub]struct{})
	}
	m := s.keys[key]
	if m == nil {
		m = make(map[*Sub]struct{})
		s.keys[key] = m
	}
	m[sub] = struct{}{}
	s.n++
	if s.lost != nil {
		sub.fire(s.lost)
	}
	return sub, len(m) == 1
}

// Remove unregisters sub and reports whether it was its key's last open
// subscription, and how many remain in the Set. Removing a subscription
// that is not registered changes nothing and reports (false, Len()).
func (s *Set) Remove(sub *Sub) (last bool, left int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.keys[sub.key]
	if _, ok := m[sub]; !ok {
		return false, s.n
	}
	delete(m, sub)
	s.n--
	if len(m) == 0 {
		delete(s.keys, sub.key)
		return true, s.n
	}
	return false, s.n
}

// Notify ends every open subscription of key with a notification, and
// returns how many it ended.
func (s *Set) Notify(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	for sub := range s.keys[key] {
		sub.fire(nil)
	}
	return len(s.keys[key])
}

// Lose ends every open subscription of key with err.
func (s *Set) Lose(key string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for sub := range s.keys[key] {
		sub.fire(err)
	}
}

// LoseAll ends every open subscription with err, and every one added
// later too: the connection the Set served is gone.
func (s *Set) LoseAll(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lost == nil {
		s.lost = err
	}
	for _, m := range s.keys {
		for sub := range m {
			sub.fire(err)
		}
	}
}

// Len returns the number of open subscriptions.
func (s *Set) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

// Keys returns the keys with an open subscription, for a connection that
// subscribes again.
func (s *Set) Keys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]string, 0, len(s.keys))
	for k := range s.keys {
		keys = append(keys, k)
	}
	return keys
}
