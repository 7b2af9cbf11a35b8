package httpguard

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// recorder is the http.ResponseWriter a guarded handler writes to. It
// buffers the response so that it can be stored before it is sent, and
// sends it itself (commits) only when it must: when the handler flushes,
// or when the body passes the bound on stored responses. A committed
// response streams to the client from then on; its bytes are still kept
// for the store while they fit.
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
	committed  bool
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
		if !r.committed {
			if err := r.commitLocked(); err != nil {
				return 0, err
			}
		}
		r.unstorable, r.body = true, nil
	}
	if !r.unstorable {
		r.body = append(r.body, p...)
	}
	if r.committed {
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
	if !r.committed {
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

// commitLocked sends the status, the headers and the body so far; r.mu is
// held.
func (r *recorder) commitLocked() error {
	r.committed = true
	h := r.w.Header()
	for name, values := range r.header {
		h[name] = values
	}
	if _, ok := r.header["Content-Type"]; !ok && len(r.body) > 0 {
		h.Set("Content-Type", http.DetectContentType(r.body))
	}
	r.commit(h, r.status)
	r.w.WriteHeader(r.status)
	if len(r.body) > 0 {
		if _, err := r.w.Write(r.body); err != nil {
			return err
		}
	}
	return nil
}

// finish ends the handler's writes and returns what is stored: the
// response with its replay-safe headers (see replaySafe; drop names the
// middleware's own headers), or an unstorable one; and, unless the
// response was committed, the response to send now, with every header the
// handler set. Both carry the Content-Type net/http would sniff and the
// Content-Length, so that a replay is framed as the first response was.
func (r *recorder) finish(setCookie bool, drop ...string) (stored, fresh *response) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.done = true
	if r.status == 0 {
		r.status = http.StatusOK
	}
	stored = &response{status: r.status, unstorable: r.unstorable}
	if r.unstorable {
		return stored, nil
	}
	stored.body = r.body
	stored.header = replaySafe(r.header, setCookie, drop)
	fresh = &response{status: r.status, header: r.header, body: r.body}
	for _, h := range []http.Header{stored.header, fresh.header} {
		if _, ok := r.header["Content-Type"]; !ok && len(r.body) > 0 {
			h.Set("Content-Type", http.DetectContentType(r.body))
		}
		if bodyAllowed(r.status) {
			h.Set("Content-Length", strconv.Itoa(len(r.body)))
		}
	}
	if r.committed {
		fresh = nil
	}
	return stored, fresh
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
	"Trailer":             true,
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
