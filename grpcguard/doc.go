// Package grpcguard guards unary gRPC calls with an idempotency key, with
// the semantics of httpguard: the first call with a key runs the handler
// and its response is stored; a retry with the same key gets the stored
// response and the handler does not run.
//
//	srv := grpc.NewServer(grpc.UnaryInterceptor(grpcguard.MustUnaryServerInterceptor(g)))
//
// Clients send the key in the idempotency-key request metadata:
// [ContextWithKey] sets it on a context, and [UnaryClientInterceptor]
// gives every call without one a random key, which gRPC's own retries
// resend.
//
// The interceptor's calls are guard calls: the options given to guard.New
// apply to them, and [WithGuardOptions] passes more, which win over
// those. The interceptor's own defaults, a TTL of 24 hours and wait mode
// with a budget of 30 seconds (a duplicate waits for the first call's
// response), apply only where neither sets them.
//
// # Responses
//
// The response message is stored as its full type name and its wire bytes
// (proto.Marshal) and replayed by unmarshalling into a new message of that
// type, found in protoregistry.GlobalTypes (see [WithTypes]); so replays
// work for generated services and for handwritten grpc.ServiceDesc values
// alike. A handler's error releases the key by default, so that a retry
// runs the handler again, as httpguard releases 4xx and 5xx; with
// [WithCacheErrors] (or [WithCodePolicy]) it is stored as its
// google.rpc.Status (code, message, details) and replayed as the same
// status. Canceled, DeadlineExceeded, ResourceExhausted, Aborted and
// Unavailable are never stored: they ask the client to come back later.
// Response metadata the handler sets (grpc.SetHeader) is not stored.
//
// The response carries the idempotency-key-status metadata (executed,
// replayed or released) and, when stored, idempotency-key-expires (RFC
// 3339, the same on the first response and every replay): in the header
// metadata with a response, in the trailer metadata
// with an error, because header metadata would commit the call and stop
// gRPC's automatic retries of a released error.
//
// # Status codes
//
// The interceptor's own errors carry a google.rpc.ErrorInfo detail with
// domain [ErrorDomain] and one of the Reason constants:
//
//	code                when                                            httpguard
//	InvalidArgument     no key, or a malformed one                      400
//	Unauthenticated     WithPrincipal given and the call has none       403
//	Aborted             the first call with the key is still running    409
//	                    after the wait; a RetryInfo detail says when
//	FailedPrecondition  the key was first used with another request     422
//	AlreadyExists       the first call's response was too large to      410
//	                    store; it will not run again
//	Unavailable         the store failed before the handler ran         503
//
// Aborted, not Unavailable, for a call in progress: gRPC's status-code
// guide gives Aborted to concurrency conflicts that the client should
// retry at a higher level, and retry policies commonly retry Unavailable at
// once, which would hammer the key; the RetryInfo detail carries the
// holder's lease end plus the guard's clock skew. FailedPrecondition, not
// InvalidArgument, for a reused key: the request is valid in itself, and
// is refused because of the state of the system (a record made by another
// request); the guide says not to retry FailedPrecondition until that
// state changes. AlreadyExists for a response that was not kept: the call
// did happen, and a retry can never run it again.
//
// # Keys
//
// A key is scoped by the full method name and the caller, so that one
// caller's key never replays another's response: by default the call's
// authorization metadata, hashed (SHA-256; the credentials are never
// stored); [WithPrincipal] names the caller instead, and [WithSharedKeys]
// turns the scoping off. The request fingerprint ([DefaultFingerprint]:
// the method and the request's deterministic wire encoding) is the
// guard's payload validation. A call refused with Unavailable because the
// store failed is logged with the store's error (see [WithLogger]).
//
// # Telemetry
//
// The guard's idemguard.execute span is a child of the call's span, so
// with otelgrpc's server stats handler installed it nests under the gRPC
// server span; the interceptor also sets idemguard.outcome on that span.
package grpcguard
