package httpguard

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// A problem is one kind of answer the middleware gives instead of the
// handler's, as an RFC 9457 problem details object. Its name, appended to
// the problem base (see [WithProblemBase]), is its stable "type".
type problem struct {
	name   string
	title  string
	status int
}

// The problems, each described under its name in docs/http.md.
var (
	problemKeyMissing          = problem{"key-missing", "Idempotency-Key is missing", http.StatusBadRequest}
	problemKeyInvalid          = problem{"key-invalid", "Idempotency-Key is invalid", http.StatusBadRequest}
	problemExpiryInvalid       = problem{"expiry-invalid", expirySecondsHeader + " is invalid", http.StatusBadRequest}
	problemRequestUnkeyable    = problem{"request-unkeyable", "The request cannot be keyed", http.StatusBadRequest}
	problemBodyUnreadable      = problem{"body-unreadable", "The request body could not be read", http.StatusBadRequest}
	problemPrincipalMissing    = problem{"principal-missing", "No authenticated caller", http.StatusForbidden}
	problemBodyTooLarge        = problem{"body-too-large", "Request body too large for an idempotent request", http.StatusRequestEntityTooLarge}
	problemInProgress          = problem{"in-progress", "A request with this Idempotency-Key is being processed", http.StatusConflict}
	problemKeyReused           = problem{"key-reused", "Idempotency-Key reused with a different request", http.StatusUnprocessableEntity}
	problemResponseUnavailable = problem{"response-unavailable", "The response to this Idempotency-Key was not kept", http.StatusGone}
	problemStoreUnavailable    = problem{"store-unavailable", "Idempotency records are unavailable", http.StatusServiceUnavailable}
	problemFirstFailed         = problem{"first-failed", "The first request with this Idempotency-Key failed", http.StatusServiceUnavailable}
	problemInternal            = problem{"internal", "Idempotency failure", http.StatusInternalServerError}
)

// problemBody is the RFC 9457 JSON object.
type problemBody struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
}

// writeProblem answers with p and detail, as application/problem+json.
// retryAfter > 0 adds a Retry-After header (seconds).
func (m *middleware) writeProblem(w http.ResponseWriter, p problem, detail string, retryAfter int) {
	body, _ := json.Marshal(problemBody{Type: m.c.problemBase + p.name, Title: p.title, Status: p.status, Detail: detail})
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-store")
	if retryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(retryAfter))
	}
	w.WriteHeader(p.status)
	_, _ = w.Write(body)
}
