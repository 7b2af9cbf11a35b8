package httpguard_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/httpguard"
	"github.com/idemguard/idemguard/store/memory"
)

// A payments endpoint on http.ServeMux: the retry of a request gets the
// first response, and a reused key with another body gets 422.
func ExampleMiddleware() {
	g, _ := guard.New(memory.New())
	charges := 0
	mux := http.NewServeMux()
	mux.HandleFunc("POST /payments", func(w http.ResponseWriter, r *http.Request) {
		charges++
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"charge":"ch_%d"}`, charges)
	})
	srv := httptest.NewServer(httpguard.MustMiddleware(g)(mux))
	defer srv.Close()

	send := func(key, body string) {
		req, _ := http.NewRequest("POST", srv.URL+"/payments", strings.NewReader(body))
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		fmt.Println(resp.StatusCode, resp.Header.Get("Idempotency-Key-Status"), resp.Header.Get("Content-Type"), string(b)[:min(len(b), 40)])
	}
	send(`"a1f0"`, `{"amount":100}`)
	send(`"a1f0"`, `{"amount":100}`) // the retry
	send(`"a1f0"`, `{"amount":999}`) // the same key for another request
	fmt.Println("charges:", charges)
	// Output:
	// 201 executed application/json {"charge":"ch_1"}
	// 201 replayed application/json {"charge":"ch_1"}
	// 422  application/problem+json {"type":"https://github.com/idemguard/id
	// charges: 1
}

// Keys scoped by caller: two accounts that send the same key get their own
// responses. The principal comes from whatever the authentication
// middleware in front put in the request.
func ExampleWithPrincipal() {
	g, _ := guard.New(memory.New())
	mw := httpguard.MustMiddleware(g,
		httpguard.WithPrincipal(func(r *http.Request) string { return r.Header.Get("X-Account") }),
		httpguard.WithGuardOptions(guard.WithLease(5*time.Second)), // a short Retry-After for duplicates
	)
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "transfer for %s", r.Header.Get("X-Account"))
	}))
	for _, account := range []string{"acct_a", "acct_b", "acct_a"} {
		req := httptest.NewRequest("POST", "/transfers", strings.NewReader(`{"cents":500}`))
		req.Header.Set("Idempotency-Key", "1")
		req.Header.Set("X-Account", account)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		fmt.Println(rec.Header().Get("Idempotency-Key-Status"), rec.Body.String())
	}
	// Output:
	// executed transfer for acct_a
	// executed transfer for acct_b
	// replayed transfer for acct_a
}
