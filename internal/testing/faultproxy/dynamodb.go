package faultproxy

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"time"
)

// DynamoDBFaults lists the faults of [DynamoDB], in report order.
var DynamoDBFaults = []Fault{Error5xx, LostResponse, Reset, ResetAfter, Throttle, Latency}

// DynamoDB is a loopback HTTP reverse proxy in front of DynamoDB (Local)
// that injects the faults of [DynamoDBFaults] into the requests passing
// through it. Point a client's endpoint at [DynamoDB.URL]. It is safe for
// concurrent use.
type DynamoDB struct {
	*picker
	rp  *httputil.ReverseProxy
	srv *http.Server
	ln  net.Listener

	requests atomic.Int64
}

// NewDynamoDB starts a fault-injecting proxy on 127.0.0.1 (a free port) in
// front of target, an http URL on a loopback address.
func NewDynamoDB(target string, cfg Config) (*DynamoDB, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, fmt.Errorf("faultproxy: target %q: %w", target, err)
	}
	if u.Scheme != "http" {
		return nil, fmt.Errorf("faultproxy: target %q: want an http:// URL", target)
	}
	if err := CheckLoopback(u.Host); err != nil {
		return nil, fmt.Errorf("faultproxy: target: %w", err)
	}
	fp, err := newPicker(cfg, DynamoDBFaults)
	if err != nil {
		return nil, err
	}
	p := &DynamoDB{picker: fp}
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
			writeDynamoError(w, http.StatusBadGateway, "InternalServerError", "fault proxy: upstream: "+err.Error())
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

// URL returns the proxy's endpoint, http://127.0.0.1:port.
func (p *DynamoDB) URL() string { return "http://" + p.ln.Addr().String() }

// Close stops the proxy.
func (p *DynamoDB) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := p.srv.Shutdown(ctx); err != nil {
		return p.srv.Close()
	}
	return nil
}

// Requests returns the number of requests the proxy received.
func (p *DynamoDB) Requests() int64 { return p.requests.Load() }

// ServeHTTP forwards r to DynamoDB, injecting the fault [picker.pick] draws.
func (p *DynamoDB) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.requests.Add(1)
	f, delay := p.pick()
	switch f {
	case "":
		p.rp.ServeHTTP(w, r)
	case Latency:
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
		p.rp.ServeHTTP(w, r)
	case Error5xx:
		io.Copy(io.Discard, r.Body)
		if p.coin() {
			writeDynamoError(w, http.StatusInternalServerError, "InternalServerError", "Internal server error (injected by the fault proxy)")
		} else {
			writeDynamoError(w, http.StatusServiceUnavailable, "ServiceUnavailable", "Service unavailable (injected by the fault proxy)")
		}
	case Throttle:
		io.Copy(io.Discard, r.Body)
		writeDynamoError(w, http.StatusBadRequest, "ProvisionedThroughputExceededException",
			"The level of configured provisioned throughput for the table was exceeded. Consider increasing your provisioning level with the UpdateTable API. (injected by the fault proxy)")
	case LostResponse:
		p.rp.ServeHTTP(discard{h: http.Header{}}, r)
		writeDynamoError(w, http.StatusInternalServerError, "InternalServerError", "Internal server error (injected by the fault proxy after the request was applied)")
	case Reset:
		io.Copy(io.Discard, r.Body)
		reset(w)
	case ResetAfter:
		p.rp.ServeHTTP(discard{h: http.Header{}}, r)
		reset(w)
	}
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
	h.Set("x-amzn-RequestId", "faultproxy-"+strings.ReplaceAll(time.Now().Format("150405.000000000"), ".", ""))
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
	resetConn(conn)
}

// discard is a ResponseWriter that drops the response: the request was
// applied, its answer is lost.
type discard struct{ h http.Header }

func (d discard) Header() http.Header         { return d.h }
func (d discard) Write(b []byte) (int, error) { return len(b), nil }
func (d discard) WriteHeader(int)             {}
