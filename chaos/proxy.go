package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Fault is a kind of fault the [Proxy] injects into a request.
type Fault string

// The faults, as named in reports. "Before" faults never reach DynamoDB;
// "after" faults reach it (the write happens) and lose the response, which
// is what makes a retried conditional write meet its own first attempt.
const (
	// FaultError5xx answers 500 InternalServerError or 503
	// ServiceUnavailable without forwarding the request.
	FaultError5xx Fault = "error_5xx"
	// FaultLostResponse forwards the request, discards DynamoDB's answer
	// and answers 500 InternalServerError instead.
	FaultLostResponse Fault = "lost_response"
	// FaultReset resets the connection (TCP RST) without forwarding the
	// request.
	FaultReset Fault = "conn_reset"
	// FaultResetAfter forwards the request, then resets the connection
	// instead of answering.
	FaultResetAfter Fault = "conn_reset_after"
	// FaultThrottle answers 400 ProvisionedThroughputExceededException,
	// as DynamoDB does when it throttles, without forwarding the request.
	FaultThrottle Fault = "throttle"
	// FaultLatency delays the request by up to the configured maximum
	// latency, then forwards it.
	FaultLatency Fault = "latency"
)

// Faults lists every fault kind, in report order.
var Faults = []Fault{FaultError5xx, FaultLostResponse, FaultReset, FaultResetAfter, FaultThrottle, FaultLatency}

// FaultConfig says which faults a [Proxy] injects and how often.
type FaultConfig struct {
	// Rate is the probability, in [0, 1], that a request gets a fault.
	Rate float64
	// Weights are the relative odds of each kind when a request gets a
	// fault; nil or empty means every kind in [Faults] equally.
	Weights map[Fault]float64
	// MaxLatency is the longest delay of [FaultLatency]; the delay is
	// uniform in [MaxLatency/10, MaxLatency]. Zero means 300 ms.
	MaxLatency time.Duration
	// Seed seeds the fault decisions.
	Seed uint64
	// Script, if set, gives the faults of the first len(Script) requests
	// in order ("" for none) before Rate applies; for tests.
	Script []Fault
}

// Proxy is a loopback HTTP reverse proxy in front of DynamoDB (Local) that
// injects faults into the requests passing through it. Point a client's
// endpoint at [Proxy.URL]. It is safe for concurrent use.
type Proxy struct {
	*faultPicker
	rp  *httputil.ReverseProxy
	srv *http.Server
	ln  net.Listener

	requests atomic.Int64
}

// faultPicker draws the fault of each request or command a proxy passes
// on, and counts them. It is safe for concurrent use.
type faultPicker struct {
	cfg     FaultConfig
	kinds   []Fault
	weights []float64

	mu     sync.Mutex
	rng    *rand.Rand      // protected by mu
	script []Fault         // protected by mu
	counts map[Fault]int64 // protected by mu
}

// newFaultPicker checks cfg and returns a picker that draws from kinds,
// weighted by cfg.Weights.
func newFaultPicker(cfg FaultConfig, kinds []Fault) (*faultPicker, error) {
	if cfg.Rate < 0 || cfg.Rate > 1 {
		return nil, fmt.Errorf("chaos: fault rate %v is not in [0, 1]", cfg.Rate)
	}
	if cfg.MaxLatency <= 0 {
		cfg.MaxLatency = 300 * time.Millisecond
	}
	p := &faultPicker{
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
			return nil, fmt.Errorf("chaos: negative weight for %s", k)
		}
		if w > 0 {
			p.kinds = append(p.kinds, k)
			p.weights = append(p.weights, w)
		}
	}
	if len(p.kinds) == 0 && cfg.Rate > 0 {
		return nil, errors.New("chaos: fault rate > 0 but every fault weight is 0")
	}
	return p, nil
}

// NewProxy starts a fault-injecting proxy on 127.0.0.1 (a free port) in
// front of target, an http URL on a loopback address.
func NewProxy(target string, cfg FaultConfig) (*Proxy, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, fmt.Errorf("chaos: proxy target %q: %w", target, err)
	}
	if u.Scheme != "http" {
		return nil, fmt.Errorf("chaos: proxy target %q: want an http:// URL", target)
	}
	if err := checkLoopback(u.Host); err != nil {
		return nil, fmt.Errorf("chaos: proxy target: %w", err)
	}
	fp, err := newFaultPicker(cfg, Faults)
	if err != nil {
		return nil, err
	}
	p := &Proxy{faultPicker: fp}
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     30 * time.Second,
	}
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.Out.URL.Scheme, r.Out.URL.Host = u.Scheme, u.Host
			// The client signed the request for the proxy's host; keep
			// the Host header it signed (DynamoDB Local does not check
			// signatures, but nothing here should look forged).
			r.Out.Host = r.In.Host
		},
		Transport: tr,
		ErrorLog:  nil,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			writeDynamoError(w, http.StatusBadGateway, "InternalServerError", "chaos proxy: upstream: "+err.Error())
		},
	}
	p.ln, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go p.srv.Serve(p.ln)
	return p, nil
}

// checkLoopback fails unless hostport names a loopback address.
func checkLoopback(hostport string) error {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		host = hostport
	}
	if host == "localhost" {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("%q is not a loopback address; the chaos suite only talks to local servers", hostport)
	}
	return nil
}

// URL returns the proxy's endpoint, http://127.0.0.1:port.
func (p *Proxy) URL() string { return "http://" + p.ln.Addr().String() }

// Close stops the proxy.
func (p *Proxy) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := p.srv.Shutdown(ctx); err != nil {
		return p.srv.Close()
	}
	return nil
}

// Requests returns the number of requests the proxy received.
func (p *Proxy) Requests() int64 { return p.requests.Load() }

// Counts returns the faults injected so far, by kind.
func (p *faultPicker) Counts() map[Fault]int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := make(map[Fault]int64, len(p.counts))
	for k, n := range p.counts {
		m[k] = n
	}
	return m
}

// pick decides the fault of the next request ("" for none) and, for
// latency, its delay.
func (p *faultPicker) pick() (Fault, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var f Fault
	switch {
	case len(p.script) > 0:
		f, p.script = p.script[0], p.script[1:]
	case p.cfg.Rate > 0 && p.rng.Float64() < p.cfg.Rate:
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
	if f == FaultLatency {
		lo := p.cfg.MaxLatency / 10
		d = lo + time.Duration(p.rng.Int64N(int64(p.cfg.MaxLatency-lo)+1))
	}
	return f, d
}

// ServeHTTP forwards r to DynamoDB, injecting the fault [Proxy.pick] draws.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.requests.Add(1)
	f, delay := p.pick()
	switch f {
	case "":
		p.rp.ServeHTTP(w, r)
	case FaultLatency:
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
		p.rp.ServeHTTP(w, r)
	case FaultError5xx:
		io.Copy(io.Discard, r.Body)
		if p.coin() {
			writeDynamoError(w, http.StatusInternalServerError, "InternalServerError", "Internal server error (injected by the chaos proxy)")
		} else {
			writeDynamoError(w, http.StatusServiceUnavailable, "ServiceUnavailable", "Service unavailable (injected by the chaos proxy)")
		}
	case FaultThrottle:
		io.Copy(io.Discard, r.Body)
		writeDynamoError(w, http.StatusBadRequest, "ProvisionedThroughputExceededException",
			"The level of configured provisioned throughput for the table was exceeded. Consider increasing your provisioning level with the UpdateTable API. (injected by the chaos proxy)")
	case FaultLostResponse:
		p.rp.ServeHTTP(discard{h: http.Header{}}, r)
		writeDynamoError(w, http.StatusInternalServerError, "InternalServerError", "Internal server error (injected by the chaos proxy after the request was applied)")
	case FaultReset:
		io.Copy(io.Discard, r.Body)
		reset(w)
	case FaultResetAfter:
		p.rp.ServeHTTP(discard{h: http.Header{}}, r)
		reset(w)
	}
}

func (p *faultPicker) coin() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rng.IntN(2) == 0
}

// writeDynamoError answers as DynamoDB answers an error: the AWS JSON 1.0
// body with __type and message, and the x-amzn-ErrorType header the SDK
// reads the error code from.
func writeDynamoError(w http.ResponseWriter, status int, code, msg string) {
	ns := "com.amazonaws.dynamodb.v20120810"
	if code == "ServiceUnavailable" {
		ns = "com.amazon.coral.availability"
	}
	body := fmt.Sprintf(`{"__type":"%s#%s","message":%q}`, ns, code, msg)
	h := w.Header()
	h.Set("Content-Type", "application/x-amz-json-1.0")
	h.Set("x-amzn-ErrorType", code+":http://internal.amazon.com/coral/"+ns+"/")
	h.Set("x-amzn-RequestId", "chaos-"+strings.ReplaceAll(time.Now().Format("150405.000000000"), ".", ""))
	h.Set("Content-Length", fmt.Sprint(len(body)))
	w.WriteHeader(status)
	io.WriteString(w, body)
}

// reset closes the client's connection with a TCP RST.
func reset(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic(http.ErrAbortHandler)
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetLinger(0) // close sends RST instead of FIN
	}
	conn.Close()
}

// discard is a ResponseWriter that drops the response: the request was
// applied, its answer is lost.
type discard struct{ h http.Header }

func (d discard) Header() http.Header         { return d.h }
func (d discard) Write(b []byte) (int, error) { return len(b), nil }
func (d discard) WriteHeader(int)             {}

// FaultCounts is the number of faults injected, by kind, with a stable
// order for printing.
type FaultCounts map[Fault]int64

// Total returns the number of faults of all kinds.
func (c FaultCounts) Total() int64 {
	var n int64
	for _, v := range c {
		n += v
	}
	return n
}

// String lists the counts: "conn_reset=3 error_5xx=5 …".
func (c FaultCounts) String() string {
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
