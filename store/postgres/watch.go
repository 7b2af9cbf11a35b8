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

// Watching: every completion and release notifies the table's channel
// (NOTIFY, payload the key) in its own statement, so PostgreSQL delivers
// the notification when the statement's transaction commits (a DoTx
// completion at the function's commit) and never for one rolled back. The
// channel is "idemguard_" and the table's OID, the same whatever the
// spelling of the table's name (with or without its schema), within the
// 63 bytes of an identifier; the statements resolve it when they are
// parsed ('<table>'::regclass, a constant), the listener when it connects.
//
// A store listens on one connection, taken from its pool (or the pool
// WithWatchPool gives) when the first Watch needs it and kept out of the
// pool (pgxpool's Hijack) until no watch has been open for watchIdle.
// Its goroutine waits for notifications, hands each to the watches of its
// key, and sends LISTEN again every watchHealthEvery without one, so that
// a connection that died without a word (a dead peer, a cut network) is
// found out; a connection that ends, or whose check fails within
// watchPingTimeout, ends every watch with store.ErrWatchLost.

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
	// watchPingTimeout bounds the check.
	watchPingTimeout = 5 * time.Second
	// watchConnectTimeout bounds taking a connection and listening.
	watchConnectTimeout = 30 * time.Second
	// channelPrefix starts the name of a table's channel.
	channelPrefix = "idemguard_"
)

var _ store.Watcher = (*Store)(nil)

// WithWatchPool makes [Store.Watch] take its one LISTEN connection from
// pool rather than from the store's own. Give it a pool of direct or
// session-mode connections when the store's pool goes through a pooler in
// transaction mode (PgBouncer's pool_mode=transaction), which does not
// keep a LISTEN: the completions' NOTIFY goes through the store's pool
// either way. pool must reach the same database.
func WithWatchPool(pool *pgxpool.Pool) Option {
	return func(c *config) {
		if pool == nil {
			c.errs = append(c.errs, errors.New("WithWatchPool: nil pool"))
			return
		}
		c.watchPool = pool
	}
}

// Watch implements [store.Watcher]: the store's one LISTEN connection, on
// the channel of its table, serves every watch of every key, so a Watch
// costs a round trip only when it opens the connection (LISTEN, with a
// query of the table's OID before it). Complete, Release and a DoTx
// completion ([Tx.Complete]) notify the channel in the statement that
// writes, delivered at its commit: a notification reaches the listener
// only once the write is visible to every other session.
//
// A pooler in transaction mode does not keep a LISTEN; see
// [WithWatchPool].
func (s *Store) Watch(ctx context.Context, key string) (store.Subscription, error) {
	if err := ctx.Err(); err != nil {
		return nil, s.wrap("Watch", key, err)
	}
	ls, sub := s.listen.add(s, key)
	select {
	case <-ls.ready:
	case <-ctx.Done():
		sub.Stop()
		return nil, s.wrap("Watch", key, ctx.Err())
	}
	if ls.err != nil {
		sub.Stop()
		return nil, s.wrap("Watch", key, ls.err)
	}
	return sub, nil
}

// notifying returns st with its completions and its release notifying
// the table's channel of the key they wrote: each statement becomes
//
//	WITH done AS (<the statement> RETURNING key)
//	SELECT pg_notify('idemguard_' || '<table>'::regclass::oid::text, key) FROM done
//
// whose rows, one iff it wrote, the store counts as it counted the
// statement's.
func notifying(st statements, id pgx.Identifier) statements {
	channel := channelExpr(id)
	wrap := func(sql string) string {
		return "WITH done AS (\n" + sql + "\nRETURNING key)\nSELECT pg_notify(" + channel + ", key) FROM done"
	}
	st.complete = wrap(st.complete)
	st.completeValue = wrap(st.completeValue)
	st.release = wrap(st.release)
	return st
}

// channelExpr is the SQL of the table's channel name: a constant once the
// statement is parsed.
func channelExpr(id pgx.Identifier) string {
	return "'" + channelPrefix + "' || " + quoteLiteral(id.Sanitize()) + "::regclass::oid::text"
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
// end (idle, or lost).
type listenSession struct {
	subs   watchhub.Set
	ready  chan struct{} // closed when LISTEN is in effect, or the session failed to start
	err    error         // why it failed to start; written before ready is closed
	ctx    context.Context
	cancel context.CancelFunc // ends the session (idle)
	idle   *time.Timer        // protected by listener.mu
}

// add registers a watch of key in the current session, starting one if
// there is none.
func (l *listener) add(s *Store, key string) (*listenSession, *watchhub.Sub) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ls := l.cur
	if ls == nil {
		ctx, cancel := context.WithCancel(context.Background())
		ls = &listenSession{ready: make(chan struct{}), ctx: ctx, cancel: cancel}
		l.cur = ls
		l.opened++
		go ls.run(s, l)
	}
	if ls.idle != nil {
		ls.idle.Stop()
		ls.idle = nil
	}
	sub, _ := ls.subs.Add(key, func(sub *watchhub.Sub) { l.remove(ls, sub) })
	return ls, sub
}

// remove unregisters sub, and ends its session watchIdle after its last
// watch stopped if no other came meanwhile.
func (l *listener) remove(ls *listenSession, sub *watchhub.Sub) {
	l.mu.Lock()
	defer l.mu.Unlock()
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

// end ends ls, which failed to start (err) or was lost: its watches end
// with err, and the next Watch starts a new session.
func (l *listener) end(ls *listenSession, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cur == ls {
		l.cur = nil
	}
	ls.cancel()
	ls.subs.LoseAll(err)
}

// run is the session's goroutine: it opens the connection, listens, and
// hands out notifications until the session ends.
func (ls *listenSession) run(s *Store, l *listener) {
	conn, channel, err := ls.connect(s)
	if err != nil {
		ls.err = err
		close(ls.ready)
		l.end(ls, fmt.Errorf("%w: %w", store.ErrWatchLost, err))
		return
	}
	close(ls.ready)
	err = ls.loop(conn, channel)
	cctx, cancel := context.WithTimeout(context.Background(), watchPingTimeout)
	_ = conn.Close(cctx)
	cancel()
	if ls.ctx.Err() != nil {
		return // idle: ended on purpose
	}
	l.end(ls, s.opErr("Watch", "", fmt.Errorf("%w: the LISTEN connection: %w", store.ErrWatchLost, err), false))
}

// connect takes a connection out of the pool, reads the table's channel
// and listens on it.
func (ls *listenSession) connect(s *Store) (*pgx.Conn, string, error) {
	ctx, cancel := context.WithTimeout(ls.ctx, watchConnectTimeout)
	defer cancel()
	pool := s.pool
	if s.cfg.watchPool != nil {
		pool = s.cfg.watchPool
	}
	c, err := pool.Acquire(ctx)
	if err != nil {
		return nil, "", err
	}
	conn := c.Hijack()
	fail := func(err error) (*pgx.Conn, string, error) {
		cctx, cancel := context.WithTimeout(context.Background(), watchPingTimeout)
		defer cancel()
		_ = conn.Close(cctx)
		return nil, "", err
	}
	id, _ := parseTable(s.cfg.table) // checked by New
	var channel string
	if err := conn.QueryRow(ctx, "SELECT "+channelExpr(id)).Scan(&channel); err != nil {
		return fail(err)
	}
	if _, err := conn.Exec(ctx, listenSQL(channel)); err != nil {
		return fail(err)
	}
	return conn, channel, nil
}

func listenSQL(channel string) string { return "LISTEN " + pgx.Identifier{channel}.Sanitize() }

// loop hands out notifications until the session is cancelled (nil) or
// the connection fails (its error). After watchHealthEvery without a
// notification it sends LISTEN again, which the server answers at once
// if the connection is alive.
func (ls *listenSession) loop(conn *pgx.Conn, channel string) error {
	for {
		wctx, cancel := context.WithTimeout(ls.ctx, watchHealthEvery)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case err == nil:
			if n.Channel == channel && n.Payload != "" {
				ls.subs.Notify(n.Payload)
			}
			continue
		case ls.ctx.Err() != nil:
			return nil
		case errors.Is(err, context.DeadlineExceeded) && !conn.IsClosed():
			pctx, cancel := context.WithTimeout(ls.ctx, watchPingTimeout)
			_, err = conn.Exec(pctx, listenSQL(channel))
			cancel()
			if err == nil {
				continue
			}
			if ls.ctx.Err() != nil {
				return nil
			}
		}
		return err
	}
}
