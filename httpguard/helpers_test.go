package httpguard_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/httpguard"
	"github.com/idemguard/idemguard/internal/testing/teststores"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/memory"
)

// eachStore runs test on the memory store and on DynamoDB Local.
var eachStore = teststores.Each

// newGuard returns a guard over s.
var newGuard = teststores.NewGuard

// serve starts a loopback HTTP server with h behind the middleware.
func serve(t testing.TB, g *guard.Guard, h http.Handler, opts ...httpguard.Option) *httptest.Server {
	t.Helper()
	mw, err := httpguard.Middleware(g, opts...)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw(h))
	t.Cleanup(srv.Close)
	return srv
}

// result is a response as the client read it.
type result struct {
	status  int
	header  http.Header
	body    []byte
	trailer http.Header
}

// post sends a POST with key (none if ""), body and extra headers
// ("Name: value").
func post(t testing.TB, client *http.Client, url, key, body string, headers ...string) result {
	t.Helper()
	return do(t, client, http.MethodPost, url, key, body, headers...)
}

func do(t testing.TB, client *http.Client, method, url, key, body string, headers ...string) result {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	for _, h := range headers {
		name, value, _ := strings.Cut(h, ": ")
		req.Header.Add(name, value)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Errorf("%s %s: %v", method, url, err)
		return result{}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Errorf("%s %s: reading the body: %v", method, url, err)
	}
	return result{resp.StatusCode, resp.Header, b, resp.Trailer}
}

// problem is an RFC 9457 body.
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
}

// wantProblem checks that r is the problem named name with status.
func wantProblem(t *testing.T, r result, status int, name string) problem {
	t.Helper()
	return wantProblemType(t, r, status, "https://github.com/idemguard/idemguard/blob/main/docs/http.md#"+name)
}

// wantProblemType checks that r is a problem with status whose "type" is
// typ.
func wantProblemType(t *testing.T, r result, status int, typ string) problem {
	t.Helper()
	if r.status != status {
		t.Errorf("status %d, want %d (body %s)", r.status, status, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type %q, want application/problem+json", ct)
	}
	var p problem
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Fatalf("problem body %q: %v", r.body, err)
	}
	if p.Type != typ {
		t.Errorf("problem type %q, want %q", p.Type, typ)
	}
	if p.Status != status || p.Title == "" || p.Detail == "" {
		t.Errorf("problem %+v: want status %d, a title and a detail", p, status)
	}
	return p
}

// sameResponse checks that a replay carries the first response's status,
// headers and body, byte for byte, apart from the headers that differ by
// design: Date, the status header, and Set-Cookie (not replayed).
func sameResponse(t *testing.T, first, replay result) {
	t.Helper()
	if first.status != replay.status {
		t.Errorf("replay status %d, first %d", replay.status, first.status)
	}
	if !bytes.Equal(first.body, replay.body) {
		t.Errorf("replay body %q, first %q", replay.body, first.body)
	}
	skip := map[string]bool{"Date": true, "Idempotency-Key-Status": true, "Set-Cookie": true, "Idempotency-Key-Expires": true}
	for name, v := range first.header {
		if !skip[name] && strings.Join(replay.header[name], "\x00") != strings.Join(v, "\x00") {
			t.Errorf("replay header %s = %q, first %q", name, replay.header[name], v)
		}
	}
	for name := range replay.header {
		if _, ok := first.header[name]; !ok && !skip[name] {
			t.Errorf("replay has header %s that the first response lacks", name)
		}
	}
	fe, err1 := http.ParseTime(first.header.Get("Idempotency-Key-Expires"))
	re, err2 := http.ParseTime(replay.header.Get("Idempotency-Key-Expires"))
	if err1 != nil || err2 != nil {
		t.Errorf("Idempotency-Key-Expires: first %q (%v), replay %q (%v)", first.header.Get("Idempotency-Key-Expires"), err1, replay.header.Get("Idempotency-Key-Expires"), err2)
	} else if d := re.Sub(fe); d < -2*time.Second || d > 2*time.Second {
		t.Errorf("replay expires %v, first %v: more than 2 s apart", re, fe)
	}
}

// serveRaw starts a loopback HTTP server with h as it is.
func serveRaw(t testing.TB, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

func memoryStore() store.Store { return memory.New() }
