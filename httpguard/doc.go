// Package httpguard is net/http middleware that makes non-idempotent
// requests (POST and PATCH by default) safe to retry, with the
// Idempotency-Key request header of the IETF httpapi draft and the
// behaviour clients of Stripe-like APIs expect:
//
//	mux.Handle("POST /payments", httpguard.Middleware(g)(createPayment))
//
// It is plain net/http middleware, so it fits http.ServeMux, chi,
// gorilla/mux and echo (echo.WrapMiddleware).
//
// # What a request gets
//
// The first request with a key runs the handler; its response (status,
// the headers that are safe to replay, body) is stored under the key and
// sent with Idempotency-Key-Status: executed and Idempotency-Key-Expires.
// A retry with the same key gets the stored response byte for byte, with
// Idempotency-Key-Status: replayed, and the handler does not run.
//
//	status  when                                             problem type
//	as run  first request; the response is stored            (the handler's)
//	stored  retry after it completed (replayed)              (the handler's)
//	400     no key on a guarded request                      key-missing
//	400     malformed key, or one too long or too short      key-invalid
//	400     malformed Idempotency-Expiry-Seconds             expiry-invalid
//	403     WithPrincipal given and the request has none     principal-missing
//	409     the first request with the key is still running  in-progress (with Retry-After)
//	410     the first response was too large to store        response-unavailable
//	413     body larger than WithMaxBodyBytes                body-too-large
//	422     key reused with another method, path, query or body  key-reused
//	503     the store failed before the handler ran          store-unavailable (with Retry-After)
//
// These answers are RFC 9457 problem details (application/problem+json)
// whose "type" is a stable URI per problem (see [WithProblemBase]) and
// whose "detail" tells the client what to do. None of them is stored: a
// client that corrects its request may retry.
//
// A 5xx from the handler is served and not stored (see [WithStatusPolicy]):
// the record is released and the response says
// Idempotency-Key-Status: released, so the client's retry runs the
// handler again. [WithCacheErrorResponses] stores 5xx responses too, as
// Stripe does.
//
// # Keys and principals
//
// A key is scoped by the request method, the route (see [WithRoute]) and,
// with [WithPrincipal], the authenticated caller: the guard key is derived
// from all of them. The principal matters because keys come from clients:
// without it, a second tenant who sends the same Idempotency-Key value (a
// guessed, leaked or low-entropy key, or plainly the same counter) would be
// replayed the first tenant's response, with whatever it holds, or would
// block the first tenant's request with 409s or 422s. With it, every
// caller has keys of its own, as the IETF draft's security considerations
// ask (a composite lookup key of the client's key and client attributes).
//
// # Fingerprints
//
// The request fingerprint ([DefaultFingerprint]: the method, the path, the
// query and the SHA-256 of the body) is stored with the record as the
// guard's payload validation: the same key with another fingerprint gets
// 422 and never another request's response. The body is read in full
// (up to [WithMaxBodyBytes]) before the handler runs, and handed to it
// unchanged.
//
// # Concurrent duplicates
//
// A duplicate that arrives while the first request runs gets 409 with a
// Retry-After header: the seconds until the holder's lease ends plus the
// guard's clock-skew tolerance (at least 1), after which the key is either
// completed or free. With [WithWait], it waits for the first request's
// response instead and is answered with it; concurrent duplicates in one
// process share one execution and one store round trip.
//
// # Streaming, flushing and hijacking
//
// The handler writes to a buffer, so that its response can be stored
// before it is sent. Flushing (http.Flusher, http.ResponseController)
// sends what was written so far and streams the rest: the response is
// then committed before it is recorded, and is still stored if it fits
// [WithMaxResponseBytes]. A response that grows past that bound is
// streamed to the client and recorded without its body, so the handler
// never runs twice for its key; a retry then gets 410 (see the table).
// Hijacking is refused on guarded requests (the response writer is not an
// http.Hijacker, and http.ResponseController reports
// http.ErrNotSupported): what is written to a hijacked connection could be
// neither stored nor replayed. 1xx informational responses and trailers
// are dropped.
//
// # Telemetry
//
// The guard's idemguard.execute span is a child of the request's span, so
// with otelhttp installed in front of this middleware it nests under the
// HTTP server span; the middleware also sets idemguard.outcome (executed,
// replayed, in_progress, payload_mismatch, …) on that server span, so
// that request counts can leave replays out. Inside the handler,
// guard.KeyFromContext(r.Context()) returns the request's idempotency key,
// to pass downstream (for example to a payment provider).
//
// See docs/http.md for every option, the headers and how they map to the
// IETF draft and to Stripe's behaviour.
package httpguard
