package httpguard_test

import (
	"encoding/json"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/idemguard/idemguard/httpguard"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/dynamodb/dynamodbtest"
)

// WithKeyPattern: a key the pattern does not match gets 400 key-invalid
// and the handler never runs; a key it matches is guarded, and its quoted
// form is the same key (the pattern sees the key unquoted).
func TestKeyPattern(t *testing.T) {
	uuid := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	h := &counting{}
	srv := serve(t, newGuard(t, memoryStore()), h, httpguard.WithKeyPattern(uuid))
	c := srv.Client()
	for _, key := range []string{
		"order-1",                                 // not a UUID
		"8e03978e-40d5-43e8-bc93-6894a57f932",     // a digit short
		"8E03978E-40D5-43E8-BC93-6894A57F9324",    // upper case
		`"8e03978e-40d5-43e8-bc93-6894a57f9324x"`, // quoted, a character too many
	} {
		p := wantProblem(t, post(t, c, srv.URL+"/payments", key, "x"), http.StatusBadRequest, "key-invalid")
		if !strings.Contains(p.Detail, "required format") {
			t.Errorf("key %s: detail %q does not say the key has the wrong format", key, p.Detail)
		}
	}
	if got := h.runs.Load(); got != 0 {
		t.Errorf("handler ran %d times for keys the pattern refuses, want 0", got)
	}

	const id = "8e03978e-40d5-43e8-bc93-6894a57f9324"
	first := post(t, c, srv.URL+"/payments", id, "x")
	if first.status != http.StatusCreated || first.header.Get("Idempotency-Key-Status") != "executed" {
		t.Fatalf("matching key: %d %v %s, want 201 executed", first.status, first.header, first.body)
	}
	quoted := post(t, c, srv.URL+"/payments", `"`+id+`"`, "x")
	if quoted.header.Get("Idempotency-Key-Status") != "replayed" {
		t.Errorf("quoted matching key: %d %v %s, want the replay", quoted.status, quoted.header, quoted.body)
	}
	sameResponse(t, first, quoted)
	if got := h.runs.Load(); got != 1 {
		t.Errorf("handler ran %d times, want 1", got)
	}
}

// WithFingerprint decides which requests under one key are the same one.
// Here it is the path and the body's "amount": a retry that changes only
// the note replays the first response, one that changes the amount gets
// 422, and the function is given each request's whole body.
func TestFingerprint(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store, _ *dynamodbtest.Counter) {
		var mu sync.Mutex
		var seen []string // the bodies the fingerprint was given; protected by mu
		byAmount := func(r *http.Request, body []byte) string {
			mu.Lock()
			seen = append(seen, string(body))
			mu.Unlock()
			var v struct {
				Amount json.Number `json:"amount"`
			}
			if err := json.Unmarshal(body, &v); err != nil {
				return "unparsable " + string(body)
			}
			return r.URL.Path + " " + v.Amount.String()
		}
		h := &counting{}
		srv := serve(t, newGuard(t, s), h, httpguard.WithFingerprint(byAmount))
		c := srv.Client()
		bodies := []string{`{"amount":100,"note":"web"}`, `{"amount":100,"note":"phone"}`, `{"amount":999,"note":"web"}`}

		first := post(t, c, srv.URL+"/payments", "key-fp", bodies[0])
		if first.status != http.StatusCreated || !strings.Contains(string(first.body), `"run":1`) {
			t.Fatalf("first: %d %s", first.status, first.body)
		}
		sameAmount := post(t, c, srv.URL+"/payments", "key-fp", bodies[1])
		if sameAmount.header.Get("Idempotency-Key-Status") != "replayed" {
			t.Errorf("another note, the same amount: %d %v %s, want the replay", sameAmount.status, sameAmount.header, sameAmount.body)
		}
		sameResponse(t, first, sameAmount)
		wantProblem(t, post(t, c, srv.URL+"/payments", "key-fp", bodies[2]), http.StatusUnprocessableEntity, "key-reused")
		if got := h.runs.Load(); got != 1 {
			t.Errorf("handler ran %d times, want 1", got)
		}
		mu.Lock()
		defer mu.Unlock()
		if !slices.Equal(seen, bodies) {
			t.Errorf("the fingerprint was given bodies %q, want %q", seen, bodies)
		}
	})
}

// WithFingerprint(nil) turns the fingerprint off: a key reused with
// another body replays the first response instead of getting 422.
func TestFingerprintOff(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store, _ *dynamodbtest.Counter) {
		h := &counting{}
		srv := serve(t, newGuard(t, s), h, httpguard.WithFingerprint(nil))
		c := srv.Client()
		first := post(t, c, srv.URL+"/payments", "key-nofp", `{"amount":100}`)
		if first.status != http.StatusCreated || string(first.body) != `{"run":1,"got":"{\"amount\":100}"}` {
			t.Fatalf("first: %d %s", first.status, first.body)
		}
		other := post(t, c, srv.URL+"/payments", "key-nofp", `{"amount":999}`)
		if other.header.Get("Idempotency-Key-Status") != "replayed" {
			t.Errorf("another body: %d %v %s, want the first response replayed", other.status, other.header, other.body)
		}
		sameResponse(t, first, other)
		if got := h.runs.Load(); got != 1 {
			t.Errorf("handler ran %d times, want 1", got)
		}
	})
}
