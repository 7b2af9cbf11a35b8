package httpguard

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
)

// preferWait returns the wait a request asks for with an RFC 7240
// preference, "Prefer: wait=N" (N seconds): how long a duplicate of a
// request still in progress may wait for its response before its 409. It
// reports false when the request states no valid wait preference. A
// preference may share a Prefer header with others ("respond-async,
// wait=5"), and the first wait stated counts.
func preferWait(h http.Header) (time.Duration, bool) {
	for _, v := range h.Values("Prefer") {
		for _, p := range strings.Split(v, ",") {
			p, _, _ = strings.Cut(p, ";") // a preference's parameters
			name, val, ok := strings.Cut(strings.TrimSpace(p), "=")
			if !ok || !strings.EqualFold(strings.TrimSpace(name), "wait") {
				continue
			}
			n, err := strconv.ParseUint(strings.Trim(strings.TrimSpace(val), `"`), 10, 31)
			if err != nil {
				return 0, false
			}
			return time.Duration(n) * time.Second, true
		}
	}
	return 0, false
}

// preferredWait returns extra, a request's own call options, with its
// wait shortened to d: a duplicate
// that finds the request in progress waits at most d (d = 0: answers 409
// at once) and never longer than the API's own wait budget. An API that
// does not wait (guard.WithWait(0)) keeps answering at once.
func (m *middleware) preferredWait(extra []guard.CallOption, d time.Duration) []guard.CallOption {
	s, err := m.t.Settings(extra...)
	if err != nil || s.Mode != adapt.Wait || d >= s.WaitBudget {
		return extra
	}
	if d == 0 {
		return append(extra, guard.WithWait(0))
	}
	return append(extra, guard.WithWait(d))
}
