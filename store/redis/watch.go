package redis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idemguard/idemguard/internal/watchhub"
	"github.com/idemguard/idemguard/store"
)

// Watching. Complete and Release publish on the shard channel named as
// the record's key (see the scripts' Publishing). A store subscribes to a
// watched key's channel (SSUBSCRIBE) on one connection per server (per
// master of a Cluster: a shard channel is served by the node that owns its
// slot), a go-redis PubSub of its own, opened when the first Watch needs
// it: every watch of the key in the process shares that subscription, and
// the store unsubscribes (SUNSUBSCRIBE) when the key's last watch stops.
// A Watch returns once the server has confirmed the subscription: a
// completion published after that is delivered, and one published before
// is visible to the read that follows the Watch.
//
// The connection's goroutine reads what the server sends: messages, which
// it hands to the key's watches, and the replies to the commands sent on
// the connection, which come in the order the commands went; it matches
// them to a queue of those commands. After watchHealthEvery without
// anything it sends PING, and if nothing comes back within another
// watchHealthEvery, or the connection fails, or a reply does not match,
// it ends every watch of the connection with store.ErrWatchLost and
// closes it (go-redis's PubSub would reconnect and subscribe again by
// itself, but what was published in between would be lost unannounced).
// A channel the server unsubscribes by itself (its slot moved to another
// node) ends that key's watches the same way. The next Watch opens a new
// connection. The connection is closed watchIdle after its last watch
// stopped if no other came meanwhile.

var (
	// watchIdle is how long a subscriber connection is kept after its
	// last watch stops, so that a key's successive waiters do not
	// reconnect each time. Tests shorten it.
	watchIdle = 5 * time.Second
	// watchHealthEvery is how long the connection's goroutine waits for
	// something from the server before it sends PING, and then for the
	// answer.
	watchHealthEvery = 10 * time.Second
)

var _ store.Watcher = (*Store)(nil)

// Watch implements [store.Watcher] with sharded pub/sub (Redis 7.0 or
// later, or Valkey): the store's subscriber connection to the key's
// server subscribes to the key's channel when it is the first watch of
// the key in the process (one round trip on that connection, answered by
// the server's confirmation), and not again while the key is watched.
// The first Watch of a server opens the connection. It needs a
// *redis.Client (standalone, or Sentinel) or a *redis.ClusterClient; with
// another client, against a server without SSUBSCRIBE, and for an ACL
// user denied the store's channels, it returns an error matching
// [store.ErrSkip], and at once from then on (the store remembers a server
// or user that refused). An ACL user needs the channels of the store's
// keys (&<prefix>*) and SSUBSCRIBE, SUNSUBSCRIBE and PING for Watch, and
// SPUBLISH for the scripts' publish (without it they publish nothing and
// still succeed).
func (s *Store) Watch(ctx context.Context, key string) (store.Subscription, error) {
	const op = "Watch"
	if err := ctx.Err(); err != nil {
		return nil, s.opErr(op, key, err)
	}
	channel := s.prefix + key
	node, addr, err := s.watchNode(ctx, channel)
	if err != nil {
		return nil, s.opErr(op, key, err)
	}
	ss, err := s.watch.session(node, addr)
	if err != nil {
		return nil, s.opErr(op, key, err)
	}
	select {
	case <-ss.connected:
	case <-ss.dead:
		return nil, s.opErr(op, key, ss.err)
	case <-ctx.Done():
		s.watch.release(ss)
		return nil, s.opErr(op, key, ctx.Err())
	}
	c, sub := s.watch.add(ss, channel)
	select {
	case <-c.ready:
		if c.err != nil {
			sub.Stop()
			return nil, s.opErr(op, key, c.err)
		}
		return sub, nil
	case <-ss.dead:
		sub.Stop()
		return nil, s.opErr(op, key, ss.err)
	case <-ctx.Done():
		sub.Stop()
		return nil, s.opErr(op, key, ctx.Err())
	}
}

// watchNode returns the client of the server that serves channel, and
// its address ("" for a non-Cluster client).
func (s *Store) watchNode(ctx context.Context, channel string) (*goredis.Client, string, error) {
	switch c := s.client.(type) {
	case *goredis.Client:
		return c, "", nil
	case *goredis.ClusterClient:
		n, err := c.MasterForKey(ctx, channel)
		if err != nil {
			return nil, "", err
		}
		return n, n.Options().Addr, nil
	}
	return nil, "", fmt.Errorf("%w: Watch needs a *redis.Client or *redis.ClusterClient, not a %T", store.ErrSkip, s.client)
}

// watcher is a store's subscriber connections, one per server.
type watcher struct {
	mu       sync.Mutex
	sessions map[string]*subSession // protected by mu; by server address
	// unsupported is set when a server refused SSUBSCRIBE as an unknown
	// command: every later Watch fails at once.
	unsupported error // protected by mu
	// opened counts the connections opened, for tests.
	opened int // protected by mu
}

// subSession is one subscriber connection's life. Its fields from chans
// on are protected by the watcher's mu.
type subSession struct {
	w         *watcher
	addr      string
	ps        *goredis.PubSub
	connected chan struct{} // closed once the connection is up
	dead      chan struct{} // closed when it failed or was lost
	err       error         // why; written before dead is closed
	subs      watchhub.Set

	chans   map[string]*chanSub
	queue   []sent // commands sent whose replies have not come, oldest first
	waiting int    // Watch calls waiting for the connection
	idle    *time.Timer
	stopped bool // closed on purpose (idle)
}

// chanSub is a channel's subscription on a connection.
type chanSub struct {
	watches int           // open watches of the channel
	ready   chan struct{} // closed when the server confirmed it, or refused it
	err     error         // why it was refused; written before ready is closed
}

// sent is a command sent on a subscriber connection: a subscription
// ('s'), an unsubscription ('u') or a PING ('p').
type sent struct {
	kind    byte
	channel string
	c       *chanSub // for 's'
}

// session returns the connection to the server at addr, opening one if
// there is none; the caller waits for it to be connected and then calls
// add, or release.
func (w *watcher) session(node *goredis.Client, addr string) (*subSession, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.unsupported != nil {
		return nil, w.unsupported
	}
	ss := w.sessions[addr]
	if ss == nil {
		ss = &subSession{
			w: w, addr: addr, ps: node.SSubscribe(context.Background()),
			connected: make(chan struct{}), dead: make(chan struct{}), chans: make(map[string]*chanSub),
		}
		if w.sessions == nil {
			w.sessions = make(map[string]*subSession)
		}
		w.sessions[addr] = ss
		w.opened++
		go ss.run()
	}
	ss.waiting++
	if ss.idle != nil {
		ss.idle.Stop()
		ss.idle = nil
	}
	return ss, nil
}

// release counts a Watch that gave up waiting for the connection.
func (w *watcher) release(ss *subSession) {
	w.mu.Lock()
	defer w.mu.Unlock()
	ss.waiting--
	ss.idleCheck()
}

// add registers a watch of channel on the connected ss, subscribing to
// the channel if it is its first.
func (w *watcher) add(ss *subSession, channel string) (*chanSub, *watchhub.Sub) {
	w.mu.Lock()
	defer w.mu.Unlock()
	ss.waiting--
	c := ss.chans[channel]
	if c == nil {
		c = &chanSub{ready: make(chan struct{})}
		ss.chans[channel] = c
		if !ss.gone() {
			ss.send(sent{kind: 's', channel: channel, c: c}, func(ctx context.Context) error { return ss.ps.SSubscribe(ctx, channel) })
		}
	}
	c.watches++
	sub, _ := ss.subs.Add(channel, func(sub *watchhub.Sub) { ss.remove(sub, c) })
	return c, sub
}

// gone reports whether the connection failed or was closed. The caller
// holds w.mu.
func (ss *subSession) gone() bool {
	select {
	case <-ss.dead:
		return true
	default:
		return ss.stopped
	}
}

// send queues what is sent and sends it, so that replies come in the
// queue's order; a failure to send ends the connection. The caller holds
// w.mu.
func (ss *subSession) send(what sent, write func(context.Context) error) {
	ss.queue = append(ss.queue, what)
	ctx, cancel := context.WithTimeout(context.Background(), watchHealthEvery)
	defer cancel()
	if err := write(ctx); err != nil {
		ss.lostLocked(err)
	}
}

// remove unregisters sub, a watch of c, unsubscribing from its channel if
// it was the channel's last watch. c may have been dropped from chans
// already (refused, or unsubscribed by the server).
func (ss *subSession) remove(sub *watchhub.Sub, c *chanSub) {
	w := ss.w
	w.mu.Lock()
	defer w.mu.Unlock()
	ss.subs.Remove(sub)
	channel := sub.Key()
	if c.watches--; c.watches == 0 && ss.chans[channel] == c {
		delete(ss.chans, channel)
		if !ss.gone() {
			ss.send(sent{kind: 'u', channel: channel}, func(ctx context.Context) error { return ss.ps.SUnsubscribe(ctx, channel) })
		}
	}
	ss.idleCheck()
}

// idleCheck closes the connection watchIdle from now if nothing uses it
// then. The caller holds w.mu.
func (ss *subSession) idleCheck() {
	if ss.subs.Len() > 0 || ss.waiting > 0 || ss.idle != nil || ss.gone() {
		return
	}
	w := ss.w
	ss.idle = time.AfterFunc(watchIdle, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if ss.subs.Len() == 0 && ss.waiting == 0 && !ss.gone() {
			ss.stopped = true
			if w.sessions[ss.addr] == ss {
				delete(w.sessions, ss.addr)
			}
			_ = ss.ps.Close() // ends run's read
		}
	})
}

// lostLocked ends the connection, which failed (err): its watches end
// with store.ErrWatchLost, and the next Watch opens a new one. The
// caller holds w.mu.
func (ss *subSession) lostLocked(err error) {
	if ss.gone() {
		return
	}
	w := ss.w
	if w.sessions[ss.addr] == ss {
		delete(w.sessions, ss.addr)
	}
	ss.err = fmt.Errorf("%w: the subscriber connection: %w", store.ErrWatchLost, err)
	close(ss.dead)
	for _, c := range ss.chans {
		select {
		case <-c.ready:
		default:
			c.err = ss.err
			close(c.ready)
		}
	}
	ss.subs.LoseAll(ss.err)
	_ = ss.ps.Close()
}

func (ss *subSession) lost(err error) {
	ss.w.mu.Lock()
	defer ss.w.mu.Unlock()
	ss.lostLocked(err)
}

// run is the connection's goroutine: it connects, then reads until the
// connection ends.
func (ss *subSession) run() {
	w := ss.w
	// PING connects (the PubSub dials on its first command) and is the
	// queue's first entry. Nothing else is sent before it: Watch waits
	// for connected, and the lock is not held while it dials.
	w.mu.Lock()
	ss.queue = append(ss.queue, sent{kind: 'p'})
	w.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), watchHealthEvery)
	err := ss.ps.Ping(ctx)
	cancel()
	w.mu.Lock()
	if err != nil {
		ss.lostLocked(err)
	} else if !ss.gone() {
		close(ss.connected)
	}
	w.mu.Unlock()
	pinged := false
	for {
		msg, err := ss.ps.ReceiveTimeout(context.Background(), watchHealthEvery)
		w.mu.Lock()
		stopped := ss.gone()
		w.mu.Unlock()
		if stopped {
			return
		}
		if err != nil {
			var ne interface{ Timeout() bool }
			if errors.As(err, &ne) && ne.Timeout() && !pinged {
				pinged = true
				w.mu.Lock()
				ss.send(sent{kind: 'p'}, func(ctx context.Context) error { return ss.ps.Ping(ctx) })
				w.mu.Unlock()
				continue
			}
			if isRedisError(err) {
				// An error reply to the oldest command.
				if err := ss.refused(err); err != nil {
					ss.lost(err)
					return
				}
				continue
			}
			ss.lost(err)
			return
		}
		pinged = false
		if err := ss.received(msg); err != nil {
			ss.lost(err)
			return
		}
	}
}

// isRedisError reports whether err is an error reply of the server.
func isRedisError(err error) bool {
	var re goredis.Error
	return errors.As(err, &re)
}

// received handles one message or reply from the server, and returns an
// error if it does not match what was sent.
func (ss *subSession) received(msg any) error {
	switch m := msg.(type) {
	case *goredis.Message:
		ss.subs.Notify(m.Channel)
		return nil
	case *goredis.Pong:
		ss.w.mu.Lock()
		defer ss.w.mu.Unlock()
		if len(ss.queue) == 0 || ss.queue[0].kind != 'p' {
			return fmt.Errorf("a PONG answered no PING")
		}
		ss.queue = ss.queue[1:]
		return nil
	case *goredis.Subscription:
		ss.w.mu.Lock()
		defer ss.w.mu.Unlock()
		switch m.Kind {
		case "ssubscribe":
			if len(ss.queue) == 0 || ss.queue[0].kind != 's' || ss.queue[0].channel != m.Channel {
				return fmt.Errorf("a confirmation of SSUBSCRIBE %q matched no command sent", m.Channel)
			}
			close(ss.queue[0].c.ready)
			ss.queue = ss.queue[1:]
			return nil
		case "sunsubscribe":
			if len(ss.queue) > 0 && ss.queue[0].kind == 'u' && ss.queue[0].channel == m.Channel {
				ss.queue = ss.queue[1:]
				return nil
			}
			// Unsubscribed by the server: the channel's slot moved.
			if c := ss.chans[m.Channel]; c != nil {
				delete(ss.chans, m.Channel)
				ss.subs.Lose(m.Channel, fmt.Errorf("%w: the server unsubscribed channel %q (its slot moved)", store.ErrWatchLost, m.Channel))
			}
			return nil
		}
	}
	return fmt.Errorf("unexpected %T from the subscriber connection: %v", msg, msg)
}

// refused handles an error reply: the oldest command failed. A refused
// SSUBSCRIBE fails the watches waiting for it (an unknown command, from a
// server before Redis 7.0, fails every later Watch at once).
func (ss *subSession) refused(rerr error) error {
	ss.w.mu.Lock()
	defer ss.w.mu.Unlock()
	if len(ss.queue) == 0 {
		return fmt.Errorf("an error reply answered no command: %w", rerr)
	}
	what := ss.queue[0]
	ss.queue = ss.queue[1:]
	if what.kind != 's' {
		return nil
	}
	err := fmt.Errorf("SSUBSCRIBE %q: %w", what.channel, rerr)
	switch msg := rerr.Error(); {
	case strings.Contains(strings.ToLower(msg), "unknown command"):
		err = fmt.Errorf("%w: the server has no sharded pub/sub (Redis 7.0 or later): %w", store.ErrSkip, rerr)
		ss.w.unsupported = err
	case strings.HasPrefix(msg, "NOPERM"):
		err = fmt.Errorf("%w: the ACL user may not subscribe to the store's channels (&<prefix>*): %w", store.ErrSkip, rerr)
		ss.w.unsupported = err
	}
	what.c.err = err
	close(what.c.ready)
	if ss.chans[what.channel] == what.c {
		delete(ss.chans, what.channel)
	}
	return nil
}
