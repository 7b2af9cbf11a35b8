package chaos

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// The Redis scenario's faults, injected by [RedisProxy] into single
// commands on a connection (a pipeline's commands each draw their own).
const (
	// FaultConnCloseAfter forwards the command, discards its reply and
	// closes the client's connection with a FIN: the client reads EOF,
	// which go-redis retries on a new connection, so the command runs a
	// second time and meets its own first run.
	FaultConnCloseAfter Fault = "conn_close_after"
	// FaultErrorReply answers the command, without forwarding it, with an
	// error reply Redis gives while it cannot serve: LOADING (go-redis
	// retries it) or BUSY (a script past its time limit; store/redis
	// reports it as throttling), at random.
	FaultErrorReply Fault = "error_reply"
)

// RedisFaults lists the faults of [RedisProxy], in report order:
// [FaultReset] (TCP RST before the command reaches the server),
// [FaultResetAfter] (the command runs, its reply is lost, RST),
// [FaultConnCloseAfter], [FaultErrorReply] and [FaultLatency].
var RedisFaults = []Fault{FaultReset, FaultResetAfter, FaultConnCloseAfter, FaultErrorReply, FaultLatency}

// RedisProxy is a loopback TCP proxy in front of a Redis server that reads
// the RESP commands a client sends and injects connection-level faults into
// them: resets before and after a command ran, a reply lost to a closed
// connection, error replies and latency. Point a client's address at
// [RedisProxy.Addr]. It is safe for concurrent use.
type RedisProxy struct {
	*faultPicker
	target string
	ln     net.Listener

	commands atomic.Int64
	wg       sync.WaitGroup
	mu       sync.Mutex
	conns    map[net.Conn]struct{} // protected by mu: open connections, both sides
	closed   bool                  // protected by mu
}

// NewRedisProxy starts a fault-injecting proxy on 127.0.0.1 (a free port)
// in front of the Redis server at target, a loopback host:port.
func NewRedisProxy(target string, cfg FaultConfig) (*RedisProxy, error) {
	if err := checkLoopback(target); err != nil {
		return nil, fmt.Errorf("chaos: proxy target: %w", err)
	}
	fp, err := newFaultPicker(cfg, RedisFaults)
	if err != nil {
		return nil, err
	}
	p := &RedisProxy{faultPicker: fp, target: target, conns: make(map[net.Conn]struct{})}
	if p.ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		return nil, err
	}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the proxy's address, 127.0.0.1:port.
func (p *RedisProxy) Addr() string { return p.ln.Addr().String() }

// Requests returns the number of commands the proxy received.
func (p *RedisProxy) Requests() int64 { return p.commands.Load() }

// Close stops the proxy and closes every connection through it.
func (p *RedisProxy) Close() error {
	err := p.ln.Close()
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

// track registers c as open; it reports false (and closes c) once the
// proxy is closed.
func (p *RedisProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *RedisProxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

func (p *RedisProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer p.untrack(c)
			p.serve(c)
		}()
	}
}

// pending is what the client is owed for one command, in order: the
// server's reply, passed on or lost, or an injected reply.
type pending struct {
	lose   bool   // read the server's reply, drop it and end the connection
	rst    bool   // with lose: end it with a RST instead of a FIN
	inject []byte // answer this instead; the command was not forwarded
}

// serve proxies one client connection: commands go to the server in
// order, each with the fault pick draws, and replies come back in order,
// less the ones a fault loses.
func (p *RedisProxy) serve(client net.Conn) {
	server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		client.Close()
		return
	}
	if !p.track(server) {
		client.Close()
		return
	}
	defer p.untrack(server)
	var once sync.Once
	end := func(rst bool) {
		once.Do(func() {
			if tc, ok := client.(*net.TCPConn); ok && rst {
				tc.SetLinger(0) // close sends RST instead of FIN
			}
			client.Close()
			server.Close()
		})
	}
	owed := make(chan pending, 1024)
	replies := make(chan struct{})
	go func() { // server → client
		defer close(replies)
		r := bufio.NewReader(server)
		var buf bytes.Buffer
		for o := range owed {
			if o.inject != nil {
				if _, err := client.Write(o.inject); err != nil {
					end(false)
					return
				}
				continue
			}
			buf.Reset()
			if err := readReply(r, &buf); err != nil {
				end(false)
				return
			}
			if o.lose {
				end(o.rst)
				return
			}
			if _, err := client.Write(buf.Bytes()); err != nil {
				end(false)
				return
			}
		}
	}()
	defer func() {
		close(owed)
		<-replies
		end(false)
	}()
	r := bufio.NewReader(client)
	var cmd bytes.Buffer
	for {
		cmd.Reset()
		if err := readCommand(r, &cmd); err != nil {
			return
		}
		p.commands.Add(1)
		f, delay := p.pick()
		var o pending
		switch f {
		case FaultLatency:
			time.Sleep(delay)
		case FaultReset:
			end(true)
			return
		case FaultResetAfter:
			o = pending{lose: true, rst: true}
		case FaultConnCloseAfter:
			o = pending{lose: true}
		case FaultErrorReply:
			o.inject = []byte("-LOADING Redis is loading the dataset in memory (injected by the chaos proxy)\r\n")
			if p.coin() {
				o.inject = []byte("-BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE. (injected by the chaos proxy)\r\n")
			}
		}
		if o.inject == nil {
			if _, err := server.Write(cmd.Bytes()); err != nil {
				return
			}
		}
		select {
		case owed <- o:
		case <-replies: // the connection ended
			return
		}
		if o.lose {
			<-replies // the reply is lost with the connection
			return
		}
	}
}

// errProtocol is a reply or command the proxy cannot parse.
var errProtocol = errors.New("chaos: RESP protocol error")

// readLine appends one CRLF-terminated line to buf and returns it.
func readLine(r *bufio.Reader, buf *bytes.Buffer) ([]byte, error) {
	line, err := r.ReadBytes('\n')
	if err != nil {
		return nil, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return nil, errProtocol
	}
	buf.Write(line)
	return line, nil
}

// length parses the number after a line's type byte.
func length(line []byte) (int, error) {
	n, err := strconv.Atoi(string(line[1 : len(line)-2]))
	if err != nil {
		return 0, errProtocol
	}
	return n, nil
}

// readCommand appends one command, a RESP array of bulk strings as
// clients send them, to buf.
func readCommand(r *bufio.Reader, buf *bytes.Buffer) error {
	line, err := readLine(r, buf)
	if err != nil {
		return err
	}
	if line[0] != '*' {
		return errProtocol // an inline command: no client library sends one
	}
	n, err := length(line)
	if err != nil {
		return err
	}
	for range n {
		line, err := readLine(r, buf)
		if err != nil {
			return err
		}
		if line[0] != '$' {
			return errProtocol
		}
		size, err := length(line)
		if err != nil || size < 0 {
			return errProtocol
		}
		if _, err := io.CopyN(buf, r, int64(size)+2); err != nil {
			return err
		}
	}
	return nil
}

// readReply appends one reply, RESP2 or RESP3, to buf.
func readReply(r *bufio.Reader, buf *bytes.Buffer) error {
	line, err := readLine(r, buf)
	if err != nil {
		return err
	}
	switch line[0] {
	case '+', '-', ':', ',', '#', '_', '(': // simple types
		return nil
	case '$', '=', '!': // bulk types; $-1 is the RESP2 null
		n, err := length(line)
		if err != nil || n < 0 {
			return err
		}
		_, err = io.CopyN(buf, r, int64(n)+2)
		return err
	case '*', '~', '>', '%', '|': // aggregates; *-1 is the RESP2 null array
		n, err := length(line)
		if err != nil || n < 0 {
			return err
		}
		if line[0] == '%' || line[0] == '|' {
			n *= 2
		}
		for range n {
			if err := readReply(r, buf); err != nil {
				return err
			}
		}
		if line[0] == '|' { // attributes precede the reply they describe
			return readReply(r, buf)
		}
		return nil
	}
	return errProtocol
}
