// Package activity guards Temporal activities with idempotency records, so
// that an activity's side effect happens once however often Temporal runs
// the activity: a retry after its result was lost (a worker crash or a
// timeout just after it finished), a second workflow asking for the same
// business operation, or a retry of an activity that failed after some of
// its side effects, when those are guarded steps.
//
// What is replayed and what runs again: an attempt that finds a recorded
// result (or a stored definite error, see [WithStoredFailures]) replays it
// without running the activity. An activity that returns an error records
// nothing and releases its key, so Temporal's retry runs the whole activity
// again, side effects before the error included. Three ways keep those
// exactly-once anyway: run each side effect as a guard.Step, whose result
// is recorded on its own, so that the retry replays the steps that
// completed and runs only the rest; pass guard.KeyFromContext downstream
// (a payment provider's Idempotency-Key), so that the other system
// deduplicates the second request; or return a definite error
// ([WithStoredFailures]), which is recorded and replayed instead of
// retried.
//
// There are two ways in. [Guard] (and [GuardNoInput], [GuardNoResult],
// [GuardNoInputNoResult] for the other shapes Temporal users write) wraps an
// activity function and returns one with the same signature; [Register]
// registers it under the original function's activity type name:
//
//	g, _ := guard.New(dynamoStore)
//	activity.Register(w, ChargeCard, activity.Guard(g, ChargeCard, activity.WithKeyPath("order_id")))
//
// [NewInterceptor] guards activities by type name from a worker interceptor,
// leaving their code and registration untouched:
//
//	w := worker.New(c, "orders", worker.Options{Interceptors: []interceptor.WorkerInterceptor{
//		activity.NewInterceptor(g, activity.Policy{Activity: "ChargeCard", Options: []activity.Option{activity.WithKeyPath("order_id")}}),
//	}})
//
// An activity that processes a slice (send 1,000 emails, pay 300
// invoices) guards each item instead, with [DoBatch]: items completed
// earlier replay from one bulk read, the rest run with bounded concurrency,
// and progress kept in the heartbeat details lets a retried attempt skip
// straight to the items not yet done:
//
//	func SendInvoices(ctx context.Context, invoices []Invoice) ([]Receipt, error) {
//		return activity.DoBatch(ctx, g, invoices, sendInvoice, activity.WithKeyPath("invoice_id"))
//	}
//
// # Steps
//
// An activity of several side effects makes each one a step, so that a
// failure in a later one does not repeat the earlier ones on Temporal's
// retry:
//
//	func SendInvoice(ctx context.Context, inv Invoice) (Receipt, error) {
//		pdf, err := guard.Step(ctx, "render", func(ctx context.Context) (string, error) { return render(ctx, inv) })
//		if err != nil {
//			return Receipt{}, err
//		}
//		return guard.Step(ctx, "email", func(ctx context.Context) (Receipt, error) { return mail(ctx, inv, pdf) })
//	}
//
// A step is keyed by the activity's key and its name, and its result is
// stored with the activity's data converter. guard.Step in an activity that
// is not guarded returns guard.ErrNotInCall without running; the
// interceptors of this package and of the workflow package turn it into a
// non-retryable error of type [ErrorTypeNotInCall].
//
// # Options
//
// Guard options for one activity (payload validation, a required key, TTL,
// lease, wait mode, …) are given with [WithGuardOptions], and DoBatch's
// with [WithBatchOptions]:
//
//	activity.Guard(g, ChargeCard,
//		activity.WithKeyPath("order_id"),
//		activity.WithGuardOptions(guard.WithPayloadValidation("amount"), guard.WithRequireKey(true)))
//
// [Guard], its siblings and [NewInterceptor] check every option when they
// are called, and panic on an invalid one (an expression that does not
// compile, a batch option outside DoBatch), so the mistake shows when the
// worker starts, never in a workflow.
//
// # Keys
//
// The key's scope is the activity type name, so two activity types never
// share keys. What identifies a call, in order of precedence:
//
//  1. a key the workflow stamped into the activity's header (see the
//     idemguard workflow package: workflow.WithKey, workflow.StepKey), which
//     the worker receives through workflow.NewInterceptor or [NewInterceptor];
//  2. with [WithExecutionScope], the workflow ID and activity ID: the same on
//     every retry of one activity execution, different for every other
//     execution;
//  3. the input: all of it by default, or the part a JMESPath expression
//     selects ([WithKeyPath]). An activity without input is keyed by
//     execution scope.
//
// # Leases
//
// A claim's lease is the activity's heartbeat timeout when it has one
// (Temporal declares the attempt lost after it, and its retry should be able
// to take over), otherwise the time left until the activity's deadline. The
// guard extends it while the activity runs; heartbeats work as before.
// Per-activity [guard.WithLease] (through [WithGuardOptions]) overrides both.
//
// # Results
//
// Results are stored as the *commonpb.Payloads the worker would send,
// encoded by the data converter given with [WithDataConverter] (pass the one
// given to client.Options.DataConverter; the default is the SDK's) under the
// activity's serialization context. Payload codecs such as encryption or
// compression therefore apply to stored results too. The interceptor
// replays stored payloads as they are, without decoding them.
//
// # Errors
//
// Temporal looks only at the top-level error an activity returns, so guard
// errors are returned as unwrapped Temporal application errors whose types
// are the ErrorType constants; see [TemporalError] for the table. The
// activity's own errors are returned untouched; by default they release the
// record so that Temporal's retry runs the activity again. With
// [WithStoredFailures], non-retryable application errors are stored and
// replayed instead.
package activity
