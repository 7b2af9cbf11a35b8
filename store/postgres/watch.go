package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
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
// watches of its key; between waits it sends, in one pipeline (one round
// trip), what the watches need: the unlocks of keys it no longer keeps,
// the locks of newly watched keys (a try, retried shortly while a
// completion of the key holds it, so that a long transaction never blocks
// the connection), and the reads of [Store.WatchGet]. A read is a
// statement of its own after the lock's, so its snapshot is taken once
// the lock is granted (the connection's transactions are READ COMMITTED,
// whatever the server's default: a statement, not a transaction, takes
// the snapshot), and it is handed out only if the key's lock was held
// when it ran; that is the ordering rule above, in one round trip.
//
// A key's lock is not dropped with its last watch: it is kept
// watchLockGrace more, so that the key's next waiters (a hot key's, or
// the same waiter's watch after a notification) find it held and pay no
// lock, and then dropped with the next statements the listener sends
// anyway, or with the connection at idle; never in a round trip of its
// own. At most MaxWatchedKeys locks are held: a watch of a new key when
// that many are held drops one no longer watched, in the same round trip
// as its own lock.
//
// The listener sets its connection up in one round trip (READ COMMITTED
// and LISTEN, in one simple-protocol message). After watchHealthEvery
// without a notification it sends a statement (the locks it has to drop,
// or SELECT 1), so that a connection that died without a word (a dead
// peer, a cut network) is found out; a connection that ends, or whose
// check fails within watchPingTimeout, ends every watch with
// store.ErrWatchLost, and the server drops its locks with it. The
// connection is taken from the store's pool (or the pool WithWatchPool
// gives) when the first Watch needs it and kept out of the pool (pgxpool's
// Hijack) until no watch has been open for watchIdle.

var (
	// watchIdle is how long the LISTEN connection is kept after the last
	// watch stops, so that a key's successive waiters do not reconnect
	// each time. Tests shorten it.
	watchIdle = 5 * time.Second
)

// watchHealthEvery is how long, in nanoseconds, the listener waits for a
// notification before it checks its connection: 30 s, as long as a
// waiting guard goes before its first read of its own, so that a lone
// waiter of a call shorter than that makes no round trip beyond the three
// it needs (at 10 s, a 20 s call's lone waiter made 4 or 5). Tests change
// it while other tests' listeners run.
var watchHealthEvery atomic.Int64

// watchLockGrace is how long, in nanoseconds, a key's lock is kept after
// its last watch stopped before the listener drops it with its next
// statements: a second. Tests change it while other tests' listeners run.
var watchLockGrace atomic.Int64

func init() {
	watchLockGrace.Store(int64(time.Second))
	watchHealthEvery.Store(int64(30 * time.Second))
}

const (
	// MaxWatchedKeys is how many keys a store watches at once: the advisory
	// locks one backend holds for them, the share of PostgreSQL's lock
	// table (max_locks_per_transaction × connections) one connection may
	// fairly take. Locks kept after their key's last watch count too, and
	// a Watch of a new key drops one of them when there are that many; a
	// Watch of one more key while that many are watched returns an error
	// matching store.ErrSkip, and its caller polls.
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

var _ store.WatchGetter = (*Store)(nil)

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
// the connection's set-up (one round trip: READ COMMITTED and LISTEN) when
// it is the process's first, and one round trip on that connection (a
// shared advisory lock on the key, taken with other keys' in one
// statement) when its key's lock is not held; further watches of a key,
// and watches within watchLockGrace (a second) of the key's last, cost
// nothing. Complete, Release and a DoTx completion ([Tx.Complete]) notify
// in the statement that writes, and only when the key is watched; a
// notification is delivered when the write commits. At most
// [MaxWatchedKeys] keys are watched at once.
//
// A pooler in transaction mode keeps neither a LISTEN nor a session's
// lock; see [WithWatchPool].
func (s *Store) Watch(ctx context.Context, key string) (store.Subscription, error) {
	sub, _, err := s.watch(ctx, "Watch", key, false)
	return sub, err
}

// WatchGet implements [store.WatchGetter]: Watch and Get in one round trip
// on the LISTEN connection, the key's lock (when it is not held) and the
// read pipelined, the read a statement of its own after the lock's; when
// the key's lock is held already, the read alone. Reads of several keys
// wanted at once go in one statement.
func (s *Store) WatchGet(ctx context.Context, key string) (store.Subscription, *store.Record, error) {
	sub, rd, err := s.watch(ctx, "WatchGet", key, true)
	if err != nil {
		return nil, nil, err
	}
	return sub, rd.rec, rd.err
}

// watch registers a watch of key and waits until it is in effect, and,
// with read, until the record was read after that.
func (s *Store) watch(ctx context.Context, op, key string, read bool) (store.Subscription, *watchRead, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, s.wrap(op, key, err)
	}
	ls, kl, sub, rd, err := s.listen.add(s, key, read)
	if err != nil {
		return nil, nil, s.opErr(op, key, err, false)
	}
	done := kl.ready
	if rd != nil {
		done = rd.done
	}
	select {
	case <-done:
	case <-ls.dead:
		sub.Stop()
		return nil, nil, s.wrap(op, key, ls.err)
	case <-ctx.Done():
		sub.Stop()
		return nil, nil, s.wrap(op, key, ctx.Err())
	}
	return sub, rd, nil
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
	st.watchSetup = "SET default_transaction_isolation = 'read committed'; DO " +
		quoteLiteral("BEGIN EXECUTE 'LISTEN ' || quote_ident("+channel+"); END")
	st.watchLock = "SELECT k, pg_try_advisory_lock_shared(hashtext(" + channel + "), hashtext(k)) FROM unnest($1::text[]) AS k"
	st.watchUnlock = "SELECT count(pg_advisory_unlock_shared(hashtext(" + channel + "), hashtext(k))) FROM unnest($1::text[]) AS k"
	return st
}

// channelExpr is the SQL of the table's channel name: a constant once the
// statement is parsed.
func channelExpr(id pgx.Identifier) string {
	return "('" + channelPrefix + "' || " + quoteLiteral(id.Sanitize()) + "::regclass::oid::text)"
}

// quoteLiteral quotes s as an SQL string literal.
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

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

	// keys are the keys watched, and those whose lock is kept after their
	// last watch (in grace), at most MaxWatchedKeys.
	keys map[string]*keyLock
	// drops are keys no longer in keys whose lock the session still holds,
	// to be dropped with its next statements: evicted to make room for
	// another key, or taken by a statement while they were evicted.
	drops     []string
	dirty     bool               // the loop has statements to send
	interrupt context.CancelFunc // ends the loop's current wait
	idle      *time.Timer
}

// keyLock is a watched key's advisory lock.
type keyLock struct {
	subs  int           // open watches of the key
	held  bool          // the session holds the lock
	ready chan struct{} // closed once the lock is held
	// since is when subs last fell to 0 while the lock was held: the
	// lock is dropped watchLockGrace after.
	since time.Time
	reads []*watchRead // WatchGets waiting for their read
}

// watchRead is a WatchGet's read: done is closed once rec or err is
// set, by a read that ran after the key's lock was granted.
type watchRead struct {
	done chan struct{}
	rec  *store.Record
	err  error
}

// add registers a watch of key in the current session, starting one if
// there is none, with a read to make after the lock when read is set.
func (l *listener) add(s *Store, key string, read bool) (*listenSession, *keyLock, *watchhub.Sub, *watchRead, error) {
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
		if len(ls.keys) >= MaxWatchedKeys && !ls.evict() {
			return nil, nil, nil, nil, fmt.Errorf("%w: %d keys are watched at once already (MaxWatchedKeys)", store.ErrSkip, MaxWatchedKeys)
		}
		kl = &keyLock{ready: make(chan struct{})}
		ls.keys[key] = kl
	}
	kl.subs++
	var rd *watchRead
	if read {
		rd = &watchRead{done: make(chan struct{})}
		kl.reads = append(kl.reads, rd)
	}
	if !kl.held || read {
		ls.wake()
	}
	if ls.idle != nil {
		ls.idle.Stop()
		ls.idle = nil
	}
	sub, _ := ls.subs.Add(key, ls.remove)
	return ls, kl, sub, rd, nil
}

// evict makes room in keys for another key by forgetting one that is no
// longer watched (its lock, if held, dropped with the next statements),
// and reports whether there was one. The caller holds l.mu.
func (ls *listenSession) evict() bool {
	for k, kl := range ls.keys {
		if kl.subs == 0 {
			delete(ls.keys, k)
			if kl.held {
				ls.drops = append(ls.drops, k)
			}
			return true
		}
	}
	return false
}

// wake tells the loop that it has statements to send. The caller holds
// l.mu.
func (ls *listenSession) wake() {
	ls.dirty = true
	if ls.interrupt != nil {
		ls.interrupt()
	}
}

// remove unregisters sub; the key's lock is kept watchLockGrace after its
// last watch, and the session ends watchIdle after its last watch stopped
// if no other came meanwhile.
func (ls *listenSession) remove(sub *watchhub.Sub) {
	l := ls.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if kl := ls.keys[sub.Key()]; kl != nil {
		if kl.subs--; kl.subs == 0 {
			kl.since = time.Now()
		}
	}
	if _, left := ls.subs.Remove(sub); left > 0 || l.cur != ls || ls.idle != nil {
		return
	}
	ls.idle = time.AfterFunc(watchIdle, func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.cur == ls && ls.subs.Len() == 0 {
			l.cur = nil
			ls.cancel()
		}
	})
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
	conn, err := ls.connect(s)
	if err != nil {
		if ls.ctx.Err() == nil {
			ls.end(s.opErr("Watch", "", fmt.Errorf("%w: listening: %w", store.ErrWatchLost, err), isThrottle(err)))
		}
		return
	}
	err = ls.loop(s, conn)
	cctx, cancel := context.WithTimeout(context.Background(), watchPingTimeout)
	_ = conn.Close(cctx)
	cancel()
	if ls.ctx.Err() != nil {
		return // idle: ended on purpose
	}
	ls.end(s.opErr("Watch", "", fmt.Errorf("%w: the LISTEN connection: %w", store.ErrWatchLost, err), false))
}

// connect takes a connection out of the pool and sets it up in one round
// trip: its transactions READ COMMITTED (its reads' snapshots must follow
// their key's lock), and LISTEN on the table's channel, which the server
// names.
func (ls *listenSession) connect(s *Store) (*pgx.Conn, error) {
	ctx, cancel := context.WithTimeout(ls.ctx, watchConnectTimeout)
	defer cancel()
	pool := s.pool
	if s.cfg.watchPool != nil {
		pool = s.cfg.watchPool
	}
	c, err := pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	conn := c.Hijack()
	// Exec without arguments sends the simple protocol: one message, one
	// implicit transaction, at whose commit the LISTEN takes effect.
	if _, err := conn.Exec(ctx, s.sql.watchSetup); err != nil {
		cctx, cancel := context.WithTimeout(context.Background(), watchPingTimeout)
		defer cancel()
		_ = conn.Close(cctx)
		return nil, err
	}
	return conn, nil
}

// loop hands out notifications and sends the keys' locks, unlocks and
// reads until the session is cancelled (nil) or the connection fails (its
// error). After watchHealthEvery without a notification it sends a
// statement, which the server answers at once if the connection is alive.
func (ls *listenSession) loop(s *Store, conn *pgx.Conn) error {
	retry := time.Duration(0) // the pause before locks are tried again, or 0
	health := false
	for {
		if ls.ctx.Err() != nil {
			return nil
		}
		contended, err := ls.reconcile(s, conn, health)
		if err != nil {
			return err
		}
		health = false
		switch {
		case !contended:
			retry = 0
		case retry == 0:
			retry = lockRetryMin
		default:
			retry = min(2*retry, lockRetryMax)
		}
		wait := time.Duration(watchHealthEvery.Load())
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
			if n.Payload != "" {
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
			health = true
			continue
		}
		return err
	}
}

// reconcile sends, in one round trip, what the keys need: the unlocks of
// keys evicted, and of keys whose grace is over when it sends anything
// else; the locks of keys newly watched; the reads of WatchGets. With
// health it sends at least a statement. It reports whether a lock it
// wanted was held by a completion (to be tried again shortly).
func (ls *listenSession) reconcile(s *Store, conn *pgx.Conn, health bool) (contended bool, err error) {
	type taking struct {
		key string
		kl  *keyLock
	}
	type reading struct {
		kl    *keyLock
		held  bool // the lock was held before the statements: it is while they run
		reads []*watchRead
	}
	now := time.Now()
	ls.l.mu.Lock()
	ls.dirty = false
	var (
		expired []string
		take    []taking
		read    = map[string]*reading{}
		keys    []string // read's keys
	)
	for k, kl := range ls.keys {
		switch {
		case kl.subs == 0 && kl.held:
			if now.Sub(kl.since) >= time.Duration(watchLockGrace.Load()) {
				expired = append(expired, k)
			}
		case kl.subs == 0:
			delete(ls.keys, k) // never held: nothing to drop
		case !kl.held:
			take = append(take, taking{k, kl})
		}
		if kl.subs > 0 && len(kl.reads) > 0 {
			read[k] = &reading{kl: kl, held: kl.held, reads: kl.reads}
			kl.reads = nil
			keys = append(keys, k)
		}
	}
	if len(ls.drops) == 0 && len(take) == 0 && len(keys) == 0 && !health {
		ls.l.mu.Unlock()
		return false, nil
	}
	// Keys whose grace is over go with the statements sent anyway.
	drop := ls.drops
	ls.drops = nil
	for _, k := range expired {
		delete(ls.keys, k)
		drop = append(drop, k)
	}
	ls.l.mu.Unlock()

	ctx, cancel := context.WithTimeout(ls.ctx, watchPingTimeout)
	defer cancel()
	var b pgx.Batch
	if len(drop) > 0 {
		b.Queue(s.sql.watchUnlock, drop)
	}
	if len(take) > 0 {
		ks := make([]string, len(take))
		for i, t := range take {
			ks[i] = t.key
		}
		b.Queue(s.sql.watchLock, ks)
	}
	if len(keys) > 0 {
		b.Queue(s.sql.getMany, keys)
	}
	if b.Len() == 0 {
		_, err := conn.Exec(ctx, "SELECT 1") // the health check alone
		return false, err
	}
	got := map[string]bool{}
	rows := map[string]row{}
	br := conn.SendBatch(ctx, &b)
	err = func() error {
		if len(drop) > 0 {
			if _, err := br.Exec(); err != nil {
				return err
			}
		}
		if len(take) > 0 {
			rs, err := br.Query()
			if err != nil {
				return err
			}
			for rs.Next() {
				var (
					k  string
					ok bool
				)
				if err := rs.Scan(&k, &ok); err != nil {
					rs.Close()
					return err
				}
				got[k] = ok
			}
			if err := rs.Err(); err != nil {
				return err
			}
		}
		if len(keys) > 0 {
			rs, err := br.Query()
			if err != nil {
				return err
			}
			for rs.Next() {
				var r row
				if err := rs.Scan(r.dest()...); err != nil {
					rs.Close()
					return err
				}
				rows[r.key] = r
			}
			if err := rs.Err(); err != nil {
				return err
			}
		}
		return nil
	}()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return false, err
	}

	ls.l.mu.Lock()
	defer ls.l.mu.Unlock()
	for _, t := range take {
		if !got[t.key] {
			contended = true
			continue
		}
		if ls.keys[t.key] != t.kl {
			// Evicted meanwhile: the lock is the session's still.
			ls.drops = append(ls.drops, t.key)
			continue
		}
		t.kl.held = true
		close(t.kl.ready)
		if t.kl.subs == 0 {
			t.kl.since = now
		}
	}
	for k, r := range read {
		if !r.held && !got[k] {
			// The lock was not granted: a read now could miss a
			// completion that no notification will tell. Read again with
			// the next try.
			r.kl.reads = append(r.reads, r.kl.reads...)
			continue
		}
		for _, rd := range r.reads {
			if row, ok := rows[k]; ok {
				rd.rec, rd.err = row.record()
				if rd.err != nil {
					rd.err = s.wrap("WatchGet", k, rd.err)
				}
			} else {
				rd.err = store.ErrNotFound
			}
			close(rd.done)
		}
	}
	return contended, nil
}
