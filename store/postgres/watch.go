package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemguard/idemguard/internal/watchhub"
	"github.com/idemguard/idemguard/store"
)

// Watching. A watch of a key is two things on the store's one LISTEN
// connection: the LISTEN of the table's channel, shared by every key, and
// a shared advisory lock on the key, (hashtext(channel), hashtext(key)),
// held at session level while the process watches the key. Completions
// and releases notify only when a process watches their key: each, in the
// statement that writes, tries the key's advisory lock exclusively for its
// transaction (pg_try_advisory_xact_lock), and sends NOTIFY, payload the
// key, only when that fails. Sending NOTIFY on every completion would
// cost every first call, waited for or not, PostgreSQL's one lock
// that serialises the commits of notifying transactions (held through
// their commit): measured at 16 callers, it took 40–60% off the
// completion statement's throughput with nobody listening; the lock that
// is tried instead costs no measurable throughput (docs/benchmarks.md).
//
// The ordering rule holds: a watch is in effect once its shared lock is
// granted. A completion whose try comes after that fails and notifies; one
// whose try came first holds the lock exclusively until it commits, so the
// watch's lock is granted (and Watch returns, and the caller re-reads)
// only after the completion is visible. PostgreSQL delivers a notification
// when the writing transaction commits (a DoTx completion at the function's
// commit), never for one rolled back, and only to connections listening by
// then: the listener listens before it takes any lock.
//
// The channel is "idemguard_" and the table's OID, the same whatever the
// spelling of the table's name (with or without its schema), within the
// 63 bytes of an identifier; the statements resolve it when they are
// parsed ('<table>'::regclass, a constant), the listener when it connects.
//
// The listener's goroutine waits for notifications and hands each to the
// watches of its key; between waits it takes the locks of newly watched
// keys (a try, retried shortly while a completion of the key holds it, so
// that a long transaction never blocks the connection) and drops those of
// keys no longer watched, in one statement each. It sends LISTEN again
// after watchHealthEvery without a notification, so that a connection
// that died without a word (a dead peer, a cut network) is found out; a
// connection that ends, or whose check fails within watchPingTimeout,
// ends every watch with store.ErrWatchLost, and the server drops its
// locks with it. The connection is taken from the store's pool (or the
// pool WithWatchPool gives) when the first Watch needs it and kept out of
// the pool (pgxpool's Hijack) until no watch has been open for watchIdle.

var (
	// watchIdle is how long the LISTEN connection is kept after the last
	// watch stops, so that a key's successive waiters do not reconnect
	// each time. Tests shorten it.
	watchIdle = 5 * time.Second
	// watchHealthEvery is how long the listener waits for a
	// notification before it checks its connection.
	watchHealthEvery = 10 * time.Second
)

const (
	// MaxWatchedKeys is how many keys a store watches at once: the advisory
	// locks one backend holds for them, the share of PostgreSQL's lock
	// table (max_locks_per_transaction × connections) one connection may
	// fairly take. A Watch of one more key returns an error matching
	// store.ErrSkip, and its caller polls.
	MaxWatchedKeys = 256
	// watchPingTimeout bounds the check.
	watchPingTimeout = 5 * time.Second
	// watchConnectTimeout bounds taking a connection and listening.
	watchConnectTimeout = 30 * time.Second
	// lockRetryMin and lockRetryMax bound the pause before a key's lock,
	// held by a completion that is committing, is tried again.
	lockRetryMin, lockRetryMax = 2 * time.Millisecond, 100 * time.Millisecond
	// channelPrefix starts the name of a table's channel.
	channelPrefix = "idemguard_"
)

var _ store.Watcher = (*Store)(nil)

// WithWatchPool makes [Store.Watch] take its one LISTEN connection from
// pool rather than from the store's own. Give it a pool of direct or
// session-mode connections when the store's pool goes through a pooler in
// transaction mode (PgBouncer's pool_mode=transaction), which keeps
// neither a LISTEN nor a session's advisory locks: the completions'
// statements go through the store's pool either way. pool must reach the
// same database.
func WithWatchPool(pool *pgxpool.Pool) Option {
	return func(c *config) {
		if pool == nil {
			c.errs = append(c.errs, errors.New("WithWatchPool: nil pool"))
			return
		}
		c.watchPool = pool
	}
}

// Watch implements [store.Watcher]. The store's one LISTEN connection, on
// the channel of its table, serves every watch of every key: a Watch costs
// the connection's set-up (a query of the table's channel, then LISTEN)
// when it is the process's first, and one statement on that connection
// (a shared advisory lock on the key, taken with other keys' in one
// statement) when it is the first of its key; further watches of a key
// cost nothing. Complete, Release and a DoTx completion ([Tx.Complete])
// notify in the statement that writes, and only when the key is watched;
// a notification is delivered when the write commits. At most
// [MaxWatchedKeys] keys are watched at once.
//
// A pooler in transaction mode keeps neither a LISTEN nor a session's
// lock; see [WithWatchPool].
func (s *Store) Watch(ctx context.Context, key string) (store.Subscription, error) {
	if err := ctx.Err(); err != nil {
		return nil, s.wrap("Watch", key, err)
	}
	ls, kl, sub, err := s.listen.add(s, key)
	if err != nil {
		return nil, s.opErr("Watch", key, err, false)
	}
	select {
	case <-kl.ready:
	case <-ls.dead:
		sub.Stop()
		return nil, s.wrap("Watch", key, ls.err)
	case <-ctx.Done():
		sub.Stop()
		return nil, s.wrap("Watch", key, ctx.Err())
	}
	return sub, nil
}

// notifying returns st with its completions and its release notifying
// the table's channel of the key they wrote when a process watches it:
// each statement becomes
//
//	WITH done AS (<the statement> RETURNING key)
//	SELECT CASE WHEN pg_try_advisory_xact_lock(hashtext(<channel>), hashtext(key)) THEN 0
//	       ELSE (SELECT 1 FROM pg_notify(<channel>, key)) END FROM done
//
// whose rows, one iff it wrote, the store counts as it counted the
// statement's.
func notifying(st statements, id pgx.Identifier) statements {
	channel := channelExpr(id)
	wrap := func(sql string) string {
		return "WITH done AS (\n" + sql + "\nRETURNING key)\n" +
			"SELECT CASE WHEN pg_try_advisory_xact_lock(hashtext(" + channel + "), hashtext(key)) THEN 0\n" +
			"    ELSE (SELECT 1 FROM pg_notify(" + channel + ", key)) END FROM done"
	}
	st.complete = wrap(st.complete)
	st.completeValue = wrap(st.completeValue)
	st.release = wrap(st.release)
	return st
}

// channelExpr is the SQL of the table's channel name: a constant once the
// statement is parsed.
func channelExpr(id pgx.Identifier) string {
	return "('" + channelPrefix + "' || " + quoteLiteral(id.Sanitize()) + "::regclass::oid::text)"
}

// quoteLiteral quotes s as an SQL string literal.
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

func listenSQL(channel string) string { return "LISTEN " + pgx.Identifier{channel}.Sanitize() }

// The listener's lock statements: $1 is hashtext(channel), $2 the keys.
const (
	lockSQL   = `SELECT k, pg_try_advisory_lock_shared($1, hashtext(k)) FROM unnest($2::text[]) AS k`
	unlockSQL = `SELECT count(pg_advisory_unlock_shared($1, hashtext(k))) FROM unnest($2::text[]) AS k`
)

// listener is a store's LISTEN connection: at most one session at a time.
type listener struct {
	mu  sync.Mutex
	cur *listenSession // protected by mu; nil when no connection is open or opening
	// opened counts the sessions started, for tests.
	opened int // protected by mu
}

// listenSession is one LISTEN connection's life, from taking it to its
// end (idle, or lost). Its fields below subs are protected by the
// listener's mu.
type listenSession struct {
	l      *listener
	ctx    context.Context
	cancel context.CancelFunc // ends the session
	dead   chan struct{}      // closed when the session failed to start or was lost
	err    error              // why; written before dead is closed
	subs   watchhub.Set

	keys      map[string]*keyLock
	dirty     bool               // keys has work for the loop
	interrupt context.CancelFunc // ends the loop's current wait
	idle      *time.Timer
}

// keyLock is a watched key's advisory lock.
type keyLock struct {
	subs  int           // open watches of the key
	held  bool          // the session holds the lock
	ready chan struct{} // closed once the lock is first held
}

// add registers a watch of key in the current session, starting one if
// there is none.
func (l *listener) add(s *Store, key string) (*listenSession, *keyLock, *watchhub.Sub, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ls := l.cur
	if ls == nil {
		ctx, cancel := context.WithCancel(context.Background())
		ls = &listenSession{l: l, ctx: ctx, cancel: cancel, dead: make(chan struct{}), keys: make(map[string]*keyLock)}
		l.cur = ls
		l.opened++
		go ls.run(s)
	}
	kl := ls.keys[key]
	if kl == nil {
		if len(ls.keys) >= MaxWatchedKeys {
			return nil, nil, nil, fmt.Errorf("%w: %d keys are watched at once already (MaxWatchedKeys)", store.ErrSkip, MaxWatchedKeys)
		}
		kl = &keyLock{ready: make(chan struct{})}
		ls.keys[key] = kl
	}
	kl.subs++
	if !kl.held {
		ls.wake()
	}
	if ls.idle != nil {
		ls.idle.Stop()
		ls.idle = nil
	}
	sub, _ := ls.subs.Add(key, ls.remove)
	return ls, kl, sub, nil
}

// wake tells the loop that keys has work. The caller holds l.mu.
func (ls *listenSession) wake() {
	ls.dirty = true
	if ls.interrupt != nil {
		ls.interrupt()
	}
}

// remove unregisters sub; the loop drops its key's lock if it was the
// key's last watch, and the session ends watchIdle after its last watch
// stopped if no other came meanwhile.
func (ls *listenSession) remove(sub *watchhub.Sub) {
	l := ls.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, left := ls.subs.Remove(sub); left > 0 || l.cur != ls || ls.idle != nil {
		ls.unwatch(sub.Key())
		return
	}
	ls.unwatch(sub.Key())
	ls.idle = time.AfterFunc(watchIdle, func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.cur == ls && ls.subs.Len() == 0 {
			l.cur = nil
			ls.cancel()
		}
	})
}

// unwatch counts a watch of key gone, and wakes the loop to drop the
// key's lock if it was the last. The caller holds l.mu.
func (ls *listenSession) unwatch(key string) {
	if kl := ls.keys[key]; kl != nil {
		if kl.subs--; kl.subs == 0 {
			ls.wake()
		}
	}
}

// end ends ls, which failed to start or was lost (err): its watches end
// with err, and the next Watch starts a new session.
func (ls *listenSession) end(err error) {
	l := ls.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cur == ls {
		l.cur = nil
	}
	ls.cancel()
	ls.err = err
	close(ls.dead)
	ls.subs.LoseAll(err)
}

// run is the session's goroutine: it opens the connection, listens, and
// hands out notifications until the session ends.
func (ls *listenSession) run(s *Store) {
	conn, channel, class, err := ls.connect(s)
	if err != nil {
		if ls.ctx.Err() == nil {
			ls.end(s.opErr("Watch", "", fmt.Errorf("%w: listening: %w", store.ErrWatchLost, err), isThrottle(err)))
		}
		return
	}
	err = ls.loop(conn, channel, class)
	cctx, cancel := context.WithTimeout(context.Background(), watchPingTimeout)
	_ = conn.Close(cctx)
	cancel()
	if ls.ctx.Err() != nil {
		return // idle: ended on purpose
	}
	ls.end(s.opErr("Watch", "", fmt.Errorf("%w: the LISTEN connection: %w", store.ErrWatchLost, err), false))
}

// connect takes a connection out of the pool, reads the table's channel
// and its lock class, and listens on the channel.
func (ls *listenSession) connect(s *Store) (conn *pgx.Conn, channel string, class int32, err error) {
	ctx, cancel := context.WithTimeout(ls.ctx, watchConnectTimeout)
	defer cancel()
	pool := s.pool
	if s.cfg.watchPool != nil {
		pool = s.cfg.watchPool
	}
	c, err := pool.Acquire(ctx)
	if err != nil {
		return nil, "", 0, err
	}
	conn = c.Hijack()
	id, _ := parseTable(s.cfg.table) // checked by New
	err = conn.QueryRow(ctx, "SELECT "+channelExpr(id)+", hashtext("+channelExpr(id)+")").Scan(&channel, &class)
	if err == nil {
		_, err = conn.Exec(ctx, listenSQL(channel))
	}
	if err != nil {
		cctx, cancel := context.WithTimeout(context.Background(), watchPingTimeout)
		defer cancel()
		_ = conn.Close(cctx)
		return nil, "", 0, err
	}
	return conn, channel, class, nil
}

// loop hands out notifications and takes and drops the keys' locks until
// the session is cancelled (nil) or the connection fails (its error).
// After watchHealthEvery without a notification it sends LISTEN again,
// which the server answers at once if the connection is alive.
func (ls *listenSession) loop(conn *pgx.Conn, channel string, class int32) error {
	retry := time.Duration(0) // the pause before locks are tried again, or 0
	for {
		if ls.ctx.Err() != nil {
			return nil
		}
		contended, err := ls.reconcile(conn, class)
		if err != nil {
			return err
		}
		switch {
		case !contended:
			retry = 0
		case retry == 0:
			retry = lockRetryMin
		default:
			retry = min(2*retry, lockRetryMax)
		}
		wait := watchHealthEvery
		if retry > 0 {
			wait = retry
		}
		wctx, cancel := context.WithTimeout(ls.ctx, wait)
		ls.l.mu.Lock()
		if ls.dirty {
			ls.l.mu.Unlock()
			cancel()
			continue
		}
		ls.interrupt = cancel
		ls.l.mu.Unlock()
		n, err := conn.WaitForNotification(wctx)
		ls.l.mu.Lock()
		ls.interrupt = nil
		ls.l.mu.Unlock()
		cancel()
		switch {
		case err == nil:
			if n.Channel == channel && n.Payload != "" {
				ls.subs.Notify(n.Payload)
			}
			continue
		case ls.ctx.Err() != nil:
			return nil
		case conn.IsClosed():
			return err
		case errors.Is(err, context.Canceled), retry > 0:
			continue // woken, or time to try the locks again
		case errors.Is(err, context.DeadlineExceeded):
			pctx, cancel := context.WithTimeout(ls.ctx, watchPingTimeout)
			_, err = conn.Exec(pctx, listenSQL(channel))
			cancel()
			if err == nil || ls.ctx.Err() != nil {
				continue
			}
		}
		return err
	}
}

// reconcile drops the locks of keys no longer watched and takes those of
// keys newly watched, and reports whether a lock it wanted was held by a
// completion (to be tried again shortly).
func (ls *listenSession) reconcile(conn *pgx.Conn, class int32) (contended bool, err error) {
	ls.l.mu.Lock()
	ls.dirty = false
	var drop, take []string
	for k, kl := range ls.keys {
		switch {
		case kl.subs == 0 && kl.held:
			// Not held from now on: a watch of the key made before the
			// lock is dropped waits for it to be taken again.
			kl.held, kl.ready = false, make(chan struct{})
			drop = append(drop, k)
		case kl.subs == 0:
			delete(ls.keys, k)
		case !kl.held:
			take = append(take, k)
		}
	}
	ls.l.mu.Unlock()
	ctx, cancel := context.WithTimeout(ls.ctx, watchPingTimeout)
	defer cancel()
	if len(drop) > 0 {
		if _, err := conn.Exec(ctx, unlockSQL, class, drop); err != nil {
			return false, err
		}
		ls.l.mu.Lock()
		for _, k := range drop {
			if kl := ls.keys[k]; kl != nil && kl.subs == 0 {
				delete(ls.keys, k)
			} // else watched again meanwhile: taken again next time
		}
		ls.l.mu.Unlock()
	}
	if len(take) == 0 {
		return false, nil
	}
	rows, err := conn.Query(ctx, lockSQL, class, take)
	if err != nil {
		return false, err
	}
	var got []string
	for rows.Next() {
		var (
			k  string
			ok bool
		)
		if err := rows.Scan(&k, &ok); err != nil {
			rows.Close()
			return false, err
		}
		if ok {
			got = append(got, k)
		} else {
			contended = true
		}
	}
	if err := rows.Err(); err != nil {
		return false, err
	}
	ls.l.mu.Lock()
	defer ls.l.mu.Unlock()
	for _, k := range got {
		kl := ls.keys[k]
		kl.held = true
		close(kl.ready)
		if kl.subs == 0 {
			ls.dirty = true // unwatched meanwhile: drop it
		}
	}
	return contended, nil
}
