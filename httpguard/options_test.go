package httpguard_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/httpguard"
	"github.com/idemguard/idemguard/internal/testing/reqcount"
	"github.com/idemguard/idemguard/internal/testing/teststores"
	"github.com/idemguard/idemguard/store"
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
	eachStore(t, func(t *testing.T, s store.Store, _ *reqcount.Counter) {
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
	eachStore(t, func(t *testing.T, s store.Store, _ *reqcount.Counter) {
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

// Set-Cookie is left out of stored responses unless WithSetCookieReplay,
// which stores and replays every Set-Cookie field the handler sent.
func TestSetCookieReplay(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store, _ *reqcount.Counter) {
		cookies := []string{"session=s1; Path=/; HttpOnly", "theme=dark"}
		var runs atomic.Int64
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			for _, c := range cookies {
				w.Header().Add("Set-Cookie", c)
			}
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, "signed in")
		})
		g := newGuard(t, s)
		for _, replayed := range []bool{false, true} {
			var opts []httpguard.Option
			if replayed {
				opts = append(opts, httpguard.WithSetCookieReplay())
			}
			runs.Store(0)
			srv := serve(t, g, h, opts...)
			key := "key-cookie-" + map[bool]string{false: "off", true: "on"}[replayed]
			first := post(t, srv.Client(), srv.URL+"/login", key, "x")
			replay := post(t, srv.Client(), srv.URL+"/login", key, "x")
			if got := first.header.Values("Set-Cookie"); !slices.Equal(got, cookies) {
				t.Errorf("replay option %v: first response's Set-Cookie %q, want %q", replayed, got, cookies)
			}
			if replay.header.Get("Idempotency-Key-Status") != "replayed" || runs.Load() != 1 {
				t.Fatalf("replay option %v: %d %v after %d runs, want a replay after 1", replayed, replay.status, replay.header, runs.Load())
			}
			sameResponse(t, first, replay)
			var want []string
			if replayed {
				want = cookies
			}
			if got := replay.header.Values("Set-Cookie"); !slices.Equal(got, want) {
				t.Errorf("replay option %v: replayed Set-Cookie %q, want %q", replayed, got, want)
			}
		}
	})
}

// WithProblemBase puts another prefix before every problem's name in its
// "type".
func TestProblemBase(t *testing.T) {
	const base = "urn:payments-api:problem:"
	srv := serve(t, newGuard(t, memoryStore()), &counting{}, httpguard.WithProblemBase(base))
	c := srv.Client()
	wantProblemType(t, post(t, c, srv.URL+"/payments", "", "x"), http.StatusBadRequest, base+"key-missing")
	wantProblemType(t, post(t, c, srv.URL+"/payments", `"unclosed`, "x"), http.StatusBadRequest, base+"key-invalid")
	if r := post(t, c, srv.URL+"/payments", "key-pb", "x"); r.status != http.StatusCreated {
		t.Fatalf("first: %d %s", r.status, r.body)
	}
	wantProblemType(t, post(t, c, srv.URL+"/payments", "key-pb", "another body"), http.StatusUnprocessableEntity, base+"key-reused")
}

// unrecorded is a store whose completions fail: the handler runs, and its
// response cannot be recorded.
type unrecorded struct{ store.Store }

func (unrecorded) Complete(context.Context, *store.Record) error {
	return errors.New("connection reset by peer")
}

// WithLogger: a response the handler made but the store could not record
// is served as it is, without the idempotency headers, and the middleware
// logs it at level Error on its logger, with the method, the route and
// the error.
func TestLogger(t *testing.T) {
	var logs teststores.Logs
	h := &counting{}
	// A 1 s lease: the guard retries the completion while the lease holds.
	g := newGuard(t, unrecorded{memoryStore()}, guard.WithLogger(slog.New(slog.DiscardHandler)))
	srv := serve(t, g, h, httpguard.WithGuardOptions(guard.WithLease(time.Second)), httpguard.WithLogger(logs.Logger()))
	r := post(t, srv.Client(), srv.URL+"/payments", "key-log", "x")
	if r.status != http.StatusCreated || !strings.Contains(string(r.body), `"run":1`) {
		t.Errorf("response: %d %s, want the handler's 201", r.status, r.body)
	}
	if got := r.header.Get("Idempotency-Key-Status"); got != "" {
		t.Errorf("Idempotency-Key-Status %q on a response that was not recorded, want none", got)
	}
	recs := logs.Records(t)
	if len(recs) != 1 {
		t.Fatalf("the middleware logged %d records, want 1: %v", len(recs), recs)
	}
	rec := recs[0]
	msg, _ := rec["msg"].(string)
	errText, _ := rec["error"].(string)
	if rec["level"] != "ERROR" || !strings.Contains(msg, "not recorded") || rec["method"] != "POST" || rec["route"] != "/payments" ||
		!strings.Contains(errText, "connection reset by peer") {
		t.Errorf("log record %v: want level ERROR, a message that says the response was not recorded, method POST, route /payments and the store's error", rec)
	}
}
