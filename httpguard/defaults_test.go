package httpguard_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
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

// Only successful responses (2xx, 3xx) are stored by default: a client
// that fixes a 4xx, or meets a 5xx, may retry under the same key and the
// handler runs again.
func TestOnlySuccessStoredByDefault(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store, _ *reqcount.Counter) {
		g := newGuard(t, s)
		for _, tc := range []struct {
			status int
			stored bool
		}{
			{http.StatusOK, true}, {http.StatusCreated, true}, {http.StatusSeeOther, true},
			{http.StatusBadRequest, false}, {http.StatusUnauthorized, false}, {http.StatusNotFound, false},
			{http.StatusRequestTimeout, false}, {http.StatusConflict, false}, {http.StatusUnprocessableEntity, false},
			{http.StatusTooEarly, false}, {http.StatusTooManyRequests, false},
			{http.StatusInternalServerError, false}, {http.StatusServiceUnavailable, false},
		} {
			h := &counting{status: func(int64) int { return tc.status }}
			srv := serve(t, g, h)
			key := fmt.Sprintf("status-%d", tc.status)
			r1 := post(t, srv.Client(), srv.URL+"/payments", key, "x")
			r2 := post(t, srv.Client(), srv.URL+"/payments", key, "x")
			want1, want2, runs := "released", "released", int64(2)
			if tc.stored {
				want1, want2, runs = "executed", "replayed", 1
			}
			if r1.status != tc.status || r2.status != tc.status {
				t.Errorf("%d: statuses %d, %d", tc.status, r1.status, r2.status)
			}
			if got1, got2 := r1.header.Get("Idempotency-Key-Status"), r2.header.Get("Idempotency-Key-Status"); got1 != want1 || got2 != want2 {
				t.Errorf("%d: Idempotency-Key-Status %q then %q, want %q then %q", tc.status, got1, got2, want1, want2)
			}
			if got := h.runs.Load(); got != runs {
				t.Errorf("%d: the handler ran %d times, want %d", tc.status, got, runs)
			}
		}
	})
}

// The router's own 404 behind the middleware is not stored either: the
// route may exist once the client fixes its path, or once it is deployed.
func TestRouterNotFoundNotStored(t *testing.T) {
	mux := http.NewServeMux()
	h := &counting{}
	mux.Handle("POST /payments", h)
	srv := serveRaw(t, httpguard.MustMiddleware(newGuard(t, memoryStore()))(mux))
	for range 2 {
		if r := post(t, srv.Client(), srv.URL+"/payment", "key-404", "x"); r.status != http.StatusNotFound || r.header.Get("Idempotency-Key-Status") != "released" {
			t.Errorf("unknown route: %d %q, want 404 released", r.status, r.header.Get("Idempotency-Key-Status"))
		}
	}
}

// Error responses are stored when the API asks, except 408, 425 and 429:
// they ask the client to come back later, and a stored one would be
// replayed, with its stale Retry-After, for the record's whole life.
func TestCacheErrorResponsesNeverStoresRetryLater(t *testing.T) {
	g := newGuard(t, memoryStore())
	for _, tc := range []struct {
		status int
		stored bool
	}{
		{http.StatusBadRequest, true}, {http.StatusNotFound, true}, {http.StatusInternalServerError, true},
		{http.StatusRequestTimeout, false}, {http.StatusTooEarly, false}, {http.StatusTooManyRequests, false},
	} {
		h := &counting{status: func(int64) int { return tc.status }}
		srv := serve(t, g, h, httpguard.WithCacheErrors())
		key := fmt.Sprintf("cached-%d", tc.status)
		post(t, srv.Client(), srv.URL+"/payments", key, "x")
		r := post(t, srv.Client(), srv.URL+"/payments", key, "x")
		want, runs := "released", int64(2)
		if tc.stored {
			want, runs = "replayed", 1
		}
		if got := r.header.Get("Idempotency-Key-Status"); got != want || h.runs.Load() != runs {
			t.Errorf("%d: retry %q after %d runs, want %q after %d", tc.status, got, h.runs.Load(), want, runs)
		}
	}
}

// hold is a handler that keeps the first request running until n requests
// have reached the server (counted by arrived), then answers like
// counting.
func hold(h *counting, arrived *atomic.Int64, n int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for deadline := time.Now().Add(20 * time.Second); arrived.Load() < n && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(100 * time.Millisecond) // for the last to reach the guard
		h.ServeHTTP(w, r)
	})
}

// burst sends n concurrent duplicates to mw in front of a handler that
// holds the key until all have arrived, and counts the statuses.
func burst(t *testing.T, mw func(http.Handler) http.Handler, n int) (statuses map[int]int, runs int64) {
	t.Helper()
	var arrived atomic.Int64
	h := &counting{}
	next := mw(hold(h, &arrived, int64(n)))
	srv := serveRaw(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived.Add(1)
		next.ServeHTTP(w, r)
	}))
	c := srv.Client()
	c.Transport.(*http.Transport).MaxIdleConnsPerHost = n
	results := make([]result, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { results[i] = post(t, c, srv.URL+"/payments", "burst", `{"amount":5}`) })
	}
	wg.Wait()
	statuses = map[int]int{}
	for _, r := range results {
		statuses[r.status]++
	}
	return statuses, h.runs.Load()
}

// A duplicate that arrives while the first request runs waits for its
// response by default, as the ASP.NET middleware does.
func TestDuplicatesWaitByDefault(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store, _ *reqcount.Counter) {
		statuses, runs := burst(t, httpguard.MustMiddleware(newGuard(t, s)), 10)
		if statuses[http.StatusCreated] != 10 || runs != 1 {
			t.Errorf("statuses %v after %d runs; want ten 201s after one run", statuses, runs)
		}
	})
}

// What the user configured on the guard reaches the middleware's calls:
// guard.WithWait makes duplicates wait, guard.WithTTL sets the record's
// life.
func TestGuardDefaultsReachMiddleware(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store, _ *reqcount.Counter) {
		g := newGuard(t, s, guard.WithWait(10*time.Second), guard.WithTTL(time.Hour))
		statuses, runs := burst(t, httpguard.MustMiddleware(g), 10)
		if statuses[http.StatusCreated] != 10 || runs != 1 {
			t.Errorf("guard.WithWait: statuses %v after %d runs; want ten 201s after one run", statuses, runs)
		}
		srv := serve(t, g, &counting{})
		start := time.Now()
		r := post(t, srv.Client(), srv.URL+"/payments", "ttl", "x")
		exp, err := http.ParseTime(r.header.Get("Idempotency-Key-Expires"))
		if err != nil {
			t.Fatalf("Idempotency-Key-Expires %q: %v", r.header.Get("Idempotency-Key-Expires"), err)
		}
		if d := exp.Sub(start); d < time.Hour-2*time.Second || d > time.Hour+2*time.Second {
			t.Errorf("guard.WithTTL(1h): the record expires in %v", d)
		}
	})
}

// Callers with different credentials never share a record: without
// WithPrincipal, the Authorization header (hashed) is part of the key.
func TestCallersDoNotShareKeys(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store, _ *reqcount.Counter) {
		h := &counting{}
		srv := serve(t, newGuard(t, s), h)
		c := srv.Client()
		alice := post(t, c, srv.URL+"/payments", "shared", "x", "Authorization: Bearer alice")
		bob := post(t, c, srv.URL+"/payments", "shared", "x", "Authorization: Bearer bob")
		if bob.header.Get("Idempotency-Key-Status") != "executed" || string(bob.body) == string(alice.body) {
			t.Errorf("bob got %q %s; want his own run, not alice's %s", bob.header.Get("Idempotency-Key-Status"), bob.body, alice.body)
		}
		again := post(t, c, srv.URL+"/payments", "shared", "x", "Authorization: Bearer alice")
		sameResponse(t, alice, again)
		if got := h.runs.Load(); got != 2 {
			t.Errorf("the handler ran %d times, want 2", got)
		}
	})
}

// JSON bodies are compared as JSON: the same JSON re-serialised (another
// member order, other white space) is the same request; other media types
// are compared byte for byte.
func TestJSONBodiesComparedAsJSON(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store, _ *reqcount.Counter) {
		h := &counting{}
		srv := serve(t, newGuard(t, s), h)
		c := srv.Client()
		for i, ct := range []string{"application/json", "application/json; charset=utf-8", "application/merge-patch+json"} {
			key := fmt.Sprintf("json-%d", i)
			first := post(t, c, srv.URL+"/payments", key, `{"amount":100,"currency":"EUR","tags":["a","b"]}`, "Content-Type: "+ct)
			again := post(t, c, srv.URL+"/payments", key, "{\n  \"tags\": [\"a\", \"b\"],\n  \"currency\": \"EUR\",\n  \"amount\": 1e2\n}", "Content-Type: "+ct)
			if first.status != http.StatusCreated || again.header.Get("Idempotency-Key-Status") != "replayed" {
				t.Errorf("%s: re-serialised JSON got %d %q %s; want the replay", ct, again.status, again.header.Get("Idempotency-Key-Status"), again.body)
			}
			wantProblem(t, post(t, c, srv.URL+"/payments", key, `{"amount":101,"currency":"EUR","tags":["a","b"]}`, "Content-Type: "+ct), http.StatusUnprocessableEntity, "key-reused")
			wantProblem(t, post(t, c, srv.URL+"/payments", key, `{"amount":100,"currency":"EUR","tags":["b","a"]}`, "Content-Type: "+ct), http.StatusUnprocessableEntity, "key-reused")
		}
		post(t, c, srv.URL+"/payments", "text", `{"a":1,"b":2}`, "Content-Type: text/plain")
		wantProblem(t, post(t, c, srv.URL+"/payments", "text", `{"b":2,"a":1}`, "Content-Type: text/plain"), http.StatusUnprocessableEntity, "key-reused")
		// A body that says it is JSON but is not is compared byte for byte.
		post(t, c, srv.URL+"/payments", "not-json", `{"a":`, "Content-Type: application/json")
		if r := post(t, c, srv.URL+"/payments", "not-json", `{"a":`, "Content-Type: application/json"); r.header.Get("Idempotency-Key-Status") != "replayed" {
			t.Errorf("the same malformed JSON: %d %s", r.status, r.body)
		}
		wantProblem(t, post(t, c, srv.URL+"/payments", "not-json", `{"a": `, "Content-Type: application/json"), http.StatusUnprocessableEntity, "key-reused")
	})
}

// Keys of up to 256 characters are accepted, the ASP.NET middleware's
// limit.
func TestKeysUpTo256(t *testing.T) {
	srv := serve(t, newGuard(t, memoryStore()), &counting{})
	if r := post(t, srv.Client(), srv.URL+"/payments", strings.Repeat("k", 256), "x"); r.status != http.StatusCreated {
		t.Errorf("a 256-character key: %d %s", r.status, r.body)
	}
	wantProblem(t, post(t, srv.Client(), srv.URL+"/payments", strings.Repeat("k", 257), "x"), http.StatusBadRequest, "key-invalid")
}

// A flushed response is replayed with the headers it was sent with: not
// those the handler set after the flush, and no Content-Type that was
// never sent.
func TestFlushedReplayHasSentHeaders(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store, _ *reqcount.Counter) {
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Before", "1")
			w.WriteHeader(http.StatusAccepted)
			if err := http.NewResponseController(w).Flush(); err != nil {
				t.Errorf("Flush: %v", err)
			}
			w.Header().Set("X-After", "2") // has no effect: the header is sent
			io.WriteString(w, "streamed body")
		})
		srv := serve(t, newGuard(t, s), h)
		first := post(t, srv.Client(), srv.URL+"/stream", "flushed", "x")
		replay := post(t, srv.Client(), srv.URL+"/stream", "flushed", "x")
		for name, r := range map[string]result{"first": first, "replay": replay} {
			if r.header.Get("X-Before") != "1" || r.header.Get("X-After") != "" || r.header.Values("Content-Type") != nil || string(r.body) != "streamed body" {
				t.Errorf("%s: X-Before %q, X-After %q, Content-Type %q, body %q; want 1, none, none, the body",
					name, r.header.Get("X-Before"), r.header.Get("X-After"), r.header.Values("Content-Type"), r.body)
			}
		}
		if replay.header.Get("Idempotency-Key-Status") != "replayed" {
			t.Errorf("replay status %q", replay.header.Get("Idempotency-Key-Status"))
		}
	})
}

// Declared trailers are replayed as trailers, whether the response was
// buffered or flushed, and so are trailers set with http.TrailerPrefix.
func TestTrailersReplayed(t *testing.T) {
	for _, flush := range []bool{false, true} {
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Trailer", "X-Checksum")
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, "part one, ")
			if flush {
				http.NewResponseController(w).Flush()
			}
			io.WriteString(w, "part two")
			w.Header().Set("X-Checksum", "c0ffee")
			w.Header().Set(http.TrailerPrefix+"X-Count", "2")
		})
		srv := serve(t, newGuard(t, memoryStore()), h)
		key := fmt.Sprintf("trailers-%v", flush)
		first := post(t, srv.Client(), srv.URL+"/upload", key, "x")
		replay := post(t, srv.Client(), srv.URL+"/upload", key, "x")
		for name, r := range map[string]result{"first": first, "replay": replay} {
			if r.trailer.Get("X-Checksum") != "c0ffee" || r.trailer.Get("X-Count") != "2" || r.header.Get("X-Checksum") != "" || string(r.body) != "part one, part two" {
				t.Errorf("flush %v, %s: trailers %v, header X-Checksum %q, body %q; want the trailers as trailers",
					flush, name, r.trailer, r.header.Get("X-Checksum"), r.body)
			}
		}
		if replay.header.Get("Idempotency-Key-Status") != "replayed" {
			t.Errorf("flush %v: replay status %q", flush, replay.header.Get("Idempotency-Key-Status"))
		}
	}
}

// Idempotency-Key-Expires is the same on the first response and on every
// replay, on every store (each keeps the expiry at its own precision).
func TestExpiresSameOnEveryReplay(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store, _ *reqcount.Counter) {
		srv := serve(t, newGuard(t, s), &counting{})
		first := post(t, srv.Client(), srv.URL+"/payments", "expires", "x")
		want := first.header.Get("Idempotency-Key-Expires")
		if _, err := http.ParseTime(want); err != nil {
			t.Fatalf("first Idempotency-Key-Expires %q: %v", want, err)
		}
		for i := range 3 {
			r := post(t, srv.Client(), srv.URL+"/payments", "expires", "x")
			if got := r.header.Get("Idempotency-Key-Expires"); got != want || r.header.Get("Idempotency-Key-Status") != "replayed" {
				t.Errorf("replay %d: Idempotency-Key-Expires %q (%s), first %q", i, got, r.header.Get("Idempotency-Key-Status"), want)
			}
		}
	})
}

// A store failure that becomes a 503 is logged with its cause.
func TestStoreFailureLogged(t *testing.T) {
	var logs teststores.Logs
	srv := serve(t, newGuard(t, failing{memoryStore()}), &counting{}, httpguard.WithLogger(logs.Logger()))
	wantProblem(t, post(t, srv.Client(), srv.URL+"/payments", "k-503", "x"), http.StatusServiceUnavailable, "store-unavailable")
	recs := logs.Records(t)
	found := false
	for _, rec := range recs {
		errText, _ := rec["error"].(string)
		found = found || strings.Contains(errText, "connection refused")
	}
	if !found {
		t.Errorf("log records %v: none has the store's error", recs)
	}
}

// A guard.Step inside a handler replays after a 5xx released the request:
// the retry gets 201 and the charge happened once.
func TestStepReplaysAfterServerError(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store, _ *reqcount.Counter) {
		var charges, runs atomic.Int64
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ch, err := guard.Step(r.Context(), "charge", func(context.Context) (string, error) {
				return fmt.Sprintf("ch_%d", charges.Add(1)), nil
			})
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			if runs.Add(1) == 1 {
				http.Error(w, "the ledger is down", http.StatusServiceUnavailable)
				return
			}
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, ch)
		})
		srv := serve(t, newGuard(t, s), h)
		if r := post(t, srv.Client(), srv.URL+"/payments", "step", "x"); r.status != http.StatusServiceUnavailable {
			t.Fatalf("first: %d %s", r.status, r.body)
		}
		r := post(t, srv.Client(), srv.URL+"/payments", "step", "x")
		if r.status != http.StatusCreated || string(r.body) != "ch_1" || charges.Load() != 1 {
			t.Errorf("retry: %d %s after %d charges; want 201 ch_1 after one charge", r.status, r.body, charges.Load())
		}
	})
}

// The order of precedence: WithGuardOptions over guard.New's defaults
// over the middleware's own (a TTL of 24 h, wait mode).
func TestGuardOptionsPrecedence(t *testing.T) {
	ttl := func(g *guard.Guard, opts ...httpguard.Option) time.Duration {
		t.Helper()
		srv := serve(t, g, &counting{}, opts...)
		start := time.Now()
		r := post(t, srv.Client(), srv.URL+"/payments", "ttl", "x")
		exp, err := http.ParseTime(r.header.Get("Idempotency-Key-Expires"))
		if err != nil {
			t.Fatalf("Idempotency-Key-Expires %q: %v", r.header.Get("Idempotency-Key-Expires"), err)
		}
		return exp.Sub(start).Round(time.Minute)
	}
	if got := ttl(newGuard(t, memoryStore())); got != 24*time.Hour {
		t.Errorf("default TTL %v, want 24h", got)
	}
	if got := ttl(newGuard(t, memoryStore(), guard.WithTTL(time.Hour))); got != time.Hour {
		t.Errorf("guard.New(WithTTL(1h)): TTL %v", got)
	}
	if got := ttl(newGuard(t, memoryStore(), guard.WithTTL(time.Hour)), httpguard.WithGuardOptions(guard.WithTTL(2*time.Hour))); got != 2*time.Hour {
		t.Errorf("WithGuardOptions(WithTTL(2h)) over guard.New(WithTTL(1h)): TTL %v", got)
	}
	// A guard in reject mode answers duplicates 409 at once.
	statuses, runs := burst(t, httpguard.MustMiddleware(newGuard(t, memoryStore(), guard.WithWait(0))), 5)
	if statuses[http.StatusCreated] != 1 || statuses[http.StatusConflict] != 4 || runs != 1 {
		t.Errorf("guard.New(WithWait(0)): statuses %v after %d runs; want one 201 and four 409s", statuses, runs)
	}
	statuses, _ = burst(t, httpguard.MustMiddleware(newGuard(t, memoryStore(), guard.WithWait(0)), httpguard.WithGuardOptions(guard.WithWait(10*time.Second))), 5)
	if statuses[http.StatusCreated] != 5 {
		t.Errorf("WithGuardOptions(WithWait) over guard.New(WithWait(0)): statuses %v; want five 201s", statuses)
	}
}

// WithSharedKeys: public endpoints share keys whatever the Authorization;
// WithPrincipal: the principal, not the Authorization, names the caller.
func TestSharedKeysAndPrincipal(t *testing.T) {
	h := &counting{}
	srv := serve(t, newGuard(t, memoryStore()), h, httpguard.WithSharedKeys())
	a := post(t, srv.Client(), srv.URL+"/subscribe", "public", "x", "Authorization: Bearer alice")
	b := post(t, srv.Client(), srv.URL+"/subscribe", "public", "x", "Authorization: Bearer bob")
	if b.header.Get("Idempotency-Key-Status") != "replayed" || string(a.body) != string(b.body) {
		t.Errorf("WithSharedKeys: bob got %q %s, want alice's replayed", b.header.Get("Idempotency-Key-Status"), b.body)
	}
	srv = serve(t, newGuard(t, memoryStore()), h, httpguard.WithPrincipal(func(r *http.Request) string { return r.Header.Get("X-Account") }))
	post(t, srv.Client(), srv.URL+"/payments", "k", "x", "X-Account: acct_1", "Authorization: Bearer old-token")
	r := post(t, srv.Client(), srv.URL+"/payments", "k", "x", "X-Account: acct_1", "Authorization: Bearer new-token")
	if r.header.Get("Idempotency-Key-Status") != "replayed" {
		t.Errorf("WithPrincipal, the same account with a new token: %q, want replayed", r.header.Get("Idempotency-Key-Status"))
	}
}

// The first store failure is logged at level Error, saying what it means;
// the next ones at level Warn, each with its cause, until the store
// answers again.
func TestStoreFailureLogLevels(t *testing.T) {
	var logs teststores.Logs
	s := &flaky{Store: memoryStore()}
	srv := serve(t, newGuard(t, s), &counting{}, httpguard.WithLogger(logs.Logger()))
	s.down.Store(true)
	post(t, srv.Client(), srv.URL+"/payments", "k1", "x")
	post(t, srv.Client(), srv.URL+"/payments", "k2", "x")
	s.down.Store(false)
	post(t, srv.Client(), srv.URL+"/payments", "k3", "x")
	s.down.Store(true)
	post(t, srv.Client(), srv.URL+"/payments", "k4", "x")
	var levels []string
	for _, rec := range logs.Records(t) {
		levels = append(levels, rec["level"].(string))
		if errText, _ := rec["error"].(string); !strings.Contains(errText, "connection refused") {
			t.Errorf("log record %v lacks the cause", rec)
		}
	}
	if strings.Join(levels, " ") != "ERROR WARN ERROR" {
		t.Errorf("levels %q, want ERROR WARN ERROR", levels)
	}
}

// flaky is a store whose claims fail while down.
type flaky struct {
	store.Store
	down atomic.Bool
}

func (f *flaky) Acquire(ctx context.Context, rec *store.Record, now time.Time) (*store.Record, error) {
	if f.down.Load() {
		return nil, fmt.Errorf("dial tcp 127.0.0.1:6379: connection refused")
	}
	return f.Store.Acquire(ctx, rec, now)
}
