package guardhook

import (
	"context"
	"time"
)

type waitBeatKey struct{}

// WaitBeat is the heartbeat a context asks of the calls that wait on it
// (see [WaitHeartbeat]).
type WaitBeat struct {
	Every time.Duration
	Beat  func(context.Context)
}

// WaitHeartbeat returns a context whose calls, while they wait in wait
// mode for another call's claim on their key, call beat every every (real
// time), with the call's context: for adapters whose caller must show that
// it is alive while it waits (a Temporal activity heartbeats). every must
// be positive; beat must not block for long.
func WaitHeartbeat(ctx context.Context, every time.Duration, beat func(context.Context)) context.Context {
	if every <= 0 || beat == nil {
		return ctx
	}
	return context.WithValue(ctx, waitBeatKey{}, WaitBeat{every, beat})
}

// WaitBeatOf returns the heartbeat ctx asks of a waiting call, if any.
func WaitBeatOf(ctx context.Context) (WaitBeat, bool) {
	hb, ok := ctx.Value(waitBeatKey{}).(WaitBeat)
	return hb, ok
}
