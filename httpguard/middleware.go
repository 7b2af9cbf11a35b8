package httpguard

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/internal/canonjson"
	"github.com/idemguard/idemguard/internal/transport"
)

// Middleware returns net/http middleware that guards the requests of next
// with g: see the package documentation. It reports an invalid option or a
// nil guard as an error; [MustMiddleware] panics instead.
func Middleware(g *guard.Guard, opts ...Option) (func(http.Handler) http.Handler, error) {
	c := defaults()
	for _, o := range opts {
		o.apply(&c)
	}
	// A response the status policy does not store is the guarded
	// function's error, never a definite one: the guard releases the key
	// and keeps the records of the steps the handler completed, whose side
	// effects happened (a result filter would release those too).
	t, err := transport.New(g, c.Config, c.fingerprint != nil,
		guard.WithCodec(codec{}),
		guard.WithDefiniteErrors(nil))
	if err != nil {
		return nil, err
	}
	c.Config = t.Config
	m := &middleware{t: t, c: c}
	return func(next http.Handler) http.Handler {
		h := *m
		h.next = next
		h.mux, _ = next.(*http.ServeMux)
		return &h
	}, nil
}

// MustMiddleware is [Middleware] that panics if an option is invalid or
// the guard is nil, as regexp.MustCompile does, for middleware built once
// at start-up.
func MustMiddleware(g *guard.Guard, opts ...Option) func(http.Handler) http.Handler {
	mw, err := Middleware(g, opts...)
	if err != nil {
		panic(err)
	}
	return mw
}

// middleware is one installation of the middleware in front of next.
type middleware struct {
	t    *transport.Transport // shared by every installation of one middleware
	c    config
	next http.Handler
	mux  *http.ServeMux // next, when it is one: it names the route
}

// DefaultFingerprint is the default request fingerprint: the SHA-256 of
// the method, the escaped path, the raw query and the body. A JSON body
// (Content-Type application/json, or a type ending in +json) is hashed in
// its RFC 8785 canonical form, so that a client that serialises the same
// JSON again (another member order, other white space, 1e2 for 100) sends
// the same request; as in RFC 8785, numbers are compared as IEEE-754
// doubles. Any other body, or one that is not valid JSON, is hashed as it
// is. Two requests with the same key but another path, query or body get
// 422.
func DefaultFingerprint(r *http.Request, body []byte) string {
	h := sha256.New()
	io.WriteString(h, r.Method)
	h.Write([]byte{0})
	io.WriteString(h, r.URL.EscapedPath())
	h.Write([]byte{'?'})
	io.WriteString(h, r.URL.RawQuery)
	h.Write([]byte{0})
	if isJSON(r.Header.Get("Content-Type")) {
		if canonical, _, err := canonjson.AppendText(nil, body); err == nil {
			h.Write([]byte("json\x00"))
			h.Write(canonical)
			return hex.EncodeToString(h.Sum(nil))
		}
	}
	h.Write(body)
	return hex.EncodeToString(h.Sum(nil))
}

// isJSON reports whether the media type contentType names JSON:
// application/json, or any type with the +json suffix (RFC 6839).
func isJSON(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	return mt == "application/json" || (strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json"))
}

// route names r's route.
func (m *middleware) route(r *http.Request) (route string, pattern bool) {
	switch {
	case m.c.route != nil:
		return m.c.route(r), true
	case r.Pattern != "":
		return r.Pattern, true
	case m.mux != nil:
		if _, p := m.mux.Handler(r); p != "" {
			return p, true
		}
	}
	return r.URL.Path, false
}

// ServeHTTP guards one request.
func (m *middleware) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !m.t.Guards(r.Method) || (m.c.skip != nil && m.c.skip(r)) {
		m.next.ServeHTTP(w, r)
		return
	}
	if m.t.Guard().Disabled() {
		m.unguarded(w, r)
		return
	}
	req := transport.Request{
		Keys:        r.Header.Values(m.c.keyHeader),
		Method:      r.Method,
		Credentials: r.Header.Values("Authorization"),
	}
	var pattern bool
	req.Route, pattern = m.route(r)
	if m.c.principal != nil && len(req.Keys) > 0 {
		req.Principal, req.HasPrincipal = m.c.principal(r), true
	}
	in, keyless, refusal, err := m.t.Prologue(req)
	switch {
	case keyless:
		m.unguarded(w, r)
		return
	case refusal != 0:
		m.answer(w, r, refusal, err, 0, nil)
		return
	}
	var buf [3]guard.CallOption // the request's own call options, on the stack
	extra := buf[:0]
	ttl := m.t.TTL()
	if m.c.maxRequestTTL > 0 {
		if v := r.Header.Values(expirySecondsHeader); len(v) > 0 {
			if ttl, err = m.requestTTL(v); err != nil {
				m.writeProblem(w, problemExpiryInvalid, err.Error(), 0)
				return
			}
			extra = append(extra, guard.WithTTL(ttl))
		}
	}
	if d, ok := preferWait(r.Header); ok {
		// Prefer: wait=N (RFC 7240) shortens a duplicate's wait; it never
		// lengthens the one the API allows.
		extra = m.preferredWait(extra, d)
	}
	if m.c.fingerprint != nil {
		body, ok := m.readBody(w, r)
		if !ok {
			return
		}
		in.F = m.c.fingerprint(r, body)
	}
	attrs := []attribute.KeyValue{attribute.String("http.request.method", r.Method)}
	if pattern {
		attrs = append(attrs, attribute.String("http.route", in.K.Route))
	}
	extra = append(extra, adapt.WithSpanAttributes(attrs...))

	var fresh *response // the response to send when the handler ran here
	ran := false
	resp, out, st, err := transport.Run(r.Context(), m.t, in, func(ctx context.Context) (*response, error) {
		ran = true
		rec := newRecorder(w, m.c.MaxResponse, func(h http.Header, status int) {
			m.setHeaders(h, m.freshStatus(status), m.freshExpiry(status, ttl))
		})
		m.next.ServeHTTP(rec, r.WithContext(ctx))
		stored, f := rec.finish(m.c.setCookie, m.c.statusHeader, m.c.expiresHeader)
		fresh = f
		if !m.c.stores(stored.Status) {
			return nil, &notStored{stored}
		}
		return stored, nil
	}, extra...)

	var ns *notStored
	switch {
	case err == nil && (out == guard.OutcomeExecuted || out == guard.OutcomeReleased):
		if fresh != nil {
			// The expiry of the record just written.
			m.serve(w, fresh, statusExecuted, st.ExpiresAt)
		}
	case ran && errors.As(err, &ns):
		// Released: served, not stored.
		if fresh != nil {
			m.serve(w, fresh, statusReleased, time.Time{})
		}
	case errors.As(err, &ns) && ns.resp.unstorable:
		// The response of the first request in this process, which this
		// one followed, was not stored and streamed past the bound:
		// there is nothing to send.
		m.writeProblem(w, problemFirstFailed, fmt.Sprintf("The first request with this %s failed, and its response could not be kept for this one; the key is free again. Retry the same request.", m.c.keyHeader), 1)
	case errors.As(err, &ns):
		// The response of the first request in this process, which this
		// one followed (reject mode), was not stored.
		m.serve(w, ns.resp, statusReleased, time.Time{})
	case err == nil && out == guard.OutcomeShared && resp.unstorable:
		// Shared by the first request in this process (wait mode), which
		// streamed a response too large to keep: there is nothing to send.
		m.answer(w, r, transport.ResponseUnavailable, nil, 0, st)
	case err == nil && (out == guard.OutcomeReplayed || out == guard.OutcomeShared):
		m.serve(w, resp, statusReplayed, st.ExpiresAt)
	case err == nil:
		// Unguarded (the selection was empty): served as it ran.
		if fresh != nil {
			m.serve(w, fresh, "", time.Time{})
		}
	case ran:
		// The handler ran, but its outcome was not recorded (the store
		// failed until the lease ran out, or another caller took the key
		// over): serve what it answered, which is what happened.
		m.t.NotRecorded(r.Context(), err, slog.String("method", r.Method), slog.String("route", in.K.Route))
		if fresh != nil {
			m.serve(w, fresh, "", time.Time{})
		}
	default:
		refusal, retry := m.t.Refuse(r.Context(), err, slog.String("method", r.Method), slog.String("path", r.URL.Path))
		m.answer(w, r, refusal, err, retry, st)
	}
}

// unguarded serves r as an unguarded call: for a disabled guard
// (IDEMGUARD_DISABLED), and for a request without a key that may go
// without one (WithKeyOptional). The handler runs inside a call, as the
// function of any unguarded call does, so that guard.Step in it runs its
// function unguarded. The response is the handler's, without idempotency
// headers.
func (m *middleware) unguarded(w http.ResponseWriter, r *http.Request) {
	// It fails only on an empty scope, which WithScope refuses.
	_, _ = transport.Unguarded(r.Context(), m.t, func(ctx context.Context) (struct{}, error) {
		m.next.ServeHTTP(w, r.WithContext(ctx))
		return struct{}{}, nil
	})
}

// answer answers a request the middleware refuses with the problem that
// names refusal; detail is the invalid key's error, retry the Retry-After
// in seconds, st the state of the request's call, if it ran one.
func (m *middleware) answer(w http.ResponseWriter, r *http.Request, refusal transport.Refusal, detail error, retry int, st *transport.CallState) {
	switch refusal {
	case transport.KeyMissing:
		m.writeProblem(w, problemKeyMissing, fmt.Sprintf("%s %s requires an %s header: a unique value, such as a random UUID, that the client sends again when it retries the request.", r.Method, r.URL.Path, m.c.keyHeader), 0)
	case transport.KeyInvalid:
		m.writeProblem(w, problemKeyInvalid, capitalise(detail.Error())+".", 0)
	case transport.PrincipalMissing:
		m.writeProblem(w, problemPrincipalMissing, "Idempotent requests to this API need an authenticated caller, so that one caller's key never meets another's.", 0)
	case transport.InProgress:
		m.writeProblem(w, problemInProgress, fmt.Sprintf("A request with this %s is still being processed. Retry the same request, unchanged, in %d s; it will then get the first request's response.", m.c.keyHeader, retry), retry)
	case transport.KeyReused:
		m.writeProblem(w, problemKeyReused, fmt.Sprintf("This %s was first used with a different request (method, path, query or body). A key must not be reused for another request; send this request with a new key.", m.c.keyHeader), 0)
	case transport.ResponseUnavailable:
		if st != nil {
			m.setHeaders(w.Header(), "", st.ExpiresAt)
		}
		m.writeProblem(w, problemResponseUnavailable, fmt.Sprintf("The request with this %s was processed, but its response was too large to keep, so it cannot be replayed. It will not be processed again: look up its result instead of retrying.", m.c.keyHeader), 0)
	case transport.StoreUnavailable:
		m.writeProblem(w, problemStoreUnavailable, "The request was not processed: its idempotency record could not be read or written. Retrying the same request is safe.", retry)
	case transport.RequestUnkeyable:
		m.writeProblem(w, problemRequestUnkeyable, "The request cannot be keyed: its route or caller is not valid UTF-8.", 0)
	case transport.Canceled:
		m.writeProblem(w, problemStoreUnavailable, "The request was cancelled before it was processed. Retrying the same request is safe.", retry)
	default:
		m.writeProblem(w, problemInternal, "The request failed in the idempotency layer.", 0)
	}
}

// notStored is the guarded function's error for a response the status
// policy does not store: the guard releases the key, and the middleware
// serves the response.
type notStored struct{ resp *response }

func (e *notStored) Error() string {
	return fmt.Sprintf("httpguard: a %d response is not stored", e.resp.Status)
}

// freshStatus is the status header's value for a response that ran now.
func (m *middleware) freshStatus(status int) string {
	if m.c.stores(status) {
		return statusExecuted
	}
	return statusReleased
}

// freshExpiry is when a response that ran now with status, and is sent
// before its record is written (it was flushed), stops being replayed, or
// zero if it is not stored: this server's reading of the record's expiry,
// which the guard computes when the handler returns, so never later than
// the record's.
func (m *middleware) freshExpiry(status int, ttl time.Duration) time.Time {
	if !m.c.stores(status) {
		return time.Time{}
	}
	return m.t.Guard().Now().Add(ttl)
}

// setHeaders sets the status header (unless status is "") and the expiry
// header (unless expires is zero) in h. The expiry is rounded up to the
// second, as the stores keep it, so that every replay says the same.
func (m *middleware) setHeaders(h http.Header, status string, expires time.Time) {
	if status != "" && m.c.statusHeader != "" {
		h.Set(m.c.statusHeader, status)
	}
	if !expires.IsZero() && m.c.expiresHeader != "" {
		h.Set(m.c.expiresHeader, transport.Expires(expires).UTC().Format(http.TimeFormat))
	}
}

// serve writes a stored (or buffered) response with the middleware's
// headers, and its trailers after its body. A response that was sent
// without a Content-Type is replayed without one: net/http does not sniff
// it.
func (m *middleware) serve(w http.ResponseWriter, resp *response, status string, expires time.Time) {
	h := w.Header()
	for name, values := range resp.Header {
		h[name] = slices.Clone(values) // a shared response's slices stay untouched
	}
	if _, ok := resp.Header["Content-Type"]; !ok {
		h["Content-Type"] = nil
	}
	m.setHeaders(h, status, expires)
	if len(resp.Trailer) > 0 {
		names := make([]string, 0, len(resp.Trailer))
		for name := range resp.Trailer {
			names = append(names, name)
		}
		slices.Sort(names)
		h.Set("Trailer", strings.Join(names, ", "))
		h.Del("Content-Length")
	}
	w.WriteHeader(resp.Status)
	if len(resp.Body) > 0 {
		_, _ = w.Write(resp.Body)
	}
	for name, values := range resp.Trailer {
		h[name] = slices.Clone(values)
	}
}

// requestTTL reads the record life a client asks for.
func (m *middleware) requestTTL(values []string) (time.Duration, error) {
	if len(values) != 1 {
		return 0, fmt.Errorf("Send at most one %s header.", expirySecondsHeader)
	}
	n, err := strconv.ParseInt(values[0], 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%s must be a positive whole number of seconds, got %q.", expirySecondsHeader, values[0])
	}
	if limit := int64(m.c.maxRequestTTL / time.Second); n > limit {
		n = limit
	}
	return time.Duration(n) * time.Second, nil
}

// readBody reads the request body for the fingerprint and puts it back for
// the handler. It answers the request itself and reports false when the
// body is too large or cannot be read.
func (m *middleware) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	tooLarge := func() ([]byte, bool) {
		m.writeProblem(w, problemBodyTooLarge, fmt.Sprintf("Requests with an %s may have a body of at most %d bytes.", m.c.keyHeader, m.c.maxBody), 0)
		return nil, false
	}
	if r.ContentLength > m.c.maxBody {
		return tooLarge()
	}
	if r.Body == nil || r.Body == http.NoBody {
		return nil, true
	}
	body, err := readAll(r.Body, r.ContentLength, m.c.maxBody)
	if err != nil {
		m.writeProblem(w, problemBodyUnreadable, "The request body could not be read to the end.", 0)
		return nil, false
	}
	if int64(len(body)) > m.c.maxBody {
		return tooLarge()
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	return body, true
}

// readAll reads body up to limit+1 bytes, in one allocation when its
// length is announced.
func readAll(body io.Reader, length, limit int64) ([]byte, error) {
	if length < 0 || length > limit {
		return io.ReadAll(io.LimitReader(body, limit+1))
	}
	b := make([]byte, length, length+1)
	if _, err := io.ReadFull(body, b); err != nil {
		return nil, err
	}
	// A body longer than announced is net/http's error to report.
	n, err := body.Read(b[length : length+1])
	if err != nil && err != io.EOF {
		return nil, err
	}
	return b[:length+int64(n)], nil
}

func capitalise(s string) string {
	if s == "" || s[0] < 'a' || s[0] > 'z' {
		return s
	}
	return string(s[0]-'a'+'A') + s[1:]
}
