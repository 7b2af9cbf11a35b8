// Package faultproxy holds loopback proxies that inject faults between a
// store's client and its server: delays, answers lost after the request was
// applied, and connections cut before or after it. The chaos suite (chaos/)
// puts them in front of the idempotency store, and the linearizability
// tests of each store (store/*/linearizable_test.go) record histories
// through them.
//
//   - [DynamoDB] is an HTTP reverse proxy that speaks DynamoDB's errors.
//   - [Redis] reads RESP commands and faults them one by one.
//   - [Postgres] reads the PostgreSQL wire protocol and faults each
//     request (the messages up to a Sync or a simple Query) at its message
//     boundaries.
//   - [Delay] is a plain TCP delay line, for a replication link.
//
// Every proxy listens on 127.0.0.1 (a free port) and refuses a target that
// is not a loopback address: the suites only talk to local servers.
package faultproxy

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sort"
	"strings"
	"sync"
	"time"
)

// Fault is a kind of fault a proxy injects into a request.
type Fault string

// The faults, as named in reports. "Before" faults never reach the server;
// "after" faults reach it (the write happens) and lose the answer, which is
// what makes a retried conditional write meet its own first attempt.
const (
	// Error5xx answers 500 InternalServerError or 503 ServiceUnavailable
	// without forwarding the request ([DynamoDB]).
	Error5xx Fault = "error_5xx"
	// LostResponse forwards the request, discards the answer and answers
	// 500 InternalServerError instead ([DynamoDB]).
	LostResponse Fault = "lost_response"
	// Reset resets the connection (TCP RST) without forwarding the
	// request.
	Reset Fault = "conn_reset"
	// ResetAfter forwards the request, then resets the connection instead
	// of answering.
	ResetAfter Fault = "conn_reset_after"
	// Throttle answers 400 ProvisionedThroughputExceededException, as
	// DynamoDB does when it throttles, without forwarding the request
	// ([DynamoDB]).
	Throttle Fault = "throttle"
	// Latency delays the request by up to the configured maximum latency,
	// then forwards it.
	Latency Fault = "latency"
	// ConnCloseAfter forwards the command, discards its reply and closes
	// the client's connection with a FIN ([Redis], [Postgres]): the client
	// reads EOF. go-redis retries that on a new connection, so the command
	// runs a second time and meets its own first run.
	ConnCloseAfter Fault = "conn_close_after"
	// ErrorReply answers the command, without forwarding it, with an error
	// reply Redis gives while it cannot serve: LOADING (go-redis retries
	// it) or BUSY (a script past its time limit; store/redis reports it as
	// throttling), at random ([Redis]).
	ErrorReply Fault = "error_reply"
)

// Config says which faults a proxy injects and how often.
type Config struct {
	// Rate is the probability, in [0, 1], that a request gets a fault.
	Rate float64
	// Weights are the relative odds of each kind when a request gets a
	// fault; nil or empty means every kind the proxy knows equally.
	Weights map[Fault]float64
	// MaxLatency is the longest delay of [Latency]; the delay is uniform
	// in [MaxLatency/10, MaxLatency]. Zero means 300 ms.
	MaxLatency time.Duration
	// Seed seeds the fault decisions.
	Seed uint64
	// Script, if set, gives the faults of the first len(Script) requests
	// in order ("" for none) before Rate applies; for tests.
	Script []Fault
}

// picker draws the fault of each request or command a proxy passes on,
// and counts them. It is safe for concurrent use.
type picker struct {
	cfg     Config
	kinds   []Fault
	weights []float64

	mu     sync.Mutex
	rng    *rand.Rand      // protected by mu
	script []Fault         // protected by mu
	counts map[Fault]int64 // protected by mu
}

// newPicker checks cfg and returns a picker that draws from kinds,
// weighted by cfg.Weights.
func newPicker(cfg Config, kinds []Fault) (*picker, error) {
	if cfg.Rate < 0 || cfg.Rate > 1 {
		return nil, fmt.Errorf("faultproxy: fault rate %v is not in [0, 1]", cfg.Rate)
	}
	if cfg.MaxLatency <= 0 {
		cfg.MaxLatency = 300 * time.Millisecond
	}
	p := &picker{
		cfg:    cfg,
		rng:    rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		script: append([]Fault(nil), cfg.Script...),
		counts: make(map[Fault]int64),
	}
	for _, k := range kinds {
		w := 1.0
		if len(cfg.Weights) > 0 {
			w = cfg.Weights[k]
		}
		if w < 0 {
			return nil, fmt.Errorf("faultproxy: negative weight for %s", k)
		}
		if w > 0 {
			p.kinds = append(p.kinds, k)
			p.weights = append(p.weights, w)
		}
	}
	if len(p.kinds) == 0 && cfg.Rate > 0 {
		return nil, errors.New("faultproxy: fault rate > 0 but every fault weight is 0")
	}
	return p, nil
}

// Counts returns the faults injected so far, by kind.
func (p *picker) Counts() Counts {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := make(Counts, len(p.counts))
	for k, n := range p.counts {
		m[k] = n
	}
	return m
}

// SetScript makes the next requests get faults, in order ("" for none),
// before the rate applies again.
func (p *picker) SetScript(faults ...Fault) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.script = append(p.script[:0], faults...)
}

// SetRate changes the probability that a request gets a fault, clamped to
// [0, 1]; a proxy built with no kinds to draw ignores it.
func (p *picker) SetRate(rate float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cfg.Rate = min(max(rate, 0), 1)
}

// pick decides the fault of the next request ("" for none) and, for
// latency, its delay.
func (p *picker) pick() (Fault, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var f Fault
	switch {
	case len(p.script) > 0:
		f, p.script = p.script[0], p.script[1:]
	case p.cfg.Rate > 0 && len(p.kinds) > 0 && p.rng.Float64() < p.cfg.Rate:
		total := 0.0
		for _, w := range p.weights {
			total += w
		}
		x := p.rng.Float64() * total
		f = p.kinds[len(p.kinds)-1]
		for i, w := range p.weights {
			if x < w {
				f = p.kinds[i]
				break
			}
			x -= w
		}
	}
	if f == "" {
		return "", 0
	}
	p.counts[f]++
	var d time.Duration
	if f == Latency {
		lo := p.cfg.MaxLatency / 10
		d = lo + time.Duration(p.rng.Int64N(int64(p.cfg.MaxLatency-lo)+1))
	}
	return f, d
}

func (p *picker) coin() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rng.IntN(2) == 0
}

// CheckLoopback fails unless hostport names a loopback address.
func CheckLoopback(hostport string) error {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		host = hostport
	}
	if host == "localhost" {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("%q is not a loopback address: only local servers are allowed", hostport)
	}
	return nil
}

// Counts is the number of faults injected, by kind, with a stable order
// for printing.
type Counts map[Fault]int64

// Total returns the number of faults of all kinds.
func (c Counts) Total() int64 {
	var n int64
	for _, v := range c {
		n += v
	}
	return n
}

// String lists the counts: "conn_reset=3 error_5xx=5 …".
func (c Counts) String() string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, string(k))
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%d", k, c[Fault(k)])
	}
	return b.String()
}

// tcp is what the TCP proxies share: the listener on 127.0.0.1, the
// goroutine that accepts connections and hands each to serve, the server
// they are sent to, and the connections open through the proxy.
type tcp struct {
	ln    net.Listener
	wg    sync.WaitGroup
	conns conns

	mu     sync.Mutex
	target string // protected by mu
}

// listen starts accepting connections on a free loopback port, for the
// server at target (a loopback host:port), serving each connection with
// serve in a goroutine of its own.
func (t *tcp) listen(target string, serve func(net.Conn)) error {
	if err := CheckLoopback(target); err != nil {
		return fmt.Errorf("faultproxy: target: %w", err)
	}
	t.target = target
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	t.ln = ln
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		for {
			c, err := t.ln.Accept()
			if err != nil {
				return
			}
			if !t.conns.track(c) {
				return
			}
			t.wg.Add(1)
			go func() {
				defer t.wg.Done()
				defer t.conns.untrack(c)
				serve(c)
			}()
		}
	}()
	return nil
}

// Addr returns the proxy's address, 127.0.0.1:port.
func (t *tcp) Addr() string { return t.ln.Addr().String() }

// Retarget sends the connections opened from now on to the server at
// target, a loopback host:port, and closes every connection open through
// the proxy: a failover as a client behind a virtual IP sees it, every
// request in flight losing its answer.
func (t *tcp) Retarget(target string) error {
	if err := CheckLoopback(target); err != nil {
		return fmt.Errorf("faultproxy: target: %w", err)
	}
	t.mu.Lock()
	t.target = target
	t.mu.Unlock()
	t.conns.closeAll(false)
	return nil
}

// dial connects to the target for client, and tracks the connection; on
// failure it closes client and reports false. The caller untracks it.
func (t *tcp) dial(client net.Conn) (net.Conn, bool) {
	t.mu.Lock()
	target := t.target
	t.mu.Unlock()
	server, err := net.DialTimeout("tcp", target, 5*time.Second)
	if err != nil {
		client.Close()
		return nil, false
	}
	if !t.conns.track(server) {
		client.Close()
		return nil, false
	}
	return server, true
}

// Close stops the proxy and closes every connection through it.
func (t *tcp) Close() error {
	err := t.ln.Close()
	t.conns.closeAll(true)
	t.wg.Wait()
	return err
}

// conns tracks a proxy's open connections, both sides, so that Close and a
// retarget can end them. The zero value is ready to use.
type conns struct {
	mu     sync.Mutex
	open   map[net.Conn]struct{} // protected by mu
	closed bool                  // protected by mu
}

// track registers c as open; it reports false (and closes c) once the
// proxy is closed.
func (s *conns) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		c.Close()
		return false
	}
	if s.open == nil {
		s.open = make(map[net.Conn]struct{})
	}
	s.open[c] = struct{}{}
	return true
}

func (s *conns) untrack(c net.Conn) {
	s.mu.Lock()
	delete(s.open, c)
	s.mu.Unlock()
}

// closeAll closes every open connection; with final, it also refuses the
// ones tracked afterwards.
func (s *conns) closeAll(final bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if final {
		s.closed = true
	}
	for c := range s.open {
		c.Close()
	}
}

// resetConn closes c with a TCP RST instead of a FIN.
func resetConn(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.Close()
}
