package faultproxy

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Delay is a loopback TCP proxy that passes bytes through unchanged, each
// chunk in each direction held back by a fixed delay, in order: a slow
// network link, such as the replication link between a primary and its
// replica, whose lag decides how many acknowledged writes a failover
// loses. It is safe for concurrent use.
type Delay struct {
	tcp
	delay atomic.Int64 // nanoseconds
}

// NewDelay starts a delaying proxy on 127.0.0.1 (a free port) in front of
// target, a loopback host:port.
func NewDelay(target string, d time.Duration) (*Delay, error) {
	p := &Delay{}
	p.delay.Store(int64(d))
	var err error
	if err = p.listen(target, p.serve); err != nil {
		return nil, err
	}
	return p, nil
}

// SetDelay changes the delay of the bytes read from now on.
func (p *Delay) SetDelay(d time.Duration) { p.delay.Store(int64(d)) }

func (p *Delay) serve(client net.Conn) {
	server, ok := p.dial(client)
	if !ok {
		return
	}
	defer p.conns.untrack(server)
	var once sync.Once
	end := func() {
		once.Do(func() {
			client.Close()
			server.Close()
		})
	}
	var pumps sync.WaitGroup
	pumps.Add(2)
	go func() { defer pumps.Done(); p.pump(client, server, end) }()
	go func() { defer pumps.Done(); p.pump(server, client, end) }()
	pumps.Wait()
}

// chunk is bytes read at a time, to be written a delay later.
type chunk struct {
	at time.Time
	b  []byte
}

// pump copies src to dst, each chunk a delay after it was read, and calls
// end when either side fails.
func (p *Delay) pump(src, dst net.Conn, end func()) {
	q := make(chan chunk, 4096)
	go func() {
		defer close(q)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				q <- chunk{at: time.Now().Add(time.Duration(p.delay.Load())), b: buf[:n]}
			}
			if err != nil {
				if err != io.EOF {
					end()
				}
				return
			}
		}
	}()
	for c := range q {
		if d := time.Until(c.at); d > 0 {
			time.Sleep(d)
		}
		if _, err := dst.Write(c.b); err != nil {
			end()
			for range q { // let the reader finish
			}
			return
		}
	}
	end()
}
