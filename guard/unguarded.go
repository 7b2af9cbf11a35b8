package guard

import (
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
