package guard

import (
	"context"
	"time"

	"github.com/idemguard/idemguard/internal/guardhook"
)

// beatWhileWaiting starts ctx's wait heartbeat (set by an adapter with
// guardhook.WaitHeartbeat), if it has one, and returns the function that
// stops it.
func beatWhileWaiting(ctx context.Context) (stop func()) {
	hb, ok := guardhook.WaitBeatOf(ctx)
	if !ok {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(hb.Every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				hb.Beat(ctx)
			}
		}
	}()
	return func() { close(done) }
}
