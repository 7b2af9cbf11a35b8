package guard

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// A store call the guard makes: its context and its measure. Every store
// call goes through g.timed, the one place that measures and traces it.

// storeContext is the context of a store call the guard makes on its own
// behalf (completion, release, lease extension): the values of the caller's
// context, not its cancellation, and a deadline.
//
// It is context.WithDeadline(context.WithoutCancel(parent), deadline), made
// lazily: the timer behind a deadline costs more than a whole call to an
// in-process store, so it is only made once the store asks for Done (or
// asks Err after the deadline). From then on every method is the standard
// context's, so contexts derived from it, and context.Cause, behave as
// usual.
type storeContext struct {
	parent   context.Context // the caller's context: its values, not its cancellation
	deadline time.Time

	std      atomic.Pointer[context.Context] // the standard context, once made
	mu       sync.Mutex                      // serialises making it
	stop     context.CancelFunc
	canceled bool
}

// newStoreContext returns a storeContext with the values of parent, not
// its cancellation, ending timeout from now; release it with cancel.
func newStoreContext(parent context.Context, timeout time.Duration) *storeContext {
	return &storeContext{parent: parent, deadline: time.Now().Add(timeout)}
}

// standard returns the standard context, making it if need be.
func (c *storeContext) standard() context.Context {
	if p := c.std.Load(); p != nil {
		return *p
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.std.Load(); p != nil {
		return *p
	}
	ctx, stop := context.WithDeadline(context.WithoutCancel(c.parent), c.deadline)
	if c.canceled {
		stop()
	}
	c.stop = stop
	c.std.Store(&ctx)
	return ctx
}

// cancel releases the context (its timer, if it was made).
func (c *storeContext) cancel() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.canceled = true
	if c.stop != nil {
		c.stop()
	}
}

// Deadline implements context.Context.
func (c *storeContext) Deadline() (time.Time, bool) { return c.deadline, true }

// Done implements context.Context.
func (c *storeContext) Done() <-chan struct{} { return c.standard().Done() }

// Err implements context.Context.
func (c *storeContext) Err() error {
	if p := c.std.Load(); p != nil {
		return (*p).Err()
	}
	c.mu.Lock()
	canceled := c.canceled
	c.mu.Unlock()
	if canceled || !time.Now().Before(c.deadline) {
		return c.standard().Err()
	}
	return nil
}

// Value implements context.Context.
func (c *storeContext) Value(key any) any {
	if p := c.std.Load(); p != nil {
		return (*p).Value(key)
	}
	return c.parent.Value(key)
}

// storeCallTimeout bounds each store call made outside the caller's context
// (completion retries, release, lease extension).
const storeCallTimeout = 5 * time.Second

// timed runs one store call, f, measuring it as operation op.
func (g *Guard) timed(ctx context.Context, op string, f func() error) error {
	if !g.tel.Metering() {
		return f()
	}
	start := time.Now()
	err := f()
	g.tel.StoreDuration.Record(ctx, time.Since(start).Seconds(), g.tel.Operation(op))
	return err
}
