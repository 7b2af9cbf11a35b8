package httpguard_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/httpguard"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/internal/testing/reqcount"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/memory"
)

// counting is a handler that answers 201 with a body that names its run,
// so that a second run of one request shows in the body.
type counting struct {
	runs   atomic.Int64
	status func(run int64) int // default 201
}

func (h *counting) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := h.runs.Add(1)
	body, _ := io.ReadAll(r.Body)
	status := http.StatusCreated
	if h.status != nil {
		status = h.status(n)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Add("X-Multi", "a")
	w.Header().Add("X-Multi", "b")
	w.Header().Set("Set-Cookie", "session=abc")
	key, _ := guard.KeyFromContext(r.Context())
	w.Header().Set("X-Guard-Key-Seen", strconv.FormatBool(key != ""))
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"run":%d,"got":%q}`, n, body)
}

func TestFirstRunsDuplicateReplays(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store, n *reqcount.Counter) {
		h := &counting{}
		srv := serve(t, newGuard(t, s), h)
		c := srv.Client()

		first := post(t, c, srv.URL+"/payments", "key-1", `{"amount":100}`)
		if first.status != http.StatusCreated || string(first.body) != `{"run":1,"got":"{\"amount\":100}"}` {
			t.Fatalf("first: %d %s", first.status, first.body)
		}
		if got := first.header.Get("Idempotency-Key-Status"); got != "executed" {
			t.Errorf("first Idempotency-Key-Status %q, want executed", got)
		}
		if first.header.Get("Set-Cookie") == "" || first.header.Get("X-Guard-Key-Seen") != "true" {
			t.Errorf("first response lacks the handler's headers: %v", first.header)
		}
		if n != nil {
			if n.Total() != 2 {
				t.Errorf("first request sent %s, want the guard's floor of 2 round trips", n)
			}
			n.Reset()
		}

		replay := post(t, c, srv.URL+"/payments", "key-1", `{"amount":100}`)
		if got := replay.header.Get("Idempotency-Key-Status"); got != "replayed" {
			t.Errorf("replay Idempotency-Key-Status %q, want replayed", got)
		}
		if replay.header.Get("Set-Cookie") != "" {
			t.Errorf("replay carries Set-Cookie %q; it is left out by default", replay.header.Get("Set-Cookie"))
		}
		sameResponse(t, first, replay)
		if got := h.runs.Load(); got != 1 {
			t.Errorf("handler ran %d times, want 1", got)
		}
		if n != nil {
			if n.Total() != 1 {
				t.Errorf("replay sent %s, want the guard's floor of 1 round trip", n)
			}
		}

		// The quoted form of the key (RFC 8941) names the same key.
		quoted := post(t, c, srv.URL+"/payments", `"key-1"`, `{"amount":100}`)
		if quoted.header.Get("Idempotency-Key-Status") != "replayed" || string(quoted.body) != string(first.body) {
			t.Errorf("quoted key: %d %s %v, want the replay", quoted.status, quoted.body, quoted.header)
		}
	})
}

func TestDifferentBodySameKey(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store, _ *reqcount.Counter) {
		h := &counting{}
		srv := serve(t, newGuard(t, s), h)
		c := srv.Client()
		post(t, c, srv.URL+"/payments", "key-2", `{"amount":100}`)
		r := post(t, c, srv.URL+"/payments", "key-2", `{"amount":999}`)
		wantProblem(t, r, http.StatusUnprocessableEntity, "key-reused")
		// Another path or query is another request too.
		wantProblem(t, post(t, c, srv.URL+"/payments?x=1", "key-2", `{"amount":100}`), http.StatusUnprocessableEntity, "key-reused")
		if got := h.runs.Load(); got != 1 {
			t.Errorf("handler ran %d times, want 1", got)
		}
	})
}

// 100 concurrent duplicates in reject mode (guard.WithWait(0)): one runs,
// the 99 others get 409 with Retry-After while it holds the key.
func TestConcurrentDuplicatesReject(t *testing.T) {
	const clients = 100
	eachStore(t, func(t *testing.T, s store.Store, _ *reqcount.Counter) {
		var conflicts atomic.Int64
		release := make(chan struct{})
		var once sync.Once
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-release:
			case <-time.After(30 * time.Second):
				t.Error("the duplicates were not all turned away within 30 s")
			}
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, "paid")
		})
		srv := serve(t, newGuard(t, s), h, httpguard.WithGuardOptions(guard.WithWait(0), guard.WithLease(5*time.Second)))
		c := srv.Client()
		c.Transport.(*http.Transport).MaxIdleConnsPerHost = clients

		results := make([]result, clients)
		var wg sync.WaitGroup
		for i := range clients {
			wg.Go(func() {
				results[i] = post(t, c, srv.URL+"/payments", "key-3", "same body")
				if results[i].status == http.StatusConflict && conflicts.Add(1) == clients-1 {
					once.Do(func() { close(release) })
				}
			})
		}
		wg.Wait()
		once.Do(func() { close(release) })
		created := 0
		for _, r := range results {
			switch r.status {
			case http.StatusCreated:
				created++
			case http.StatusConflict:
				wantProblem(t, r, http.StatusConflict, "in-progress")
				ra, err := strconv.Atoi(r.header.Get("Retry-After"))
				// The lease (5 s) plus the clock skew (1 s), rounded up.
				if err != nil || ra < 1 || ra > 7 {
					t.Errorf("Retry-After %q, want whole seconds in [1, 7]", r.header.Get("Retry-After"))
				}
			default:
				t.Errorf("status %d: %s", r.status, r.body)
			}
		}
		if created != 1 || conflicts.Load() != clients-1 {
			t.Errorf("%d created, %d conflicts; want 1 and %d", created, conflicts.Load(), clients-1)
		}
	})
}

// 100 concurrent duplicates in wait mode (the default): the handler runs
// once and every client gets its response.
func TestConcurrentDuplicatesWait(t *testing.T) {
	const clients = 100
	eachStore(t, func(t *testing.T, s store.Store, _ *reqcount.Counter) {
		var arrived atomic.Int64
		h := &counting{}
		slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// Hold the key until every client's request has reached the
			// server, and a little longer for them to reach the guard.
			deadline := time.Now().Add(30 * time.Second)
			for arrived.Load() < clients && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			time.Sleep(100 * time.Millisecond)
			h.ServeHTTP(w, r)
		})
		mw := httpguard.MustMiddleware(newGuard(t, s))
		srv := serveRaw(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			arrived.Add(1)
			mw(slow).ServeHTTP(w, r)
		}))
		c := srv.Client()
		c.Transport.(*http.Transport).MaxIdleConnsPerHost = clients

		results := make([]result, clients)
		var wg sync.WaitGroup
		for i := range clients {
			wg.Go(func() { results[i] = post(t, c, srv.URL+"/payments", "key-4", `{"amount":5}`) })
		}
		wg.Wait()
		if got := h.runs.Load(); got != 1 {
			t.Fatalf("handler ran %d times, want 1", got)
		}
		statuses := map[string]int{}
		var first result
		for _, r := range results {
			statuses[r.header.Get("Idempotency-Key-Status")]++
			if r.header.Get("Idempotency-Key-Status") == "executed" {
				first = r
			}
		}
		if statuses["executed"] != 1 || statuses["replayed"] != clients-1 {
			t.Fatalf("statuses %v, want 1 executed and %d replayed", statuses, clients-1)
		}
		for _, r := range results {
			if r.header.Get("Idempotency-Key-Status") == "replayed" {
				sameResponse(t, first, r)
			}
		}
	})
}

func TestServerErrorReleases(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store, _ *reqcount.Counter) {
		h := &counting{status: func(run int64) int {
			if run == 1 {
				return http.StatusServiceUnavailable
			}
			return http.StatusCreated
		}}
		srv := serve(t, newGuard(t, s), h)
		c := srv.Client()
		r1 := post(t, c, srv.URL+"/payments", "key-5", "x")
		if r1.status != http.StatusServiceUnavailable || r1.header.Get("Idempotency-Key-Status") != "released" || r1.header.Get("Idempotency-Key-Expires") != "" {
			t.Errorf("first: %d %v, want 503 released without an expiry", r1.status, r1.header)
		}
		r2 := post(t, c, srv.URL+"/payments", "key-5", "x")
		if r2.status != http.StatusCreated || r2.header.Get("Idempotency-Key-Status") != "executed" || !strings.Contains(string(r2.body), `"run":2`) {
			t.Errorf("retry: %d %v %s, want the handler's second run", r2.status, r2.header, r2.body)
		}
		r3 := post(t, c, srv.URL+"/payments", "key-5", "x")
		sameResponse(t, r2, r3)
		if got := h.runs.Load(); got != 2 {
			t.Errorf("handler ran %d times, want 2", got)
		}
	})
}

func TestCacheErrorResponses(t *testing.T) {
	h := &counting{status: func(int64) int { return http.StatusInternalServerError }}
	srv := serve(t, newGuard(t, memoryStore()), h, httpguard.WithCacheErrors())
	c := srv.Client()
	r1 := post(t, c, srv.URL+"/payments", "key-6", "x")
	r2 := post(t, c, srv.URL+"/payments", "key-6", "x")
	if r1.header.Get("Idempotency-Key-Status") != "executed" || r2.header.Get("Idempotency-Key-Status") != "replayed" {
		t.Errorf("statuses %q, %q; want executed, replayed", r1.header.Get("Idempotency-Key-Status"), r2.header.Get("Idempotency-Key-Status"))
	}
	sameResponse(t, r1, r2)
	if got := h.runs.Load(); got != 1 {
		t.Errorf("handler ran %d times, want 1", got)
	}
}

func TestMissingOrInvalidKey(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store, n *reqcount.Counter) {
		h := &counting{}
		srv := serve(t, newGuard(t, s), h)
		c := srv.Client()
		p := wantProblem(t, post(t, c, srv.URL+"/payments", "", "x"), http.StatusBadRequest, "key-missing")
		if !strings.Contains(p.Detail, "Idempotency-Key") {
			t.Errorf("detail %q does not name the header", p.Detail)
		}
		for name, key := range map[string]string{
			"too long":        strings.Repeat("k", 257),
			"not ASCII":       "clé",
			"unclosed string": `"abc`,
			"bad escape":      `"a\b"`,
			"list":            `"a", "b"`,
			"tab in a string": "\"a\tb\"",
		} {
			r := post(t, c, srv.URL+"/payments", key, "x")
			if r.status != http.StatusBadRequest {
				t.Errorf("%s: status %d, want 400", name, r.status)
				continue
			}
			wantProblem(t, r, http.StatusBadRequest, "key-invalid")
		}
		twice := post(t, c, srv.URL+"/payments", "", "x", "Idempotency-Key: a", "Idempotency-Key: b")
		wantProblem(t, twice, http.StatusBadRequest, "key-invalid")
		if got := h.runs.Load(); got != 0 {
			t.Errorf("handler ran %d times, want 0", got)
		}
		if n != nil && n.Total() != 0 {
			t.Errorf("refused requests reached the store: %s", n)
		}
		// Parameters after the string are allowed and ignored (RFC 8941).
		if r := post(t, c, srv.URL+"/payments", `"k-7";v=1;x`, "x"); r.status != http.StatusCreated {
			t.Errorf("key with parameters: %d %s", r.status, r.body)
		}
	})
}

func TestKeyOptionalAndMethods(t *testing.T) {
	h := &counting{}
	srv := serve(t, newGuard(t, memoryStore()), h, httpguard.WithKeyOptional())
	c := srv.Client()
	for range 2 {
		if r := post(t, c, srv.URL+"/payments", "", "x"); r.status != http.StatusCreated || r.header.Get("Idempotency-Key-Status") != "" {
			t.Errorf("keyless request: %d %v, want the handler's response, unguarded", r.status, r.header)
		}
	}
	if r := do(t, c, http.MethodGet, srv.URL+"/payments", "k", ""); r.header.Get("Idempotency-Key-Status") != "" {
		t.Errorf("GET was guarded: %v", r.header)
	}
	if r := do(t, c, http.MethodGet, srv.URL+"/payments", "k", ""); !strings.Contains(string(r.body), `"run":4`) {
		t.Errorf("GET replayed: %s", r.body)
	}
}

func TestPrincipals(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store, _ *reqcount.Counter) {
		h := &counting{}
		srv := serve(t, newGuard(t, s), h, httpguard.WithPrincipal(func(r *http.Request) string { return r.Header.Get("X-Tenant") }))
		c := srv.Client()
		a1 := post(t, c, srv.URL+"/payments", "shared-key", "x", "X-Tenant: a")
		b1 := post(t, c, srv.URL+"/payments", "shared-key", "x", "X-Tenant: b")
		if a1.status != http.StatusCreated || b1.status != http.StatusCreated || string(a1.body) == string(b1.body) {
			t.Fatalf("tenants a and b: %d %s, %d %s; want two runs", a1.status, a1.body, b1.status, b1.body)
		}
		a2 := post(t, c, srv.URL+"/payments", "shared-key", "x", "X-Tenant: a")
		b2 := post(t, c, srv.URL+"/payments", "shared-key", "x", "X-Tenant: b")
		sameResponse(t, a1, a2)
		sameResponse(t, b1, b2)
		if got := h.runs.Load(); got != 2 {
			t.Errorf("handler ran %d times, want 2", got)
		}
		wantProblem(t, post(t, c, srv.URL+"/payments", "shared-key", "x"), http.StatusForbidden, "principal-missing")
	})
}

func TestResponseTooLargeToStore(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store, _ *reqcount.Counter) {
		var runs atomic.Int64
		big := strings.Repeat("0123456789abcdef", 256) // 4 KiB
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			w.Header().Set("Content-Type", "text/plain")
			for i := 0; i < len(big); i += 100 {
				io.WriteString(w, big[i:min(i+100, len(big))])
			}
		})
		srv := serve(t, newGuard(t, s), h, httpguard.WithMaxResponseBytes(1024))
		c := srv.Client()
		r1 := post(t, c, srv.URL+"/export", "key-8", "x")
		if r1.status != http.StatusOK || string(r1.body) != big || r1.header.Get("Idempotency-Key-Status") != "executed" {
			t.Fatalf("first: %d, %d bytes, %v; want 200 with the whole body", r1.status, len(r1.body), r1.header)
		}
		r2 := post(t, c, srv.URL+"/export", "key-8", "x")
		wantProblem(t, r2, http.StatusGone, "response-unavailable")
		if _, err := http.ParseTime(r2.header.Get("Idempotency-Key-Expires")); err != nil {
			t.Errorf("410 without the record's expiry: %v", r2.header)
		}
		if got := runs.Load(); got != 1 {
			t.Errorf("handler ran %d times, want 1", got)
		}
	})
}

func TestBodyTooLarge(t *testing.T) {
	h := &counting{}
	srv := serve(t, newGuard(t, memoryStore()), h, httpguard.WithMaxBodyBytes(10))
	c := srv.Client()
	wantProblem(t, post(t, c, srv.URL+"/payments", "key-9", strings.Repeat("x", 11)), http.StatusRequestEntityTooLarge, "body-too-large")
	// Without a Content-Length the body is read up to the bound.
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/payments", io.MultiReader(strings.NewReader(strings.Repeat("y", 20))))
	req.Header.Set("Idempotency-Key", "key-9")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("chunked body: status %d, want 413", resp.StatusCode)
	}
	// Nothing was recorded: the key is free for a body that fits.
	if r := post(t, c, srv.URL+"/payments", "key-9", "small"); r.status != http.StatusCreated {
		t.Errorf("after 413: %d %s", r.status, r.body)
	}
	if got := h.runs.Load(); got != 1 {
		t.Errorf("handler ran %d times, want 1", got)
	}
}

func TestRequestTTL(t *testing.T) {
	srv := serve(t, newGuard(t, memoryStore()), &counting{}, httpguard.WithRequestTTL(time.Hour))
	c := srv.Client()
	for _, tc := range []struct {
		header string
		want   time.Duration
	}{{"60", time.Minute}, {"999999", time.Hour}} {
		start := time.Now()
		r := post(t, c, srv.URL+"/payments", "ttl-"+tc.header, "x", "Idempotency-Expiry-Seconds: "+tc.header)
		exp, err := http.ParseTime(r.header.Get("Idempotency-Key-Expires"))
		if err != nil {
			t.Fatalf("%s: %v", tc.header, err)
		}
		if d := exp.Sub(start); d < tc.want-2*time.Second || d > tc.want+2*time.Second {
			t.Errorf("%s: expires in %v, want %v", tc.header, d, tc.want)
		}
	}
	wantProblem(t, post(t, c, srv.URL+"/payments", "ttl-bad", "x", "Idempotency-Expiry-Seconds: soon"), http.StatusBadRequest, "expiry-invalid")
}

func TestFlushStreamsAndStores(t *testing.T) {
	var runs atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: one\n\n")
		if err := http.NewResponseController(w).Flush(); err != nil {
			t.Errorf("Flush: %v", err)
		}
		io.WriteString(w, "data: two\n\n")
	})
	srv := serve(t, newGuard(t, memoryStore()), h)
	c := srv.Client()
	r1 := post(t, c, srv.URL+"/stream", "key-10", "x")
	r2 := post(t, c, srv.URL+"/stream", "key-10", "x")
	want := "data: one\n\ndata: two\n\n"
	if string(r1.body) != want || string(r2.body) != want {
		t.Errorf("bodies %q and %q, want %q", r1.body, r2.body, want)
	}
	if r1.header.Get("Idempotency-Key-Status") != "executed" || r2.header.Get("Idempotency-Key-Status") != "replayed" {
		t.Errorf("statuses %q, %q", r1.header.Get("Idempotency-Key-Status"), r2.header.Get("Idempotency-Key-Status"))
	}
	if runs.Load() != 1 {
		t.Errorf("handler ran %d times", runs.Load())
	}
}

func TestHijackRefused(t *testing.T) {
	var hijackErr error
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _, hijackErr = http.NewResponseController(w).Hijack()
		w.WriteHeader(http.StatusNotImplemented)
	})
	srv := serve(t, newGuard(t, memoryStore()), h)
	post(t, srv.Client(), srv.URL+"/ws", "key-11", "x")
	if !errors.Is(hijackErr, http.ErrNotSupported) {
		t.Errorf("Hijack error %v, want http.ErrNotSupported", hijackErr)
	}
}

// With the middleware around a ServeMux, the route is the mux's pattern:
// one key on two accounts' paths is one key reused with another request.
func TestRouteFromServeMux(t *testing.T) {
	h := &counting{}
	mux := http.NewServeMux()
	mux.Handle("POST /accounts/{id}/payments", h)
	g := newGuard(t, memoryStore())
	srv := serveRaw(t, httpguard.MustMiddleware(g)(mux))
	c := srv.Client()
	if r := post(t, c, srv.URL+"/accounts/1/payments", "key-12", "x"); r.status != http.StatusCreated {
		t.Fatalf("%d %s", r.status, r.body)
	}
	wantProblem(t, post(t, c, srv.URL+"/accounts/2/payments", "key-12", "x"), http.StatusUnprocessableEntity, "key-reused")

	// Installed per route, the middleware reads r.Pattern.
	mux2 := http.NewServeMux()
	mux2.Handle("POST /accounts/{id}/payments", httpguard.MustMiddleware(g, httpguard.WithScope("per-route"))(h))
	srv2 := serveRaw(t, mux2)
	post(t, srv2.Client(), srv2.URL+"/accounts/1/payments", "key-13", "x")
	wantProblem(t, post(t, srv2.Client(), srv2.URL+"/accounts/2/payments", "key-13", "x"), http.StatusUnprocessableEntity, "key-reused")
}

func TestStrictKey(t *testing.T) {
	srv := serve(t, newGuard(t, memoryStore()), &counting{}, httpguard.WithStrictKey())
	c := srv.Client()
	wantProblem(t, post(t, c, srv.URL+"/p", "bare", "x"), http.StatusBadRequest, "key-invalid")
	if r := post(t, c, srv.URL+"/p", `"quoted"`, "x"); r.status != http.StatusCreated {
		t.Errorf("quoted key: %d %s", r.status, r.body)
	}
}

func TestInvalidOptions(t *testing.T) {
	g := newGuard(t, memoryStore())
	for name, opt := range map[string]httpguard.Option{
		"ttl":        httpguard.WithGuardOptions(guard.WithTTL(0)),
		"lease":      httpguard.WithGuardOptions(guard.WithLease(-time.Second)),
		"wait":       httpguard.WithGuardOptions(guard.WithWait(-1)),
		"one key":    httpguard.WithGuardOptions(guard.WithKey("k")),
		"one token":  httpguard.WithGuardOptions(adapt.WithClaimToken("t")),
		"key path":   httpguard.WithGuardOptions(guard.WithKeyPath("id")),
		"codec":      httpguard.WithGuardOptions(guard.WithCodec(adapt.JSON)),
		"hook":       httpguard.WithGuardOptions(guard.WithOutcomeHook(func(context.Context, string, *store.Record, guard.Outcome) {})),
		"length":     httpguard.WithKeyLength(10, 5),
		"methods":    httpguard.WithMethods(),
		"route":      httpguard.WithRoute(nil),
		"principal":  httpguard.WithPrincipal(nil),
		"policy":     httpguard.WithStatusPolicy(nil),
		"request":    httpguard.WithRequestTTL(0),
		"scope":      httpguard.WithScope(""),
		"key header": httpguard.WithKeyHeader(""),
	} {
		if _, err := httpguard.Middleware(g, opt); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := httpguard.Middleware(nil); err == nil {
		t.Error("nil guard: no error")
	}
	defer func() {
		if recover() == nil {
			t.Error("Middleware with an invalid option did not panic")
		}
	}()
	httpguard.MustMiddleware(g, httpguard.WithScope(""))
}

// A store that fails before the handler runs: 503, and the handler never
// runs.
func TestStoreUnavailable(t *testing.T) {
	h := &counting{}
	srv := serve(t, newGuard(t, failing{memoryStore()}), h)
	r := post(t, srv.Client(), srv.URL+"/payments", "key-14", "x")
	wantProblem(t, r, http.StatusServiceUnavailable, "store-unavailable")
	if r.header.Get("Retry-After") != "1" || h.runs.Load() != 0 {
		t.Errorf("Retry-After %q, runs %d", r.header.Get("Retry-After"), h.runs.Load())
	}
}

type failing struct{ store.Store }

func (failing) Acquire(context.Context, *store.Record, time.Time) (*store.Record, error) {
	return nil, errors.New("connection refused")
}

// In wait mode, a duplicate that shares the first request's execution in
// this process gets 410 when that response streamed past the storage
// bound: there is nothing to send it.
func TestSharedResponseTooLarge(t *testing.T) {
	var arrived, runs atomic.Int64
	big := strings.Repeat("z", 4096)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		for deadline := time.Now().Add(10 * time.Second); arrived.Load() < 2 && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(50 * time.Millisecond) // for the duplicate to join
		io.WriteString(w, big)
	})
	mw := httpguard.MustMiddleware(newGuard(t, memoryStore()), httpguard.WithGuardOptions(guard.WithWait(10*time.Second)), httpguard.WithMaxResponseBytes(1024))
	srv := serveRaw(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived.Add(1)
		mw(h).ServeHTTP(w, r)
	}))
	results := make([]result, 2)
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() { results[i] = post(t, srv.Client(), srv.URL+"/export", "key-15", "x") })
	}
	wg.Wait()
	got := map[int]int{}
	for _, r := range results {
		got[r.status]++
		if r.status == http.StatusOK && string(r.body) != big {
			t.Errorf("the first response has %d bytes, want %d", len(r.body), len(big))
		}
		if r.status == http.StatusGone {
			wantProblem(t, r, http.StatusGone, "response-unavailable")
		}
	}
	if got[http.StatusOK] != 1 || got[http.StatusGone] != 1 || runs.Load() != 1 {
		t.Errorf("statuses %v after %d runs; want one 200 and one 410 after one run", got, runs.Load())
	}
}

// IDEMGUARD_DISABLED makes the middleware a pass-through.
func TestGuardDisabled(t *testing.T) {
	t.Setenv(adapt.DisableEnv, "true")
	h := &counting{}
	srv := serve(t, newGuard(t, memoryStore()), h)
	for range 2 {
		r := post(t, srv.Client(), srv.URL+"/payments", "key-16", "x")
		if r.status != http.StatusCreated || r.header.Get("Idempotency-Key-Status") != "" {
			t.Errorf("%d %v, want the handler's response without idempotency headers", r.status, r.header)
		}
	}
	if got := h.runs.Load(); got != 2 {
		t.Errorf("handler ran %d times, want 2", got)
	}
}

func TestRenamedHeadersAndSkip(t *testing.T) {
	h := &counting{}
	srv := serve(t, newGuard(t, memoryStore()), h,
		httpguard.WithKeyHeader("X-Request-Key"),
		httpguard.WithStatusHeader("Idempotent-Replayed"),
		httpguard.WithExpiresHeader(""),
		httpguard.WithSkip(func(r *http.Request) bool { return r.URL.Path == "/healthz" }))
	c := srv.Client()
	post(t, c, srv.URL+"/payments", "", "x", "X-Request-Key: k-17")
	r := post(t, c, srv.URL+"/payments", "", "x", "X-Request-Key: k-17")
	if r.header.Get("Idempotent-Replayed") != "replayed" || r.header.Get("Idempotency-Key-Expires") != "" || r.header.Get("Idempotency-Key-Status") != "" {
		t.Errorf("renamed headers: %v", r.header)
	}
	if r := post(t, c, srv.URL+"/healthz", "", "x"); r.status != http.StatusCreated {
		t.Errorf("skipped request: %d %s", r.status, r.body)
	}
	if got := h.runs.Load(); got != 2 {
		t.Errorf("handler ran %d times, want 2", got)
	}
}

// With IDEMGUARD_DISABLED the middleware steps aside: every request runs
// the handler, and the responses carry no idempotency headers.
func TestDisabledGuardPassesThrough(t *testing.T) {
	t.Setenv(adapt.DisableEnv, "true")
	g, err := guard.New(memory.New())
	if err != nil {
		t.Fatal(err)
	}
	runs := 0
	srv := serve(t, g, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		w.WriteHeader(http.StatusCreated)
	}))
	for range 2 {
		res := post(t, srv.Client(), srv.URL, "k-1", `{"a":1}`)
		if res.status != http.StatusCreated || res.header.Get("Idempotency-Key-Status") != "" {
			t.Errorf("disabled: %d, status header %q; want the handler's 201 and no header", res.status, res.header.Get("Idempotency-Key-Status"))
		}
	}
	if runs != 2 {
		t.Errorf("handler ran %d times, want 2", runs)
	}
}
