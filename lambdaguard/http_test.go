package lambdaguard_test

import (
	"context"
	"encoding/base64"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/httpguard"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/lambdaguard"
	"github.com/idemguard/idemguard/store/memory"
)

func restRequest(key, body string) events.APIGatewayProxyRequest {
	return events.APIGatewayProxyRequest{
		Resource: "/orders", Path: "/orders", HTTPMethod: "POST",
		MultiValueHeaders: map[string][]string{"Idempotency-Key": {key}, "Content-Type": {"application/json"}},
		Body:              body,
	}
}

// A REST API request gets httpguard's semantics: 400 without a key, the
// handler's response stored and replayed with its headers, 422 for a key
// reused with another body.
func TestAPIGateway(t *testing.T) {
	var runs atomic.Int64
	g := newGuard(t, memory.New())
	h := lambdaguard.Must(lambdaguard.WrapAPIGateway(g, func(ctx context.Context, r events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error) {
		n := runs.Add(1)
		if _, ok := guard.KeyFromContext(ctx); !ok {
			t.Error("the handler runs outside a guarded call")
		}
		return events.APIGatewayProxyResponse{StatusCode: 201,
			Headers:           map[string]string{"Content-Type": "application/json"},
			MultiValueHeaders: map[string][]string{"X-Order": {"a", "b"}},
			Body:              `{"order":` + string(rune('0'+n)) + `}`}, nil
	}, lambdaguard.WithScope("api")))
	ctx := context.Background()
	first, err := h(ctx, restRequest("k1", `{"amount":1}`))
	if err != nil || first.StatusCode != 201 || first.Body != `{"order":1}` || first.Headers["Idempotency-Key-Status"] != "executed" {
		t.Fatalf("first = %+v, %v", first, err)
	}
	replay, err := h(ctx, restRequest("k1", `{ "amount": 1 }`))
	if err != nil || replay.StatusCode != 201 || replay.Body != `{"order":1}` || replay.Headers["Idempotency-Key-Status"] != "replayed" ||
		strings.Join(replay.MultiValueHeaders["X-Order"], ",") != "a,b" || replay.Headers["Content-Type"] != "application/json" {
		t.Errorf("replay = %+v, %v; want the stored response", replay, err)
	}
	reused, _ := h(ctx, restRequest("k1", `{"amount":2}`))
	noKey := restRequest("", `{}`)
	delete(noKey.MultiValueHeaders, "Idempotency-Key")
	missing, _ := h(ctx, noKey)
	if reused.StatusCode != 422 || missing.StatusCode != 400 || !strings.Contains(missing.Headers["Content-Type"], "problem+json") {
		t.Errorf("reused key %d, no key %d %q; want 422 and a 400 problem", reused.StatusCode, missing.StatusCode, missing.Headers["Content-Type"])
	}
	if runs.Load() != 1 {
		t.Errorf("the handler ran %d times, want once", runs.Load())
	}
}

// A handler error is returned to the runtime and releases the key; a
// binary response goes back base64-encoded, and a base64 request body is
// decoded for the fingerprint.
func TestAPIGatewayErrorAndBinary(t *testing.T) {
	var fail atomic.Bool
	fail.Store(true)
	g := newGuard(t, memory.New())
	h := lambdaguard.Must(lambdaguard.WrapAPIGateway(g, func(ctx context.Context, r events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error) {
		if fail.CompareAndSwap(true, false) {
			return events.APIGatewayProxyResponse{}, errDown
		}
		return events.APIGatewayProxyResponse{StatusCode: 200, Body: base64.StdEncoding.EncodeToString([]byte{0xff, 0x00}), IsBase64Encoded: true}, nil
	}, lambdaguard.WithScope("api")))
	req := restRequest("k", base64.StdEncoding.EncodeToString([]byte(`{"a":1}`)))
	req.IsBase64Encoded = true
	if _, err := h(context.Background(), req); !errors.Is(err, errDown) {
		t.Fatalf("first = %v, want the handler's error", err)
	}
	for range 2 {
		resp, err := h(context.Background(), req)
		if err != nil || !resp.IsBase64Encoded || resp.Body != base64.StdEncoding.EncodeToString([]byte{0xff, 0x00}) {
			t.Errorf("= %+v, %v; want the binary body base64-encoded", resp, err)
		}
	}
}

// Callers are told apart by the authorizer's identity: two IAM callers
// with one key get two records, and one caller's SigV4 signature, which
// differs on every retry, does not make a retry another request.
func TestHTTPAPICallerScoping(t *testing.T) {
	var runs atomic.Int64
	g := newGuard(t, memory.New())
	h := lambdaguard.Must(lambdaguard.WrapHTTPAPI(g, func(ctx context.Context, r events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		runs.Add(1)
		return events.APIGatewayV2HTTPResponse{StatusCode: 200, Body: "ok", Cookies: []string{"session=1"}}, nil
	}, lambdaguard.WithScope("api"), lambdaguard.WithHTTPOptions(httpguard.WithSetCookieReplay())))
	req := func(arn, signature string) events.APIGatewayV2HTTPRequest {
		return events.APIGatewayV2HTTPRequest{RouteKey: "POST /orders", RawPath: "/orders",
			Headers: map[string]string{"idempotency-key": "k", "authorization": "AWS4-HMAC-SHA256 Signature=" + signature},
			RequestContext: events.APIGatewayV2HTTPRequestContext{HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: "POST"},
				Authorizer: &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{IAM: &events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription{UserARN: arn}}}}
	}
	alice1, _ := h(context.Background(), req("arn:aws:iam::1:user/alice", "s1"))
	alice2, _ := h(context.Background(), req("arn:aws:iam::1:user/alice", "s2"))
	bob, _ := h(context.Background(), req("arn:aws:iam::1:user/bob", "s3"))
	if alice2.Headers["Idempotency-Key-Status"] != "replayed" || bob.Headers["Idempotency-Key-Status"] != "executed" || runs.Load() != 2 {
		t.Errorf("alice's retry %q, bob %q, %d runs; want alice's replayed, bob's executed", alice2.Headers["Idempotency-Key-Status"], bob.Headers["Idempotency-Key-Status"], runs.Load())
	}
	if len(alice1.Cookies) != 1 || len(alice2.Cookies) != 1 || alice2.Cookies[0] != "session=1" {
		t.Errorf("cookies %v, %v; want the cookie in the cookies list", alice1.Cookies, alice2.Cookies)
	}
}

// Function URL events, and a GET, which httpguard passes through.
func TestFunctionURL(t *testing.T) {
	var runs atomic.Int64
	g := newGuard(t, memory.New())
	h := lambdaguard.Must(lambdaguard.WrapFunctionURL(g, func(ctx context.Context, r events.LambdaFunctionURLRequest) (events.LambdaFunctionURLResponse, error) {
		runs.Add(1)
		return events.LambdaFunctionURLResponse{StatusCode: 202, Body: r.RawQueryString}, nil
	}, lambdaguard.WithScope("url")))
	req := func(method string) events.LambdaFunctionURLRequest {
		return events.LambdaFunctionURLRequest{RawPath: "/jobs", RawQueryString: "a=1",
			Headers:        map[string]string{"idempotency-key": `"k"`},
			RequestContext: events.LambdaFunctionURLRequestContext{HTTP: events.LambdaFunctionURLRequestContextHTTPDescription{Method: method}}}
	}
	for _, m := range []string{"POST", "POST", "GET"} {
		if resp, err := h(context.Background(), req(m)); err != nil || resp.StatusCode != 202 || resp.Body != "a=1" {
			t.Errorf("%s = %+v, %v", m, resp, err)
		}
	}
	if runs.Load() != 2 {
		t.Errorf("%d runs, want 2 (the POST once, the GET)", runs.Load())
	}
}

// With IDEMGUARD_DISABLED the handler runs, and guard.Step in it too.
func TestAPIGatewayDisabledKeepsSteps(t *testing.T) {
	t.Setenv(adapt.DisableEnv, "true")
	g := newGuard(t, memory.New())
	h := lambdaguard.Must(lambdaguard.WrapAPIGateway(g, func(ctx context.Context, r events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error) {
		v, err := guard.Step(ctx, "charge", func(context.Context) (string, error) { return "charged", nil })
		return events.APIGatewayProxyResponse{StatusCode: 200, Body: v}, err
	}, lambdaguard.WithScope("api")))
	if resp, err := h(context.Background(), restRequest("k", "{}")); err != nil || resp.Body != "charged" {
		t.Errorf("= %+v, %v", resp, err)
	}
}
