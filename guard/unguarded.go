package guard

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// unguardedLogEvery is how often, at most, a scope's calls that run
// unguarded because their key selected nothing are logged.
const unguardedLogEvery = time.Minute

// maxUnguardedScopes bounds the scopes whose last warning is kept; past
// it the record starts afresh (a scope is then warned about again early).
const maxUnguardedScopes = 1024

// unguardedLog rate-limits the warning about calls that run unguarded, per
// scope, without a lock on the calls' path once a scope is known.
type unguardedLog struct {
	scopes sync.Map     // scope → *unguardedScope
	n      atomic.Int64 // scopes stored, roughly
}

// unguardedScope is one scope's record: when it may be logged next, and
// the unguarded calls since it was last logged.
type unguardedScope struct {
	next  atomic.Int64 // unix nanoseconds on the guard's clock
	calls atomic.Int64
}

// scope returns the record of scope, making it if need be.
func (l *unguardedLog) scope(scope string) *unguardedScope {
	if s, ok := l.scopes.Load(scope); ok {
		return s.(*unguardedScope)
	}
	if l.n.Add(1) > maxUnguardedScopes {
		l.scopes.Clear()
		l.n.Store(1)
	}
	s, _ := l.scopes.LoadOrStore(scope, &unguardedScope{})
	return s.(*unguardedScope)
}

// unguardedRun warns that the call d runs unguarded because its key
// selected nothing: at most once per scope per unguardedLogEvery, with
// the number of such calls since the last warning. The calls metric
// counts every one of them (outcome unguarded).
func (g *Guard) unguardedRun(ctx context.Context, d *derived) {
	if !g.tel.Logger.Enabled(ctx, slog.LevelWarn) {
		return
	}
	s := g.unguarded.scope(d.scope)
	s.calls.Add(1)
	now := g.clock.Now().UnixNano()
	next := s.next.Load()
	if now < next || !s.next.CompareAndSwap(next, now+int64(unguardedLogEvery)) {
		return
	}
	g.log(ctx, slog.LevelWarn, "idemguard: key selection is empty; running unguarded, with no record (WithRequireKey(true) refuses such calls; this is logged at most once a minute per scope)", d,
		slog.Int64("idemguard.unguarded.calls", s.calls.Swap(0)))
}
