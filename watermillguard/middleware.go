package watermillguard

import (
	"cmp"
	"context"
	"errors"
	"slices"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/attribute"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
)

// MessageIDKey is the attribute of the guard's idemguard.execute span that
// holds the message's UUID, as OpenTelemetry's messaging conventions name
// it.
const MessageIDKey = attribute.Key("messaging.message.id")

// Middleware returns Watermill handler middleware that guards each message
// with g: see the package documentation. It reports an invalid option (of
// its own or of the guard's, given to [WithGuardOptions]) or a nil guard
// as an error; [MustMiddleware] panics instead.
func Middleware(g *guard.Guard, opts ...Option) (message.HandlerMiddleware, error) {
	if g == nil {
		return nil, errors.New("watermillguard: nil guard")
	}
	var c config
	for _, o := range opts {
		o.apply(&c)
	}
	if c.err != nil {
		return nil, c.err
	}
	m := &middleware{g: g, c: c}
	// The middleware's defaults give way to the guard's and to the user's;
	// its codec and its key are its own: a user's option for them is
	// refused. So is a claim token, which names one claimant: every
	// delivery would take the others' claims over.
	m.call = append(m.call, adapt.WithDefaults(
		guard.WithTTL(defaultTTL),
		guard.WithRequireKey(true),
		guard.WithLease(defaultLease),
	))
	m.call = append(m.call, c.call...)
	m.call = append(m.call, adapt.Fixed(guard.WithCodec(codec{})))
	check := append(slices.Clip(m.call), adapt.Fixed(guard.WithKey("probe"), adapt.WithClaimToken("probe")))
	s, err := adapt.Settings(g, check...)
	if err != nil {
		return nil, err
	}
	if c.scope != "" {
		if err := g.CheckScope(c.scope); err != nil {
			return nil, err
		}
	}
	m.call = slices.Clip(m.call)
	if err := m.initWait(s, check); err != nil {
		return nil, err
	}
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) { return m.handle(h, msg) }
	}, nil
}

// MustMiddleware is [Middleware] that panics if an option is invalid or
// the guard is nil, as regexp.MustCompile does, for a router built once at
// start-up.
func MustMiddleware(g *guard.Guard, opts ...Option) message.HandlerMiddleware {
	mw, err := Middleware(g, opts...)
	if err != nil {
		panic(err)
	}
	return mw
}

// middleware is one configured middleware; every handler it wraps shares
// it.
type middleware struct {
	g    *guard.Guard
	c    config
	call []guard.CallOption // the guard options of every call, before the key
	inProgress
}

// handle guards one delivery of msg to h.
func (m *middleware) handle(h message.HandlerFunc, msg *message.Message) ([]*message.Message, error) {
	if m.g.Disabled() {
		return m.passThrough(h, msg)
	}
	orig := msg.Context()
	scope := m.c.scope
	if scope == "" {
		if scope = message.HandlerNameFromCtx(orig); scope == "" {
			scope = defaultScope
		}
	}
	call := make([]guard.CallOption, len(m.call), len(m.call)+2)
	copy(call, m.call)
	switch m.c.key {
	case keyUUID:
		call = append(call, guard.WithKey(msg.UUID))
	case keyMetadata:
		call = append(call, guard.WithKey(msg.Metadata.Get(m.c.field)))
	}
	call = append(call, adapt.WithSpanAttributes(MessageIDKey.String(msg.UUID)))

	produced, out, err := m.execute(orig, scope, msg, func(ctx context.Context) ([]*message.Message, error) {
		// The handler sees the guarded call's context: its key
		// (guard.KeyFromContext), its span as parent, guard.Step.
		msg.SetContext(ctx)
		defer msg.SetContext(orig)
		return h(msg)
	}, call)
	if err != nil {
		if isPermanent(out, err) {
			return nil, &PermanentError{UUID: msg.UUID, Err: err}
		}
		return nil, err
	}
	if out == guard.OutcomeShared {
		// A concurrent delivery in this process ran the handler and
		// publishes its messages itself: publish copies, never the same
		// values from two goroutines.
		copies := make([]*message.Message, len(produced))
		for i, p := range produced {
			copies[i] = p.Copy()
		}
		return copies, nil
	}
	return produced, nil
}

// passThrough delivers msg to h for a disabled guard (IDEMGUARD_DISABLED)
// through a disabled guard.Do, so that the handler runs inside a call, as
// the function of any disabled call does, and guard.Step in it runs its
// function unguarded; what h returns is returned as it is.
func (m *middleware) passThrough(h message.HandlerFunc, msg *message.Message) ([]*message.Message, error) {
	orig := msg.Context()
	return guard.Do(orig, m.g, cmp.Or(m.c.scope, defaultScope), nil, func(ctx context.Context) ([]*message.Message, error) {
		msg.SetContext(ctx)
		defer msg.SetContext(orig)
		return h(msg)
	})
}

// isPermanent reports whether a delivery that failed with err (its call's
// outcome out) fails the same way when redelivered.
func isPermanent(out guard.Outcome, err error) bool {
	switch {
	case errors.Is(err, guard.ErrRefused):
		// The handler's transaction was refused by its own condition:
		// a redelivery is refused again.
		return true
	case out == guard.OutcomeReplayed || out == guard.OutcomeShared:
		// A stored outcome: a recorded definite error, or a result that
		// cannot be replayed.
		return true
	case out == guard.OutcomeReleased:
		// The handler's error released the key: a redelivery runs again.
		return false
	case out != guard.OutcomeExecuted:
		return permanent(err)
	case errors.Is(err, guard.ErrLeaseLost) || errors.Is(err, guard.ErrNotRecorded):
		// Ran, but nothing was recorded: a redelivery replays another
		// holder's outcome or runs again.
		return false
	}
	// Ran and recorded a definite error.
	return true
}
