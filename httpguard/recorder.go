package httpguard

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/idemguard/idemguard/internal/respfmt"
)

// recorder is the http.ResponseWriter a guarded handler writes to. It
// buffers the response so that it can be stored before it is sent, and
// sends it itself (commits) only when it must: when the handler flushes,
// or when the body passes the bound on stored responses. A committed
// response streams to the client from then on; its bytes are still kept
// for the store while they fit, and it is stored with the header it was
// sent with.
//
// It does not implement http.Hijacker: a hijacked connection's bytes could
// be neither stored nor replayed, so hijacking a guarded request fails
// (http.ResponseController reports http.ErrNotSupported).
type recorder struct {
	w      http.ResponseWriter // the client's
	max    int
	commit func(header http.Header, status int) // adds the middleware's headers before the response is sent

	mu         sync.Mutex // the handler may write from several goroutines (it should not, but must not corrupt the record)
	header     http.Header
	status     int
	body       []byte
	sent       http.Header // the header as sent, once committed
	unstorable bool
	done       bool // the handler returned: later writes fail
}

// errWriteAfterReturn is what a handler's goroutine gets for writing after
// the handler returned: the response is already stored and sent.
var errWriteAfterReturn = errors.New("httpguard: write after the guarded handler returned")

func newRecorder(w http.ResponseWriter, max int, commit func(http.Header, int)) *recorder {
	return &recorder{w: w, max: max, commit: commit, header: make(http.Header)}
}

// Header returns the handler's response header map.
func (r *recorder) Header() http.Header { return r.header }

// WriteHeader records the status code. Informational (1xx) codes are
// dropped: they could not be replayed.
func (r *recorder) WriteHeader(code int) {
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code)) // as net/http does
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.status != 0 || code < 200 {
		return
	}
	r.status = code
}

// Write buffers p, or sends it once the response is committed.
func (r *recorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done {
		return 0, errWriteAfterReturn
	}
	if r.status == 0 {
		r.status = http.StatusOK
	}
	if !r.unstorable && len(r.body)+len(p) > r.max {
		if r.sent == nil {
			if err := r.commitLocked(); err != nil {
				return 0, err
			}
		}
		r.unstorable, r.body = true, nil
	}
	if !r.unstorable {
		r.body = append(r.body, p...)
	}
	if r.sent != nil {
		return r.w.Write(p)
	}
	return len(p), nil
}

// Flush sends what the handler wrote so far and commits the response.
func (r *recorder) Flush() { _ = r.FlushError() }

// FlushError is Flush that reports the client's writer's error, for
// http.ResponseController.
func (r *recorder) FlushError() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done {
		return errWriteAfterReturn
	}
	if r.sent == nil {
		if r.status == 0 {
			r.status = http.StatusOK
		}
		if err := r.commitLocked(); err != nil {
			return err
		}
	}
	return http.NewResponseController(r.w).Flush()
}

// SetReadDeadline sets the client connection's read deadline, for
// http.ResponseController.
func (r *recorder) SetReadDeadline(t time.Time) error {
	return http.NewResponseController(r.w).SetReadDeadline(t)
}

// SetWriteDeadline sets the client connection's write deadline, for
// http.ResponseController.
func (r *recorder) SetWriteDeadline(t time.Time) error {
	return http.NewResponseController(r.w).SetWriteDeadline(t)
}

// commitLocked sends the status, the headers and the body so far, and
// keeps the header as sent; r.mu is held. The Content-Type net/http would
// sniff from the body so far is made explicit, so that it is stored as it
// was sent.
func (r *recorder) commitLocked() error {
	h := r.w.Header()
	for name, values := range r.header {
		h[name] = append([]string(nil), values...)
	}
	if sniffs(h, r.status, r.body) {
		h.Set("Content-Type", http.DetectContentType(r.body))
	}
	r.commit(h, r.status)
	r.sent = h.Clone()
	r.w.WriteHeader(r.status)
	if len(r.body) > 0 {
		if _, err := r.w.Write(r.body); err != nil {
			return err
		}
	}
	return nil
}

// sniffs reports whether net/http would sniff the Content-Type of a
// response with header h, status and a first write of body.
func sniffs(h http.Header, status int, body []byte) bool {
	_, typed := h["Content-Type"]
	return !typed && len(body) > 0 && bodyAllowed(status) && h.Get("Content-Encoding") == "" && h.Get("Transfer-Encoding") == ""
}

// finish ends the handler's writes and returns what is stored: the
// response with its replay-safe headers (see replaySafe; drop names the
// middleware's own headers) and its trailers, or an unstorable one; and,
// unless the response was committed, the response to send now. A
// committed response is stored with the header it was sent with (what the
// handler set after the commit never reached the client), and its
// trailers are handed to the client's writer, for net/http to send. A
// buffered one carries the Content-Type net/http would sniff and, without
// trailers, its Content-Length, so that its replays are framed as it was.
func (r *recorder) finish(setCookie bool, drop ...string) (stored, fresh *response) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.done = true
	if r.status == 0 {
		r.status = http.StatusOK
	}
	header := r.header
	if r.sent != nil {
		header = r.sent
	}
	trailer := trailers(header, r.header)
	if r.sent != nil {
		// The client's writer has the declaration (the Trailer header was
		// sent); it needs the values.
		h := r.w.Header()
		for name, values := range trailer {
			h[http.TrailerPrefix+name] = values
		}
	}
	stored = &response{HTTP: respfmt.HTTP{Status: r.status}, unstorable: r.unstorable}
	if r.unstorable {
		return stored, nil
	}
	stored.Body, stored.Trailer = r.body, trailer
	stored.Header = replaySafe(header, setCookie, drop)
	if r.sent != nil {
		return stored, nil
	}
	fresh = &response{HTTP: respfmt.HTTP{Status: r.status, Header: header.Clone(), Body: r.body, Trailer: trailer}}
	for _, h := range []http.Header{stored.Header, fresh.Header} {
		for name := range trailer {
			delete(h, name)
			delete(h, http.TrailerPrefix+name)
		}
		delete(h, "Trailer")
		if sniffs(h, r.status, r.body) {
			h.Set("Content-Type", http.DetectContentType(r.body))
		}
		if bodyAllowed(r.status) && len(trailer) == 0 {
			h.Set("Content-Length", strconv.Itoa(len(r.body)))
		}
	}
	return stored, fresh
}

// trailers returns the trailers of a response whose header was declared
// (the Trailer field) in declared and whose values are now in now: the
// declared names, and those set with http.TrailerPrefix. It returns nil
// for none.
func trailers(declared, now http.Header) http.Header {
	var out http.Header
	add := func(name string, values []string) {
		if len(values) == 0 {
			return
		}
		if out == nil {
			out = make(http.Header)
		}
		out[http.CanonicalHeaderKey(name)] = append([]string(nil), values...)
	}
	for _, v := range declared["Trailer"] {
		for _, name := range strings.Split(v, ",") {
			if name = strings.TrimSpace(name); name != "" {
				add(name, now[http.CanonicalHeaderKey(name)])
			}
		}
	}
	for name, values := range now {
		if t, ok := strings.CutPrefix(name, http.TrailerPrefix); ok {
			add(t, values)
		}
	}
	return out
}

// bodyAllowed reports whether a response with status may have a body.
func bodyAllowed(status int) bool {
	return status != http.StatusNoContent && status != http.StatusNotModified
}

// hopByHop are the header fields that describe one connection (RFC 9110,
// section 7.6.1), or that net/http computes for each response.
var hopByHop = map[string]bool{
	"Connection":          true,
	"Keep-Alive":          true,
	"Proxy-Connection":    true,
	"Proxy-Authenticate":  true,
	"Proxy-Authorization": true,
	"Te":                  true,
	"Trailer":             true, // replayed from the stored trailers
	"Transfer-Encoding":   true,
	"Upgrade":             true,
	"Content-Length":      true, // set from the stored body
	"Date":                true, // a replay is a new message: net/http dates it
}

// replaySafe returns the headers of h that are safe to replay: without the
// hop-by-hop fields, those the Connection field names, trailers, and
// Set-Cookie unless setCookie.
func replaySafe(h http.Header, setCookie bool, drop []string) http.Header {
	out := make(http.Header, len(h))
	named := map[string]bool{}
	for _, v := range h["Connection"] {
		for _, f := range strings.Split(v, ",") {
			named[http.CanonicalHeaderKey(strings.TrimSpace(f))] = true
		}
	}
	for _, v := range h["Trailer"] {
		for _, f := range strings.Split(v, ",") {
			named[http.CanonicalHeaderKey(strings.TrimSpace(f))] = true
		}
	}
	for name, values := range h {
		switch {
		case hopByHop[name], named[name], strings.HasPrefix(name, http.TrailerPrefix):
		case name == "Set-Cookie" && !setCookie:
		default:
			out[name] = append([]string(nil), values...)
		}
	}
	for _, name := range drop {
		if name != "" {
			delete(out, name)
		}
	}
	return out
}
