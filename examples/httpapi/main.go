// Command httpapi is a payments API on net/http whose POST requests are
// guarded by the Idempotency-Key middleware (httpguard), and a small client
// that sends each request twice, once serialised anew, once with a
// different body, once from another account, and prints the statuses and
// headers it gets.
//
//	go run ./examples/httpapi                 # records in memory
//	IDEMGUARD_DYNAMODB_ENDPOINT=http://127.0.0.1:8000 go run ./examples/httpapi
//	go run ./examples/httpapi -serve -addr 127.0.0.1:8080   # keep serving
//
// With IDEMGUARD_DYNAMODB_ENDPOINT set (scripts/harness.sh sets it; so does
// docker compose up -d dynamodb), the records are kept in DynamoDB (Local)
// in the table named by -table, created on the first run.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/httpguard"
	"github.com/idemguard/idemguard/store"
	idemddb "github.com/idemguard/idemguard/store/dynamodb"
	"github.com/idemguard/idemguard/store/memory"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "loopback address to listen on")
	table := flag.String("table", "idemguard-httpapi", "DynamoDB table, when IDEMGUARD_DYNAMODB_ENDPOINT is set")
	keep := flag.Bool("serve", false, "keep serving after the demo client, until interrupted")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Stdout, *addr, os.Getenv("IDEMGUARD_DYNAMODB_ENDPOINT"), *table, *keep); err != nil {
		fmt.Fprintln(os.Stderr, "httpapi:", err)
		os.Exit(1)
	}
}

// run serves the API on addr, drives it with the demo client, and prints
// what the client saw to out.
func run(ctx context.Context, out io.Writer, addr, endpoint, table string, keep bool) error {
	s, where, err := openStore(ctx, endpoint, table)
	if err != nil {
		return err
	}
	g, err := guard.New(s)
	if err != nil {
		return err
	}
	api := newAPI()
	// The middleware's defaults: successful responses stored for 24 h, a
	// duplicate waits up to 30 s for the first response, keys scoped by the
	// caller's Authorization header (an API with an authentication
	// middleware would name the account with httpguard.WithPrincipal), JSON
	// bodies compared as JSON.
	mw, err := httpguard.Middleware(g,
		// A dead server blocks a key for about 5 s, not a minute: a
		// duplicate then takes it over, and one refused with 409 gets a
		// Retry-After of about that.
		httpguard.WithGuardOptions(guard.WithLease(5*time.Second)),
	)
	if err != nil {
		return err
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mw(api.routes()), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(lis)
	defer srv.Close()

	base := "http://" + lis.Addr().String()
	fmt.Fprintf(out, "payments API on %s, records in %s\n\n", base, where)
	if err := demo(ctx, out, base); err != nil {
		return err
	}
	fmt.Fprintf(out, "\npayments created: %d\n", api.created())
	if keep {
		fmt.Fprintf(out, "serving on %s until interrupted\n", base)
		<-ctx.Done()
	}
	return nil
}

// openStore returns the memory store, or a DynamoDB store when endpoint is
// set.
func openStore(ctx context.Context, endpoint, table string) (store.Store, string, error) {
	if endpoint == "" {
		return memory.New(), "memory", nil
	}
	client := dynamodb.New(dynamodb.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(endpoint),
		Credentials:  aws.NewCredentialsCache(localCredentials{}),
	})
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := idemddb.CreateTable(cctx, client, table); err != nil && !errors.Is(err, idemddb.ErrTTLNotEnabled) {
		return nil, "", err
	}
	s, err := idemddb.New(client, table)
	return s, "DynamoDB table " + table + " at " + endpoint, err
}

// localCredentials are what DynamoDB Local is given: it accepts any.
type localCredentials struct{}

func (localCredentials) Retrieve(context.Context) (aws.Credentials, error) {
	return aws.Credentials{AccessKeyID: "local", SecretAccessKey: "local", Source: "httpapi example"}, nil
}

// api is the payments service: an in-memory ledger behind two routes.
type api struct {
	mu       sync.Mutex
	payments map[string]payment
}

type payment struct {
	ID       string `json:"id"`
	Account  string `json:"account"`
	Amount   int    `json:"amount"`
	Currency string `json:"currency"`
	Status   string `json:"status"`
}

func newAPI() *api { return &api{payments: map[string]payment{}} }

func (a *api) routes() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /payments", a.create)
	mux.HandleFunc("GET /payments/{id}", a.get)
	return mux
}

func (a *api) created() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.payments)
}

// create charges the amount: 201 with the payment, or 402 when the amount
// is over the card's limit (an error response: not stored, so that the
// client may retry it, changed or not, under the same key).
func (a *api) create(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Amount   int    `json:"amount"`
		Currency string `json:"currency"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Amount <= 0 {
		http.Error(w, "body must be {\"amount\": positive, \"currency\": ...}", http.StatusBadRequest)
		return
	}
	if in.Amount > 100_000 {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusPaymentRequired)
		io.WriteString(w, `{"error":"card_declined"}`+"\n")
		return
	}
	a.mu.Lock()
	p := payment{
		ID:       fmt.Sprintf("pay_%d", len(a.payments)+1),
		Account:  strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "),
		Amount:   in.Amount,
		Currency: in.Currency,
		Status:   "succeeded",
	}
	a.payments[p.ID] = p
	a.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/payments/"+p.ID)
	w.WriteHeader(http.StatusCreated)
	json.NewEncoder(w).Encode(p)
}

func (a *api) get(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	p, ok := a.payments[r.PathValue("id")]
	a.mu.Unlock()
	if !ok {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(p)
}

// demo is the client: each request twice, then once with another body.
func demo(ctx context.Context, out io.Writer, base string) error {
	run := time.Now().UnixNano() // keys unique to this run, for a table kept between runs
	steps := []struct {
		what, account, key, body string
	}{
		{"charge", "acct_a", "charge-1", `{"amount":1999,"currency":"EUR"}`},
		{"retry", "acct_a", "charge-1", `{"amount":1999,"currency":"EUR"}`},
		{"retry, JSON serialised anew", "acct_a", "charge-1", `{ "currency": "EUR", "amount": 1999 }`},
		{"same key, other body", "acct_a", "charge-1", `{"amount":2999,"currency":"EUR"}`},
		{"same key, other account", "acct_b", "charge-1", `{"amount":1999,"currency":"EUR"}`},
		{"declined", "acct_a", "charge-2", `{"amount":500000,"currency":"EUR"}`},
		{"retry", "acct_a", "charge-2", `{"amount":500000,"currency":"EUR"}`},
		{"no key", "acct_a", "", `{"amount":1999,"currency":"EUR"}`},
	}
	for _, s := range steps {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/payments", strings.NewReader(s.body))
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+s.account)
		req.Header.Set("Content-Type", "application/json")
		key := "(none)"
		if s.key != "" {
			key = fmt.Sprintf("%s-%d", s.key, run)
			req.Header.Set("Idempotency-Key", key)
			key = s.key
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "%-28s %s key=%s %s\n", s.what, s.account, key, s.body)
		fmt.Fprintf(out, "  -> %d %s\n", resp.StatusCode, strings.TrimSpace(string(body)))
		for _, h := range []string{"Idempotency-Key-Status", "Idempotency-Key-Expires", "Location", "Retry-After"} {
			if v := resp.Header.Get(h); v != "" {
				fmt.Fprintf(out, "     %s: %s\n", h, v)
			}
		}
	}
	return nil
}
