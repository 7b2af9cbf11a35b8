// Package httpguard is net/http middleware that makes non-idempotent
// requests (POST and PATCH by default) safe to retry, with the
// Idempotency-Key request header of the IETF httpapi draft and the
// defaults of the ASP.NET idempotency middleware:
//
//	mux.Handle("POST /payments", httpguard.MustMiddleware(g)(createPayment))
//
// It is plain net/http middleware, so it fits http.ServeMux, chi,
// gorilla/mux and echo (echo.WrapMiddleware).
//
// # What a request gets
//
// The first request with a key runs the handler; a successful response
// (2xx or 3xx: status, the headers that are safe to replay, body and
// trailers) is stored under the key for 24 hours and sent with
// Idempotency-Key-Status: executed and Idempotency-Key-Expires. A retry
// with the same key gets the stored response byte for byte, with
// Idempotency-Key-Status: replayed and the same Idempotency-Key-Expires,
// and the handler does not run.
//
// Error responses (4xx, 5xx) are served and not stored: the record is
// released and the response says Idempotency-Key-Status: released, so
// that a client that fixes its request, or meets a server failure, may
// retry under the same key. [WithCacheErrors] stores them too, as
// Stripe stores its 500s; [WithStatusPolicy] chooses by status. 408, 425
// and 429 are never stored, whatever the policy: they ask the client to
// come back later.
//
//	status  when                                             problem type
//	as run  first request                                    (the handler's)
//	stored  retry after a stored response (replayed)         (the handler's)
//	400     no key on a guarded request                      key-missing
//	400     malformed key, or one too long or too short      key-invalid
//	400     malformed Idempotency-Expiry-Seconds             expiry-invalid
//	403     WithPrincipal given and the request has none     principal-missing
//	409     the first request with the key still runs after  in-progress (with Retry-After)
//	        the wait (30 s by default)
//	410     the first response was too large to store        response-unavailable
//	413     body larger than WithMaxBodyBytes                body-too-large
//	422     key reused with another method, path, query or body  key-reused
//	503     the store failed before the handler ran          store-unavailable (with Retry-After)
//
// These answers are RFC 9457 problem details (application/problem+json)
// whose "type" is a stable URI per problem (see [WithProblemBase]) and
// whose "detail" tells the client what to do. None of them is stored.
//
// # The guard's options
//
// The middleware's calls are guard calls: the options given to guard.New
// apply to them, and [WithGuardOptions] passes more, which win over
// those. The middleware's own defaults, a TTL of 24 hours and wait mode
// with a budget of 30 seconds, apply only where neither sets them:
//
//	g, _ := guard.New(store, guard.WithTTL(time.Hour))         // 1 h for every call of g
//	httpguard.MustMiddleware(g, httpguard.WithGuardOptions(
//		guard.WithWait(0),              // 409 at once instead of waiting
//		guard.WithLease(5*time.Second))) // and so a Retry-After of about 6 s
//
// # Keys, callers and principals
//
// A key is scoped by the request method, the route (see [WithRoute]) and
// the caller: the guard key is derived from all of them. The caller
// matters because keys come from clients: without it, a second tenant who
// sends the same Idempotency-Key value (a guessed, leaked or low-entropy
// key, or plainly the same counter) would be replayed the first tenant's
// response, with whatever it holds. By default the caller is the
// request's Authorization header, hashed (SHA-256; the credentials are
// never stored); [WithPrincipal] names it instead (a tenant or account ID
// that the authentication middleware in front put in the request), and
// [WithSharedKeys] turns the scoping off for public endpoints. With
// either of the first two, every caller has keys of its own, as the IETF
// draft's security considerations ask.
//
// # Fingerprints
//
// The request fingerprint ([DefaultFingerprint]: the method, the path, the
// query and the SHA-256 of the body, a JSON body in its canonical form) is
// stored with the record as the guard's payload validation: the same key
// with another fingerprint gets 422 and never another request's response,
// while the same JSON serialised again (another member order, other white
// space) is the same request. The body is read in full (up to
// [WithMaxBodyBytes]) before the handler runs, and handed to it unchanged.
//
// # Concurrent duplicates
//
// A duplicate that arrives while the first request runs waits for its
// response (30 s by default, guard.WithWait to change it) and is answered
// with it; concurrent duplicates in one process share one execution and
// one store round trip. One still waiting when the budget ends, or any
// duplicate with guard.WithWait(0), gets 409 with a Retry-After header: the
// seconds until the holder's lease ends plus the guard's clock-skew
// tolerance (at least 1), after which the key is either completed or free.
// A client may shorten its own wait with "Prefer: wait=N" (RFC 7240, N
// seconds; wait=0 answers 409 at once); a preference longer than the API's
// budget is held to the budget. Waiting duplicates in other processes learn
// of the response when the first request's completion is written, on a
// store that pushes completions (Redis, PostgreSQL).
//
// # Streaming, flushing, trailers and hijacking
//
// The handler writes to a buffer, so that its response can be stored
// before it is sent. Flushing (http.Flusher, http.ResponseController)
// sends what was written so far and streams the rest: the response is
// then committed before it is recorded, and is still stored, with the
// header it was sent with, if it fits [WithMaxResponseBytes]; its
// Idempotency-Key-Expires is then this server's reading of the record's
// expiry, which can be a little earlier than the one its replays announce
// (see docs/http.md). A response that grows past that bound is streamed
// to the client and recorded without its body, so the handler never runs
// twice for its key; a retry then gets 410 (see the table). Trailers,
// declared with the Trailer header or set with http.TrailerPrefix, are
// stored and replayed as trailers. Hijacking is refused on guarded
// requests (the response writer is not an http.Hijacker, and
// http.ResponseController reports http.ErrNotSupported): what is written
// to a hijacked connection could be neither stored nor replayed. 1xx
// informational responses are dropped.
//
// # Telemetry and logs
//
// The guard's idemguard.execute span is a child of the request's span, so
// with otelhttp installed in front of this middleware it nests under the
// HTTP server span; the middleware also sets idemguard.outcome (executed,
// replayed, in_progress, payload_mismatch, …) on that server span, so
// that request counts can leave replays out. A request refused with 503
// because the store failed is logged with the store's error (see
// [WithLogger]). Inside the handler, guard.KeyFromContext(r.Context())
// returns the request's idempotency key, to pass downstream (for example
// to a payment provider).
//
// See docs/http.md for every option, the headers and how they map to the
// IETF draft and to Stripe's behaviour.
package httpguard
