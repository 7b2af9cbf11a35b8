// Package nexusguard guards Temporal Nexus operation handlers with
// idempotency records, so that a start request the caller's Nexus
// machinery resends — after a timeout, a worker crash or a transient
// error — does the handler's side effect once.
//
// A synchronous operation's handler runs on every start request it gets.
// The caller keeps one request ID per operation across its retries
// (nexus.StartOperationOptions.RequestID); nexusguard keys each start on
// it, runs the handler for the first, records its outcome, and replays
// that outcome to every start resent with the same request ID.
//
// There are three ways in. [Wrap] wraps a handler for
// nexus.NewSyncOperation and returns one with the same signature:
//
//	g, _ := guard.New(dynamoStore)
//	svc := nexus.NewService("payments")
//	svc.MustRegister(nexus.NewSyncOperation("charge", nexusguard.MustWrap(g, charge)))
//
// [WrapOperation] guards a whole operation, a workflow-run operation's
// included. [Policy] hands the same guard to activity.Interceptor,
// idemguard's one worker interceptor, which guards the operation without
// changing its code or registration:
//
//	w := worker.New(c, "payments", worker.Options{Interceptors: []interceptor.WorkerInterceptor{
//		activity.Must(activity.Interceptor(g, nexusguard.MustPolicy(g, "payments", "charge"))),
//	}})
//
// Each returns an error for a nil guard or an invalid option; its Must
// form panics instead, so that the mistake shows when the worker starts.
//
// # Keys
//
// A start's key is scoped by the service and the operation
// ("payments/charge") and derived from the request ID. With a key path
// (guard.WithKeyPath, given to guard.New or with [WithGuardOptions]) it is
// derived from the input instead: then two operations with the same
// business key (an order ID) share one outcome, whatever their request
// IDs. The whole input is validated by default (guard.WithPayloadValidation
// of "@"): a start with another input under the same key is refused. A
// start whose key is empty (no request ID, or a key path that selects
// nothing) is refused rather than run unguarded.
//
// # Errors
//
// The Nexus machinery tells a failed operation from a failed request:
//
//   - An operation error (nexus.NewOperationFailedErrorf,
//     nexus.NewOperationCanceledErrorf) is the operation's outcome. It is
//     recorded, and a resent start gets it back as the handler returned
//     it: failed or canceled, with its message and cause. So is an error
//     marked with guard.Definite, as a failed operation with its message.
//     guard.WithDefiniteErrors replaces this rule.
//   - Any other error of the handler's is returned untouched and releases
//     the key, so that the caller's retry runs the handler again: the SDK
//     makes a plain error a retryable internal handler error.
//   - The guard's own errors become handler errors: a start resent while
//     the first still runs, and a store that fails, are retryable; another
//     input under the key, a missing key or an input that cannot be keyed
//     are bad requests, not retried. Each carries, as its cause, the
//     Temporal application error that package activity makes of the same
//     guard error (activity.TemporalError), so that a caller workflow
//     matches one set of types (activity.ErrorTypeInProgress, …) for
//     activities and Nexus operations. A start resent while the first
//     still runs carries the holder's lease end plus the guard's clock
//     skew as that cause's next-retry delay.
//
// Nothing a replay returns differs from what the first start returned: a
// synchronous value is stored as a Temporal payload and decoded for the
// worker to encode again; an operation error is stored as a Temporal
// failure and returned as an operation error with the same state, message
// and cause.
//
// # Steps, and workflow-run operations
//
// The handler runs inside a guarded call, so guard.Step and
// guard.KeyFromContext work in it. A handler that fails after a side
// effect releases its key, and the caller's retry runs it again: make each
// side effect a step, which the retry replays.
//
// A workflow-run operation (temporalnexus.NewWorkflowRunOperation) already
// deduplicates its start: the SDK starts the workflow with the request ID,
// and the server gives a resent start the run the first one started. A
// start handler that only starts the workflow needs no guard. One that
// does a side effect first (reserve stock, then start the fulfilment
// workflow) does the side effect again on every resent start; guard it
// with [WrapOperation] or [Policy]: a resent start after the first
// succeeded replays its token and its link to the workflow, and one after
// a failure replays the steps that completed before it. Key such
// operations on the request ID, the default: a workflow's outcome reaches
// the caller whose start attached its callback, so an asynchronous start
// keyed on its input is refused to another operation (see
// [ErrorTypeStartedElsewhere]).
//
// # Results and the data converter
//
// Records are encoded with the data converter given with
// [WithDataConverter] (the one given to client.Options.DataConverter; the
// SDK's by default), under the operation's serialization context, so that
// payload codecs apply to what the store holds. What reaches the caller is
// encoded by the worker's own data converter, as for an operation that is
// not guarded. The interceptor, which does not know the operation's output
// type, replays a synchronous value as a converter.RawValue.
//
// # Leases
//
// A claim's lease is the time left until the request's deadline (the
// Nexus request timeout, ten seconds on Temporal's servers by default),
// extended while the handler runs; guard.WithLease overrides it.
//
// With the guard disabled (IDEMGUARD_DISABLED) every start runs the
// handler, and guard.Step runs its function unguarded.
package nexusguard
