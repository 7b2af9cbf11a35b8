// Package reqcount counts the round trips a store client sends, for the
// tests that hold the guard to its request floor and for the load
// benchmark. Each store's test harness feeds one [Counter] from its
// client's hook (a DynamoDB middleware, a go-redis hook, a pgx tracer).
package reqcount

import (
	"sort"
	"strconv"
	"strings"
	"sync"
)

// Counter counts round trips and the operations they carry: one round trip
// is one request or one pipeline of commands sent together. Round trips a
// client makes by itself to set a connection up are counted apart
// ([Counter.Setup]), since they are paid once per connection, not per
// call. The zero Counter is ready to use and safe for concurrent use.
type Counter struct {
	mu    sync.Mutex
	trips int            // protected by mu
	setup int            // protected by mu
	ops   map[string]int // protected by mu
}

// Trip counts one round trip carrying ops (an operation name per command
// or statement; none for a round trip without one).
func (c *Counter) Trip(ops ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.trips++
	if len(ops) == 0 {
		return
	}
	if c.ops == nil {
		c.ops = make(map[string]int)
	}
	for _, op := range ops {
		c.ops[op]++
	}
}

// SetupTrip counts one round trip of connection set-up, which Total leaves
// out.
func (c *Counter) SetupTrip() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.setup++
}

// Total returns the round trips counted, without connection set-up.
func (c *Counter) Total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.trips
}

// Setup returns the round trips of connection set-up.
func (c *Counter) Setup() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.setup
}

// Get returns how many times operation op was sent.
func (c *Counter) Get(op string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ops[op]
}

// Snapshot returns a copy of the counts by operation.
func (c *Counter) Snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := make(map[string]int, len(c.ops))
	for op, n := range c.ops {
		m[op] = n
	}
	return m
}

// Reset sets every count to zero.
func (c *Counter) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.trips, c.setup, c.ops = 0, 0, nil
}

// String lists the round trips and the operations, for failure messages:
// "2 round trips: PutItem=1 UpdateItem=1", "no round trips".
func (c *Counter) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.trips == 0 {
		return "no round trips"
	}
	names := make([]string, 0, len(c.ops))
	for op := range c.ops {
		names = append(names, op)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString(strconv.Itoa(c.trips))
	if c.trips == 1 {
		b.WriteString(" round trip")
	} else {
		b.WriteString(" round trips")
	}
	for i, op := range names {
		if i == 0 {
			b.WriteString(": ")
		} else {
			b.WriteByte(' ')
		}
		b.WriteString(op)
		b.WriteByte('=')
		b.WriteString(strconv.Itoa(c.ops[op]))
	}
	return b.String()
}
