package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemguard/idemguard/grpcguard"
	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/httpguard"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/memory"
)

// recordKeyOf sends req through a middleware built with opts on a guard
// built with gopts, and returns the record key the handler ran under.
func recordKeyOf(t *testing.T, gopts []guard.Option, opts []httpguard.Option, viaMux bool, req *http.Request) string {
	t.Helper()
	g, err := guard.New(memory.New(), gopts...)
	if err != nil {
		t.Fatal(err)
	}
	var key string
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, _ = guard.KeyFromContext(r.Context())
		w.WriteHeader(http.StatusCreated)
	})
	var next http.Handler = h
	if viaMux {
		mux := http.NewServeMux()
		mux.Handle("POST /accounts/{id}/payments", h)
		next = mux
	}
	rec := httptest.NewRecorder()
	httpguard.MustMiddleware(g, opts...)(next).ServeHTTP(rec, req)
	if rec.Code != http.StatusCreated || key == "" {
		t.Fatalf("the middleware answered %d %s; the handler saw key %q", rec.Code, rec.Body, key)
	}
	return key
}

// idemguard key --http prints the record key the middleware derives for
// a request: from its method, route, caller (principal, or hashed
// Authorization) and Idempotency-Key, under the scope and key secret.
func TestKeyHTTPMatchesMiddleware(t *testing.T) {
	const secretHex = "00112233445566778899aabbccddeeff"
	secret := []byte(secretHex)
	for _, tc := range []struct {
		name   string
		gopts  []guard.Option
		opts   []httpguard.Option
		mux    bool
		header map[string]string
		env    map[string]string
		args   []string
	}{
		{name: "mux route, Authorization", mux: true,
			header: map[string]string{"Authorization": "Bearer alice", "Idempotency-Key": "k-1"},
			env:    map[string]string{"AUTH": "Bearer alice"},
			args:   []string{"--route", "POST /accounts/{id}/payments", "--idempotency-key", "k-1", "--authorization-env", "AUTH"}},
		{name: "quoted key, path route",
			header: map[string]string{"Authorization": "Bearer bob", "Idempotency-Key": `"k-2"`},
			env:    map[string]string{"AUTH": "Bearer bob"},
			args:   []string{"--route", "/accounts/7/payments", "--idempotency-key", "k-2", "--authorization-env", "AUTH"}},
		{name: "no credentials",
			header: map[string]string{"Idempotency-Key": "k-3"},
			args:   []string{"--route", "/accounts/7/payments", "--idempotency-key", `"k-3"`}},
		{name: "principal", opts: []httpguard.Option{httpguard.WithPrincipal(func(r *http.Request) string { return r.Header.Get("X-Account") })},
			header: map[string]string{"X-Account": "acct_1", "Authorization": "Bearer carol", "Idempotency-Key": "k-4"},
			args:   []string{"--route", "/accounts/7/payments", "--idempotency-key", "k-4", "--principal", "acct_1"}},
		{name: "shared keys, scope, key secret", gopts: []guard.Option{guard.WithKeySecret(secret)},
			opts:   []httpguard.Option{httpguard.WithSharedKeys(), httpguard.WithScope("payments-api")},
			header: map[string]string{"Authorization": "Bearer dave", "Idempotency-Key": "k-5"},
			env:    map[string]string{"SECRET": secretHex},
			args:   []string{"--route", "/accounts/7/payments", "--idempotency-key", "k-5", "--shared-keys", "--scope", "payments-api", "--key-secret-env", "SECRET"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodPost, "/accounts/7/payments", strings.NewReader(`{"amount":1}`))
			for k, v := range tc.header {
				req.Header.Set(k, v)
			}
			want := recordKeyOf(t, tc.gopts, tc.opts, tc.mux, req)
			r := runIn(append([]string{"key", "--http"}, tc.args...), strings.NewReader(""), tc.env)
			if got := strings.TrimSpace(r.stdout); r.code != exitOK || got != want {
				t.Errorf("idemguard key --http %q = %q (exit %d, %s); the middleware's record key is %q", tc.args, got, r.code, r.stderr, want)
			}
		})
	}
	for _, args := range [][]string{
		{"key", "--http", "--route", "/p"},                              // no key
		{"key", "--http", "--idempotency-key", "k"},                     // no route
		{"key", "--http", "--route", "/p", "--idempotency-key", `"bad`}, // malformed key
		{"key", "--http", "--route", "/p", "--idempotency-key", "k", "--principal", "p", "--shared-keys"},
		{"key", "--http", "--route", "/p", "--idempotency-key", "k", "--authorization-env", "UNSET"},
		{"key", "--http", "--route", "/p", "--idempotency-key", "k", "--key-path", "a"},
		{"key", "--route", "/p"}, // --route without --http
	} {
		if r := runIn(args, strings.NewReader("{}"), nil); r.code != exitError {
			t.Errorf("idemguard %q: exit %d (%s), want 2", args, r.code, r.stdout)
		}
	}
}

// get shows a response stored by httpguard (status, headers, body,
// trailers) and one stored by grpcguard (the message, or the status)
// decoded, not as base64; --json says no result kind for an in-progress
// record.
func TestGetShowsTransportResults(t *testing.T) {
	for _, st := range e2eStores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			f := st.open(t)
			g, err := guard.New(f.s)
			if err != nil {
				t.Fatal(err)
			}
			env := []string{StoreEnv + "=" + f.url}

			// HTTP.
			var httpKey string
			h := httpguard.MustMiddleware(g)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				httpKey, _ = guard.KeyFromContext(r.Context())
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("Location", "/payments/pay_1")
				w.Header().Set("Trailer", "X-Checksum")
				w.WriteHeader(http.StatusCreated)
				w.Write([]byte(`{"id":"pay_1","amount":1999}`))
				w.Header().Set("X-Checksum", "c0ffee")
			}))
			req := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader("{}"))
			req.Header.Set("Idempotency-Key", "k-1")
			h.ServeHTTP(httptest.NewRecorder(), req)
			r := cli(t, env, "", "get", httpKey).want(t, exitOK, "get", httpKey)
			for _, want := range []string{"HTTP response", "201 Created", "Content-Type: application/json", "Location: /payments/pay_1", `"id": "pay_1"`, "trailer X-Checksum: c0ffee"} {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("get of an HTTP response lacks %q:\n%s", want, r.stdout)
				}
			}
			res := checkGetJSON(t, cli(t, env, "", "get", httpKey, "--json").want(t, exitOK).stdout).Result
			if res == nil || res.Format != "http-response" || res.Status != http.StatusCreated || res.Header["Location"][0] != "/payments/pay_1" ||
				string(res.Value) != `{"id":"pay_1","amount":1999}` || res.Trailer["X-Checksum"][0] != "c0ffee" {
				t.Errorf("get --json of an HTTP response: %+v", res)
			}

			// gRPC: a message, and an error stored with WithCacheErrors.
			icpt := grpcguard.MustUnaryServerInterceptor(g, grpcguard.WithCacheErrors())
			var grpcKeys []string
			call := func(key string, reply any, err error) {
				ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("idempotency-key", key))
				icpt(ctx, wrapperspb.String("req"), &grpc.UnaryServerInfo{FullMethod: "/pay.v1.Payments/Charge"}, func(ctx context.Context, _ any) (any, error) {
					k, _ := guard.KeyFromContext(ctx)
					grpcKeys = append(grpcKeys, k)
					return reply, err
				})
			}
			call("k-2", wrapperspb.String("charge 1"), nil)
			declined, _ := status.New(codes.FailedPrecondition, "card declined").WithDetails(&errdetails.ErrorInfo{Reason: "DECLINED", Domain: "payments"})
			call("k-3", nil, declined.Err())
			if len(grpcKeys) != 2 {
				t.Fatalf("the handler ran %d times", len(grpcKeys))
			}
			r = cli(t, env, "", "get", grpcKeys[0]).want(t, exitOK)
			if !strings.Contains(r.stdout, "gRPC message google.protobuf.StringValue") || !strings.Contains(r.stdout, `"charge 1"`) {
				t.Errorf("get of a gRPC message:\n%s", r.stdout)
			}
			res = checkGetJSON(t, cli(t, env, "", "get", grpcKeys[0], "--json").want(t, exitOK).stdout).Result
			if res == nil || res.Format != "grpc-message" || res.Type != "google.protobuf.StringValue" || string(res.Value) != `"charge 1"` {
				t.Errorf("get --json of a gRPC message: %+v", res)
			}
			r = cli(t, env, "", "get", grpcKeys[1]).want(t, exitOK)
			if !strings.Contains(r.stdout, "gRPC status FailedPrecondition") || !strings.Contains(r.stdout, "card declined") || !strings.Contains(r.stdout, "DECLINED") {
				t.Errorf("get of a gRPC status:\n%s", r.stdout)
			}
			res = checkGetJSON(t, cli(t, env, "", "get", grpcKeys[1], "--json").want(t, exitOK).stdout).Result
			var sv struct {
				Code    int
				Message string
				Details []map[string]any
			}
			if res == nil || res.Format != "grpc-status" || json.Unmarshal(res.Value, &sv) != nil || sv.Code != int(codes.FailedPrecondition) || sv.Message != "card declined" || len(sv.Details) != 1 {
				t.Errorf("get --json of a gRPC status: %+v (%s)", res, res.Value)
			}

			// An in-progress record has no result kind.
			now := time.Now()
			held := &store.Record{Key: "charge#held", Status: store.StatusInProgress, Token: "t-held", ExpiresAt: now.Add(time.Hour), LeaseExpiresAt: now.Add(time.Minute)}
			if _, err := f.s.Acquire(context.Background(), held, now); err != nil {
				t.Fatal(err)
			}
			var obj map[string]any
			if err := json.Unmarshal([]byte(cli(t, env, "", "get", held.Key, "--json").want(t, exitOK).stdout), &obj); err != nil {
				t.Fatal(err)
			}
			if kind, ok := obj["result_kind"]; !ok || kind != nil {
				t.Errorf("get --json of an in-progress record: result_kind %v (present %v), want null", kind, ok)
			}
		})
	}
}
