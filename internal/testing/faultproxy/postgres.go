package faultproxy

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// PostgresFaults lists the faults of [Postgres], in report order: [Reset]
// (TCP RST before the request reaches the server), [ResetAfter] (the
// request runs, its answer is lost, RST), [ConnCloseAfter] (the same with
// a FIN) and [Latency].
var PostgresFaults = []Fault{Reset, ResetAfter, ConnCloseAfter, Latency}

// Postgres is a loopback TCP proxy in front of a PostgreSQL server that
// reads the frontend/backend protocol (version 3) and injects faults at
// message boundaries. A request is the messages a client sends up to and
// including a Sync or a simple Query: pgx sends a statement, or a pipeline
// of them, as one request, and the server answers each with one
// ReadyForQuery. Each request draws its fault: the connection reset before
// the request is forwarded; the request forwarded, the whole answer
// dropped and the connection ended (RST or FIN) when its ReadyForQuery
// arrives, so that the request ran but its client never hears; or a delay
// before it is forwarded. The start-up and authentication exchange are
// never faulted, and a cancel request is passed through. Point a client's
// host and port at [Postgres.Addr], with sslmode=disable: the proxy
// declines TLS. It is safe for concurrent use.
type Postgres struct {
	*picker
	tcp

	requests atomic.Int64
}

// NewPostgres starts a fault-injecting proxy on 127.0.0.1 (a free port) in
// front of the PostgreSQL server at target, a loopback host:port.
func NewPostgres(target string, cfg Config) (*Postgres, error) {
	fp, err := newPicker(cfg, PostgresFaults)
	if err != nil {
		return nil, err
	}
	p := &Postgres{picker: fp}
	if err = p.listen(target, p.serve); err != nil {
		return nil, err
	}
	return p, nil
}

// Requests returns the number of requests the proxy received.
func (p *Postgres) Requests() int64 { return p.requests.Load() }

// The start-up packets' codes.
const (
	pgCancel      = 80877102
	pgSSLRequest  = 80877103
	pgGSSENCReq   = 80877104
	pgMaxStartup  = 10000
	pgMaxMessage  = 1 << 30
	pgReadyForQry = 'Z'
)

// pgUnit is what the proxy does with the answer to one request.
type pgUnit struct {
	lose bool // drop the answer and end the connection at its ReadyForQuery
	rst  bool // with lose: end it with a RST instead of a FIN
}

// serve proxies one client connection.
func (p *Postgres) serve(client net.Conn) {
	server, ok := p.dial(client)
	if !ok {
		return
	}
	defer p.conns.untrack(server)
	var once sync.Once
	ended := make(chan struct{})
	end := func(rst bool) {
		once.Do(func() {
			close(ended)
			if rst {
				resetConn(client)
			} else {
				client.Close()
			}
			server.Close()
		})
	}
	defer end(false)

	cr := bufio.NewReader(client)
	// Start-up: decline TLS and GSS encryption, pass a cancel request
	// through as bytes, forward the start-up message.
	for {
		pkt, code, err := readStartup(cr)
		if err != nil {
			return
		}
		switch code {
		case pgSSLRequest, pgGSSENCReq:
			if _, err := client.Write([]byte{'N'}); err != nil {
				return
			}
			continue
		case pgCancel:
			if _, err := server.Write(pkt); err == nil {
				io.Copy(io.Discard, server) // the server closes it
			}
			return
		}
		if _, err := server.Write(pkt); err != nil {
			return
		}
		break
	}

	units := make(chan pgUnit, 1024)
	units <- pgUnit{} // the start-up exchange ends with a ReadyForQuery
	answers := make(chan struct{})
	go func() { // server → client
		defer close(answers)
		sr := bufio.NewReader(server)
		var (
			cur  pgUnit
			open bool
			msg  []byte
		)
		for {
			var err error
			msg, err = readMessage(sr, msg[:0])
			if err != nil {
				end(false)
				return
			}
			if !open {
				select {
				case cur = <-units:
					open = true
				case <-ended:
					return
				}
			}
			if !cur.lose {
				if _, err := client.Write(msg); err != nil {
					end(false)
					return
				}
			}
			if msg[0] == pgReadyForQry {
				if cur.lose {
					end(cur.rst)
					return
				}
				open = false
			}
		}
	}()
	defer func() { end(false); <-answers }()

	var (
		inUnit bool
		msg    []byte
		err    error
	)
	for {
		msg, err = readMessage(cr, msg[:0])
		if err != nil {
			return
		}
		typ := msg[0]
		// Password and SASL messages belong to the start-up exchange, and
		// Terminate has no answer: neither starts a request.
		if !inUnit && typ != 'p' && typ != 'X' {
			inUnit = true
			p.requests.Add(1)
			f, delay := p.pick()
			var u pgUnit
			switch f {
			case Latency:
				time.Sleep(delay)
			case Reset:
				end(true)
				return
			case ResetAfter:
				u = pgUnit{lose: true, rst: true}
			case ConnCloseAfter:
				u = pgUnit{lose: true}
			}
			select {
			case units <- u:
			case <-answers:
				return
			}
		}
		if _, err := server.Write(msg); err != nil {
			return
		}
		if typ == 'S' || typ == 'Q' {
			inUnit = false
		}
	}
}

var errPgProtocol = errors.New("faultproxy: PostgreSQL protocol error")

// readStartup reads one start-up packet (a length, then a code and the
// rest) and returns it whole, with its code.
func readStartup(r *bufio.Reader) ([]byte, uint32, error) {
	var hdr [8]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, 0, err
	}
	n := binary.BigEndian.Uint32(hdr[:4])
	if n < 8 || n > pgMaxStartup {
		return nil, 0, errPgProtocol
	}
	pkt := make([]byte, n)
	copy(pkt, hdr[:])
	if _, err := io.ReadFull(r, pkt[8:]); err != nil {
		return nil, 0, err
	}
	return pkt, binary.BigEndian.Uint32(hdr[4:]), nil
}

// readMessage appends one message (a type byte, a length that counts
// itself, the body) to buf and returns it.
func readMessage(r *bufio.Reader, buf []byte) ([]byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n < 4 || n > pgMaxMessage {
		return nil, errPgProtocol
	}
	buf = append(buf, hdr[:]...)
	start := len(buf)
	buf = append(buf, make([]byte, n-4)...)
	if _, err := io.ReadFull(r, buf[start:]); err != nil {
		return nil, err
	}
	return buf, nil
}
