package lambdaguard

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/httpguard"
	"github.com/idemguard/idemguard/internal/leasecap"
)

// WrapAPIGateway returns a handler for API Gateway REST API proxy events
// that gives fn the HTTP semantics of package httpguard, from httpguard
// itself: each event becomes an *http.Request that runs through
// httpguard's middleware in front of fn, and the response the middleware
// answers (fn's, replayed or fresh, or the middleware's problem) becomes
// the event's response. So a POST or PATCH needs an Idempotency-Key header
// (400 without one), a retry with the key replays the stored response
// (Idempotency-Key-Status: replayed) for 24 hours, a duplicate of a
// request that still runs waits for it (then 409 with Retry-After), and a
// key reused with another body gets 422; fn's 2xx and 3xx responses are
// stored, others released (httpguard.WithStatusPolicy changes that). See
// docs/http.md in the repository for every header and problem, and
// [WithHTTPOptions] for httpguard's options.
//
// The request's route in the key is the event's resource ("/orders/{id}");
// the caller is the authorizer's identity when the request has one (a
// Lambda authorizer's principalId, a Cognito user's sub, an IAM caller's
// ARN), else the Authorization header, so that one caller's key never
// meets another's, SigV4-signed requests included. A base64 body is
// decoded for fn's middleware and its fingerprint; a response body that is
// not UTF-8 text goes back base64-encoded.
//
// fn receives the event as API Gateway sent it, with a context in which
// guard.Step and guard.KeyFromContext work. An error from fn is returned
// to the runtime (API Gateway answers 502) and releases the key.
func WrapAPIGateway(g *guard.Guard, fn func(context.Context, events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error), opts ...Option) (func(context.Context, events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error), error) {
	return wrapHTTP(g, fn, opts, restAPI{})
}

// WrapHTTPAPI is [WrapAPIGateway] for API Gateway HTTP API events
// (payload format 2.0). The route is the event's route key
// ("POST /orders"), and cookies travel in the event's cookies lists.
func WrapHTTPAPI(g *guard.Guard, fn func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error), opts ...Option) (func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error), error) {
	return wrapHTTP(g, fn, opts, httpAPI{})
}

// WrapFunctionURL is [WrapAPIGateway] for Lambda Function URL events. The
// route is the request's path; the caller is the IAM caller with AWS_IAM
// auth.
func WrapFunctionURL(g *guard.Guard, fn func(context.Context, events.LambdaFunctionURLRequest) (events.LambdaFunctionURLResponse, error), opts ...Option) (func(context.Context, events.LambdaFunctionURLRequest) (events.LambdaFunctionURLResponse, error), error) {
	return wrapHTTP(g, fn, opts, functionURL{})
}

// format converts one kind of HTTP event and its response.
type format[Req, Resp any] interface {
	// request returns what httpguard needs of req: method, URL, headers
	// (with the caller's identity as Authorization), body, and the route.
	request(req Req) (method, path, query string, h http.Header, body []byte, route string, err error)
	// write writes resp to w.
	write(w http.ResponseWriter, resp Resp) error
	// response makes the event's response of what the middleware answered.
	response(status int, h http.Header, body []byte) Resp
}

// exchange is what the handler behind the middleware needs for one event.
type exchange struct {
	route string
	serve func(ctx context.Context, w http.ResponseWriter) error // runs fn, writes its response
	err   error                                                  // fn's error, if it ran and failed
}

type exchangeKey struct{}

func exchangeOf(r *http.Request) *exchange { return r.Context().Value(exchangeKey{}).(*exchange) }

func wrapHTTP[Req, Resp any, F format[Req, Resp]](g *guard.Guard, fn func(context.Context, Req) (Resp, error), opts []Option, f F) (func(context.Context, Req) (Resp, error), error) {
	c, err := newConfig(g, opts, httpWrapper)
	if err != nil {
		return nil, err
	}
	if fn == nil {
		return nil, invalid("nil handler")
	}
	hopts := []httpguard.Option{httpguard.WithScope(c.scope), httpguard.WithRoute(func(r *http.Request) string { return exchangeOf(r).route })}
	if len(c.guardOpts) > 0 {
		hopts = append(hopts, httpguard.WithGuardOptions(c.guardOpts...))
	}
	mw, err := httpguard.Middleware(g, append(hopts, c.httpOpts...)...)
	if err != nil {
		return nil, err
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		x := exchangeOf(r)
		if x.err = x.serve(r.Context(), w); x.err != nil {
			w.WriteHeader(http.StatusBadGateway) // not stored: the key is released
		}
	}))
	return func(ctx context.Context, req Req) (Resp, error) {
		var resp Resp
		ctx = leasecap.AtDeadline(ctx)
		if g.Disabled() {
			// Inside a disabled call, so that guard.Step works.
			_, err := guard.Do(ctx, g, c.scope, nil, func(ctx context.Context) (struct{}, error) {
				var err error
				resp, err = fn(ctx, req)
				return struct{}{}, err
			})
			return resp, err
		}
		method, path, query, header, body, route, err := f.request(req)
		if err != nil {
			return resp, err
		}
		x := &exchange{route: route, serve: func(ctx context.Context, w http.ResponseWriter) error {
			resp, err := fn(ctx, req)
			if err != nil {
				return err
			}
			return f.write(w, resp)
		}}
		u := url.URL{Scheme: "https", Host: header.Get("Host"), Path: path, RawQuery: query}
		if u.Host == "" {
			u.Host = "lambda"
		}
		r, err := http.NewRequestWithContext(context.WithValue(ctx, exchangeKey{}, x), method, u.String(), bytes.NewReader(body))
		if err != nil {
			return resp, err
		}
		r.Header = header
		rec := &recorder{h: http.Header{}}
		h.ServeHTTP(rec, r)
		if x.err != nil {
			return resp, x.err
		}
		return f.response(rec.status(), rec.h, rec.body.Bytes()), nil
	}, nil
}

// recorder is the http.ResponseWriter the middleware answers into.
type recorder struct {
	h     http.Header
	code  int
	body  bytes.Buffer
	wrote bool
}

func (r *recorder) Header() http.Header { return r.h }

func (r *recorder) WriteHeader(code int) {
	if !r.wrote {
		r.code, r.wrote = code, true
	}
}

func (r *recorder) Write(b []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	return r.body.Write(b)
}

func (r *recorder) status() int {
	if r.code == 0 {
		return http.StatusOK
	}
	return r.code
}

// decodeBody returns an event's body as bytes.
func decodeBody(body string, b64 bool) ([]byte, error) {
	if !b64 {
		return []byte(body), nil
	}
	b, err := base64.StdEncoding.DecodeString(body)
	if err != nil {
		return nil, errors.New("lambdaguard: the event's body is marked base64 but is not")
	}
	return b, nil
}

// encodeBody returns a response body for an event: as it is when it is
// UTF-8 text, else base64.
func encodeBody(b []byte) (string, bool) {
	if utf8.Valid(b) {
		return string(b), false
	}
	return base64.StdEncoding.EncodeToString(b), true
}

// writeResponse writes a proxy response's parts to w: single headers,
// then multi-value ones (which win, as API Gateway merges them), cookies,
// the status (200 if unset) and the body.
func writeResponse(w http.ResponseWriter, status int, single map[string]string, multi map[string][]string, cookies []string, body string, b64 bool) error {
	b, err := decodeBody(body, b64)
	if err != nil {
		return errors.New("lambdaguard: the handler's response body is marked base64 but is not")
	}
	h := w.Header()
	for k, v := range single {
		h.Set(k, v)
	}
	for k, vs := range multi {
		h.Del(k)
		for _, v := range vs {
			h.Add(k, v)
		}
	}
	for _, c := range cookies {
		h.Add("Set-Cookie", c)
	}
	if status == 0 {
		status = http.StatusOK
	}
	w.WriteHeader(status)
	_, err = w.Write(b)
	return err
}

// headerValues returns h's non-empty values by name, in a stable order.
func headerNames(h http.Header) []string {
	names := make([]string, 0, len(h))
	for k, vs := range h {
		if len(vs) > 0 && !(len(vs) == 1 && vs[0] == "") {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	return names
}

// joined returns h as single-valued headers (values joined with ", "),
// without Set-Cookie, and the Set-Cookie values apart: the HTTP API's and
// Function URL's response shape.
func joined(h http.Header) (map[string]string, []string) {
	out := make(map[string]string, len(h))
	var cookies []string
	for _, k := range headerNames(h) {
		if k == "Set-Cookie" {
			cookies = h[k]
			continue
		}
		out[k] = strings.Join(h[k], ", ")
	}
	return out, cookies
}

// singleHeaders makes an http.Header of an event's single-valued headers
// (HTTP API and Function URL events join repeated headers with commas).
func singleHeaders(m map[string]string, cookies []string) http.Header {
	h := make(http.Header, len(m)+1)
	for k, v := range m {
		h.Set(k, v)
	}
	if len(cookies) > 0 {
		h.Set("Cookie", strings.Join(cookies, "; "))
	}
	return h
}

// identify sets the Authorization header of the request made for
// httpguard to the authorizer's identity of the caller, when the event
// has one, so that httpguard's caller scoping (by the Authorization
// header) names the caller and not, say, a SigV4 signature that differs
// on every retry.
func identify(h http.Header, kind, id string) {
	if id != "" {
		h.Set("Authorization", "Identity "+kind+" "+id)
	}
}

func authorizerString(m map[string]any, key string) string {
	s, _ := m[key].(string)
	return s
}

// restAPI is the REST API proxy format (payload 1.0).
type restAPI struct{}

func (restAPI) request(e events.APIGatewayProxyRequest) (string, string, string, http.Header, []byte, string, error) {
	h := make(http.Header, len(e.Headers))
	if len(e.MultiValueHeaders) > 0 {
		for k, vs := range e.MultiValueHeaders {
			for _, v := range vs {
				h.Add(k, v)
			}
		}
	} else {
		for k, v := range e.Headers {
			h.Set(k, v)
		}
	}
	q := url.Values{}
	if len(e.MultiValueQueryStringParameters) > 0 {
		for k, vs := range e.MultiValueQueryStringParameters {
			q[k] = vs
		}
	} else {
		for k, v := range e.QueryStringParameters {
			q.Set(k, v)
		}
	}
	rc := e.RequestContext
	switch claims, _ := rc.Authorizer["claims"].(map[string]any); {
	case authorizerString(rc.Authorizer, "principalId") != "":
		identify(h, "lambda", authorizerString(rc.Authorizer, "principalId"))
	case authorizerString(claims, "sub") != "":
		identify(h, "cognito", authorizerString(claims, "iss")+" "+authorizerString(claims, "sub"))
	case rc.Identity.UserArn != "":
		identify(h, "iam", rc.Identity.UserArn)
	case rc.Identity.CognitoIdentityID != "":
		identify(h, "cognito-identity", rc.Identity.CognitoIdentityID)
	}
	body, err := decodeBody(e.Body, e.IsBase64Encoded)
	route := e.Resource
	if route == "" {
		route = e.Path
	}
	return e.HTTPMethod, e.Path, q.Encode(), h, body, route, err
}

func (restAPI) write(w http.ResponseWriter, r events.APIGatewayProxyResponse) error {
	return writeResponse(w, r.StatusCode, r.Headers, r.MultiValueHeaders, nil, r.Body, r.IsBase64Encoded)
}

func (restAPI) response(status int, h http.Header, body []byte) events.APIGatewayProxyResponse {
	r := events.APIGatewayProxyResponse{StatusCode: status, Headers: map[string]string{}, MultiValueHeaders: map[string][]string{}}
	for _, k := range headerNames(h) {
		r.MultiValueHeaders[k] = h[k]
		if len(h[k]) == 1 {
			r.Headers[k] = h[k][0]
		}
	}
	r.Body, r.IsBase64Encoded = encodeBody(body)
	return r
}

// httpAPI is the HTTP API format (payload 2.0).
type httpAPI struct{}

func (httpAPI) request(e events.APIGatewayV2HTTPRequest) (string, string, string, http.Header, []byte, string, error) {
	h := singleHeaders(e.Headers, e.Cookies)
	if a := e.RequestContext.Authorizer; a != nil {
		switch {
		case a.JWT != nil && a.JWT.Claims["sub"] != "":
			identify(h, "jwt", a.JWT.Claims["iss"]+" "+a.JWT.Claims["sub"])
		case a.IAM != nil && a.IAM.UserARN != "":
			identify(h, "iam", a.IAM.UserARN)
		case authorizerString(a.Lambda, "principalId") != "":
			identify(h, "lambda", authorizerString(a.Lambda, "principalId"))
		}
	}
	body, err := decodeBody(e.Body, e.IsBase64Encoded)
	route := e.RouteKey
	if route == "" || route == "$default" {
		route = e.RawPath
	}
	return e.RequestContext.HTTP.Method, e.RawPath, e.RawQueryString, h, body, route, err
}

func (httpAPI) write(w http.ResponseWriter, r events.APIGatewayV2HTTPResponse) error {
	return writeResponse(w, r.StatusCode, r.Headers, r.MultiValueHeaders, r.Cookies, r.Body, r.IsBase64Encoded)
}

func (httpAPI) response(status int, h http.Header, body []byte) events.APIGatewayV2HTTPResponse {
	r := events.APIGatewayV2HTTPResponse{StatusCode: status}
	r.Headers, r.Cookies = joined(h)
	r.Body, r.IsBase64Encoded = encodeBody(body)
	return r
}

// functionURL is the Function URL format.
type functionURL struct{}

func (functionURL) request(e events.LambdaFunctionURLRequest) (string, string, string, http.Header, []byte, string, error) {
	h := singleHeaders(e.Headers, e.Cookies)
	if a := e.RequestContext.Authorizer; a != nil && a.IAM != nil && a.IAM.UserARN != "" {
		identify(h, "iam", a.IAM.UserARN)
	}
	body, err := decodeBody(e.Body, e.IsBase64Encoded)
	return e.RequestContext.HTTP.Method, e.RawPath, e.RawQueryString, h, body, e.RawPath, err
}

func (functionURL) write(w http.ResponseWriter, r events.LambdaFunctionURLResponse) error {
	return writeResponse(w, r.StatusCode, r.Headers, nil, r.Cookies, r.Body, r.IsBase64Encoded)
}

func (functionURL) response(status int, h http.Header, body []byte) events.LambdaFunctionURLResponse {
	r := events.LambdaFunctionURLResponse{StatusCode: status}
	r.Headers, r.Cookies = joined(h)
	r.Body, r.IsBase64Encoded = encodeBody(body)
	return r
}
