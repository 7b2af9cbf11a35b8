package watermillguard

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/internal/telemetry"
)

// A delivery whose message another consumer holds (its claim is in
// progress) waits in the handler, by default, until the holder completes
// (the delivery replays its outcome), fails (the delivery runs the
// handler), or its lease can have lapsed (the holder died: the delivery
// takes the claim over and runs the handler): it is not handed back to the
// broker, which on most brokers (Redis Streams, Kafka, Go Channel, AMQP)
// delivers a nacked message again at once or after a short pause, to the
// same consumer, in a loop that holds the subscription's other messages
// back just as long. The wait polls
// the store with backoff and ends past the holder's lease end plus the
// guard's clock skew, so it is bounded by a lease; a holder in this process
// is waited for without polling, and its run is shared.

// waitMargin is added to the end of a wait, past the holder's lease end and
// the guard's clock skew, so that the last claim of the wait comes after
// the lease has lapsed on the guard's clock.
const waitMargin = 500 * time.Millisecond

// unsetMode is the wait budget of a probe default that tells whether the
// guard or the user chose what a call does when another holds the key.
const unsetMode = time.Duration(1<<63 - 1)

// logLimit is how many keys the middleware remembers having logged; past
// it, the keys whose holder's lease has lapsed are forgotten, and while
// that many are held at once, a newly held one is not logged.
const logLimit = 4096

// inProgress is what a middleware does with a message in progress
// elsewhere.
type inProgress struct {
	wait  bool          // wait for the holder (neither guard.WithWait(0) nor guard.WithWait given)
	limit time.Duration // the longest wait: a lease, the clock skew and waitMargin
	lease time.Duration // the lease of the middleware's claims, to rate-limit logs

	mu     sync.Mutex
	logged map[string]time.Time // key -> until when a new line is not logged; protected by mu
}

// initWait sets what m does with a message in progress elsewhere, from the
// settings s of its calls (whose options are check).
func (m *middleware) initWait(s adapt.CallSettings, check []guard.CallOption) error {
	probe, err := adapt.Settings(m.g, append([]guard.CallOption{adapt.WithDefaults(guard.WithWait(unsetMode))}, check...)...)
	if err != nil {
		return err
	}
	m.wait = probe.Mode == adapt.Wait && probe.WaitBudget == unsetMode
	m.lease = s.Lease
	if m.lease == 0 { // guard.WithLease(0): until the context's deadline
		m.lease = adapt.DefaultLease
	}
	m.limit = m.lease + m.g.ClockSkew() + waitMargin
	return nil
}

// execute makes the guarded call of a delivery of msg. By default, when
// another caller holds the key, it claims again in Wait mode, for as long
// as the holder's lease can take to lapse.
func (m *middleware) execute(ctx context.Context, scope string, msg *message.Message, fn func(context.Context) ([]*message.Message, error), call []guard.CallOption) ([]*message.Message, guard.Outcome, error) {
	if m.wait {
		call = append(call, guard.WithWait(0))
	}
	produced, out, err := adapt.Execute(ctx, m.g, scope, payload(msg.Payload), fn, call...)
	busy := heldElsewhere(out, err)
	if busy == nil {
		return produced, out, err
	}
	m.logHeld(ctx, scope, msg, busy, m.wait)
	if !m.wait {
		return produced, out, err
	}
	call[len(call)-1] = guard.WithWait(m.budget(busy))
	produced, out, err = adapt.Execute(ctx, m.g, scope, payload(msg.Payload), fn, call...)
	if busy := heldElsewhere(out, err); busy != nil {
		m.logHeld(ctx, scope, msg, busy, false)
	}
	return produced, out, err
}

// heldElsewhere returns the guard's refusal of a call whose key another
// caller holds; nil for any other outcome (a handler's own error that
// wraps an InProgressError included: the handler ran).
func heldElsewhere(out guard.Outcome, err error) *adapt.InProgressError {
	var busy *adapt.InProgressError
	if out != 0 || !errors.As(err, &busy) {
		return nil
	}
	return busy
}

// budget is how long to wait for the holder that busy reports: until its
// lease can have lapsed on the guard's clock, at most a lease of this
// middleware's (a holder with a longer lease is met again on the
// redelivery).
func (m *middleware) budget(busy *adapt.InProgressError) time.Duration {
	d := m.limit
	if !busy.LeaseExpiresAt.IsZero() {
		d = min(busy.LeaseExpiresAt.Sub(m.g.Now())+m.g.ClockSkew()+waitMargin, d)
	}
	return max(d, waitMargin)
}

// logHeld logs, at info level, that a delivery of msg found its key held by
// another caller, and that it waits for it or is nacked: once per key until
// the holder's lease can have lapsed, however often the message is
// delivered meanwhile.
func (m *middleware) logHeld(ctx context.Context, scope string, msg *message.Message, busy *adapt.InProgressError, waiting bool) {
	now := m.g.Now()
	until := busy.LeaseExpiresAt.Add(m.g.ClockSkew())
	if busy.LeaseExpiresAt.IsZero() || !until.After(now) {
		until = now.Add(m.lease)
	}
	m.mu.Lock()
	if t, ok := m.logged[busy.Key]; ok && now.Before(t) {
		m.mu.Unlock()
		return
	}
	if m.logged == nil {
		m.logged = make(map[string]time.Time)
	}
	if len(m.logged) >= logLimit {
		for k, t := range m.logged {
			if !now.Before(t) {
				delete(m.logged, k)
			}
		}
	}
	if len(m.logged) >= logLimit {
		m.mu.Unlock()
		return
	}
	m.logged[busy.Key] = until
	m.mu.Unlock()

	l := m.c.log
	if l == nil {
		l = slog.Default()
	}
	msgText := "idemguard/watermill: message in progress in another delivery (this consumer's or another's); nacked"
	if waiting {
		msgText = "idemguard/watermill: message in progress in another delivery (this consumer's or another's); waiting for it to finish, or for its lease to lapse"
	}
	attrs := []slog.Attr{
		slog.String(string(MessageIDKey), msg.UUID),
		slog.String(string(telemetry.ScopeKey), scope),
	}
	if !busy.LeaseExpiresAt.IsZero() {
		attrs = append(attrs, slog.String(string(telemetry.LeaseExpiresKey), busy.LeaseExpiresAt.UTC().Format(time.RFC3339Nano)))
	}
	l.LogAttrs(ctx, slog.LevelInfo, msgText, attrs...)
}
