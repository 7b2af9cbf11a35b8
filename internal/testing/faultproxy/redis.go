package faultproxy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// RedisFaults lists the faults of [Redis], in report order:
// [Reset] (TCP RST before the command reaches the server),
// [ResetAfter] (the command runs, its reply is lost, RST),
// [ConnCloseAfter], [ErrorReply] and [Latency].
var RedisFaults = []Fault{Reset, ResetAfter, ConnCloseAfter, ErrorReply, Latency}

// Redis is a loopback TCP proxy in front of a Redis server that reads the
// RESP commands a client sends and injects connection-level faults into
// them: resets before and after a command ran, a reply lost to a closed
// connection, error replies and latency. Point a client's address at
// [Redis.Addr]. It is safe for concurrent use.
type Redis struct {
	*picker
	tcp

	commands atomic.Int64
}

// NewRedis starts a fault-injecting proxy on 127.0.0.1 (a free port) in
// front of the Redis server at target, a loopback host:port.
func NewRedis(target string, cfg Config) (*Redis, error) {
	fp, err := newPicker(cfg, RedisFaults)
	if err != nil {
		return nil, err
	}
	p := &Redis{picker: fp}
	if err = p.listen(target, p.serve); err != nil {
		return nil, err
	}
	return p, nil
}

// Requests returns the number of commands the proxy received.
func (p *Redis) Requests() int64 { return p.commands.Load() }

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
func (p *Redis) serve(client net.Conn) {
	server, ok := p.dial(client)
	if !ok {
		return
	}
	defer p.conns.untrack(server)
	var once sync.Once
	end := func(rst bool) {
		once.Do(func() {
			if rst {
				resetConn(client) // RST instead of FIN
			} else {
				client.Close()
			}
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
		case Latency:
			time.Sleep(delay)
		case Reset:
			end(true)
			return
		case ResetAfter:
			o = pending{lose: true, rst: true}
		case ConnCloseAfter:
			o = pending{lose: true}
		case ErrorReply:
			o.inject = []byte("-LOADING Redis is loading the dataset in memory (injected by the fault proxy)\r\n")
			if p.coin() {
				o.inject = []byte("-BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE. (injected by the fault proxy)\r\n")
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
var errProtocol = errors.New("faultproxy: RESP protocol error")

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
