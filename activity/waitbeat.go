package activity

import (
	"context"

	tactivity "go.temporal.io/sdk/activity"

	"github.com/idemguard/idemguard/guard"
)

// heartbeatWhileWaiting returns ctx with a heartbeat for the waits of its
// guarded call: an activity with a heartbeat timeout that waits for another
// execution's claim (guard.WithWait) heartbeats every third of the timeout
// while it waits, so that Temporal does not time it out for waiting.
func heartbeatWhileWaiting(ctx context.Context) context.Context {
	if !tactivity.IsActivity(ctx) {
		return ctx
	}
	hb := tactivity.GetInfo(ctx).HeartbeatTimeout
	if hb <= 0 {
		return ctx
	}
	return guard.WaitHeartbeat(ctx, hb/3, func(ctx context.Context) { tactivity.RecordHeartbeat(ctx) })
}
