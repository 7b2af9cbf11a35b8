package httpguard_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/httpguard"
	"github.com/idemguard/idemguard/internal/testing/reqcount"
	"github.com/idemguard/idemguard/internal/testing/teststores"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/memory"
)

// BenchmarkMiddleware measures the middleware's cost over the bare handler,
// in process (ServeHTTP into a ResponseRecorder, so that the HTTP stack is
// not in the figures): "bare" is the handler alone, "first" a request with
// a key never seen (claim, run, store the response), "replay" a request
// whose key is completed. On DynamoDB Local it reports the requests sent
// per operation and fails if they are not the guard's floor: 2 for a first
// request, 1 for a replay. "guard-first" and "guard-replay" are guard.Do
// alone with an input like the middleware's. The scenarios run in rounds,
// interleaved (names with #01, #02 suffixes are the later rounds).
//
//	IDEMGUARD_SERVICES=dynamodb scripts/harness.sh run go test -run '^$' -bench Middleware -benchmem ./httpguard/
func BenchmarkMiddleware(b *testing.B) {
	const rounds = 3
	body := `{"order_id":"o-1042","amount":1999,"currency":"EUR","card":"tok_visa"}`
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"charge_id":"ch_3MmlLrLkdIwHu7ix0snN0B15","status":"succeeded"}`)
	})
	// One request, its body reset for each operation, so that building
	// requests costs nothing in any scenario.
	req := httptest.NewRequest(http.MethodPost, "/payments", nil)
	request := func(key string) *http.Request {
		req.Body = io.NopCloser(strings.NewReader(body))
		req.ContentLength = int64(len(body))
		req.Header.Set("Idempotency-Key", key)
		return req
	}
	// warm runs the request n times, to warm connections and (on
	// DynamoDB Local) the server's JIT before the clock starts.
	warm := func(h http.Handler, n int, key func(i int) string) {
		for i := range n {
			h.ServeHTTP(httptest.NewRecorder(), request(key(i)))
		}
	}
	for _, backend := range []struct {
		name  string
		store func(b *testing.B) (store.Store, *reqcount.Counter)
	}{
		{"memory", func(*testing.B) (store.Store, *reqcount.Counter) { return memory.New(), nil }},
		{"dynamodb", func(b *testing.B) (store.Store, *reqcount.Counter) { return teststores.DynamoDB(b) }},
	} {
		b.Run(backend.name, func(b *testing.B) {
			s, n := backend.store(b)
			g := newGuard(b, s)
			h := httpguard.MustMiddleware(g)(handler)
			requests := func(b *testing.B, want float64) {
				if n == nil {
					return
				}
				got := float64(n.Total()) / float64(b.N)
				b.ReportMetric(got, "requests/op")
				if got != want {
					b.Fatalf("%.2f requests per operation (%s), want the guard's floor %v", got, n, want)
				}
			}
			warmups := 200
			if n != nil {
				warmups = 2000
			}
			warm(h, warmups, func(i int) string { return "warm-" + strconv.Itoa(i) })
			warm(h, warmups, func(int) string { return "warm-0" })
			round := 0
			// The guard alone, with an input like the middleware's, to
			// tell its share of the cost from the HTTP layer's.
			type input struct {
				K struct{ Key, Method, Route string }
				F string
			}
			gin := func(key string) input {
				var in input
				in.K.Key, in.K.Method, in.K.Route, in.F = key, http.MethodPost, "/payments", "3f79bb7b435b05321651daefd374cd21b3f79bb7b435b05321651daefd374cd2"
				return in
			}
			receipt := func(context.Context) (string, error) { return `{"charge_id":"ch_3MmlLrLkdIwHu7ix0snN0B15"}`, nil }
			gopts := []guard.CallOption{guard.WithKeyPath("K"), guard.WithPayloadValidation("F")}
			for i := range warmups { // warm the guard's path too: new keys, then replays
				guard.Do(context.Background(), g, "bench", gin("guard-warm-"+strconv.Itoa(i)), receipt, gopts...)
				guard.Do(context.Background(), g, "bench", gin("guard-replayed"), receipt, gopts...)
			}
			guardFirst := func(b *testing.B) {
				round++
				prefix := "guard-" + strconv.Itoa(round) + "-"
				for i := range b.N {
					if _, err := guard.Do(context.Background(), g, "bench", gin(prefix+strconv.Itoa(i)), receipt, gopts...); err != nil {
						b.Fatal(err)
					}
				}
			}
			guardReplay := func(b *testing.B) {
				for b.Loop() {
					if _, err := guard.Do(context.Background(), g, "bench", gin("guard-replayed"), receipt, gopts...); err != nil {
						b.Fatal(err)
					}
				}
			}
			bare := func(b *testing.B) {
				for b.Loop() {
					handler.ServeHTTP(httptest.NewRecorder(), request("k"))
				}
			}
			first := func(b *testing.B) {
				round++
				prefix := "first-" + strconv.Itoa(round) + "-"
				if n != nil {
					n.Reset()
				}
				b.ResetTimer()
				for i := range b.N {
					w := httptest.NewRecorder()
					h.ServeHTTP(w, request(prefix+strconv.Itoa(i)))
					if w.Code != http.StatusCreated {
						b.Fatalf("status %d: %s", w.Code, w.Body)
					}
				}
				b.StopTimer()
				requests(b, 2)
			}
			replay := func(b *testing.B) {
				if n != nil {
					n.Reset()
				}
				b.ResetTimer()
				for range b.N {
					w := httptest.NewRecorder()
					h.ServeHTTP(w, request("warm-0"))
					if w.Header().Get("Idempotency-Key-Status") != "replayed" {
						b.Fatalf("not a replay: %d %v", w.Code, w.Header())
					}
				}
				b.StopTimer()
				requests(b, 1)
			}
			// Rounds of every scenario in turn, so that a store warming up
			// (DynamoDB Local's JIT) or a neighbour's load favours none.
			for range rounds {
				b.Run("bare", bare)
				b.Run("guard-first", guardFirst)
				b.Run("first", first)
				b.Run("guard-replay", guardReplay)
				b.Run("replay", replay)
			}
		})
	}
}
