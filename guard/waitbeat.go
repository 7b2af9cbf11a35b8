package guard

import (
	"context"
	"time"
)

type waitBeatKey struct{}

type waitBeat struct {
	every time.Duration
	beat  func(context.Context)
}

// WaitHeartbeat returns a context whose calls, while they wait in [Wait]
// mode for another call's claim on their key, call beat every every (real
// time), with the call's context: for adapters whose caller must show that
// it is alive while it waits (a Temporal activity heartbeats). every must
// be positive; beat must not block for long.
func WaitHeartbeat(ctx context.Context, every time.Duration, beat func(context.Context)) context.Context {
	if every <= 0 || beat == nil {
		return ctx
	}
	return context.WithValue(ctx, waitBeatKey{}, waitBeat{every, beat})
}

// beatWhileWaiting starts ctx's wait heartbeat, if it has one, and returns
// the function that stops it.
func beatWhileWaiting(ctx context.Context) (stop func()) {
	hb, ok := ctx.Value(waitBeatKey{}).(waitBeat)
	if !ok {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(hb.every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				hb.beat(ctx)
			}
		}
	}()
	return func() { close(done) }
}
