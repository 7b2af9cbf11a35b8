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
// There are two ways in. [Wrap] (and [WrapNoInput], [WrapNoResult],
// [WrapNoInputNoResult] for the other shapes Temporal users write) wraps an
// activity function and returns one with the same signature; [Register]
// registers it under the original function's activity type name:
//
//	g, _ := guard.New(dynamoStore, guard.WithKeyPath("order_id"))
//	activity.Register(w, ChargeCard, activity.Must(activity.Wrap(g, ChargeCard)))
//
// [Interceptor], idemguard's one worker interceptor, guards activities by
// type name, leaving their code and registration untouched; it also carries
// keys set by workflows (workflow.ContextWithKey) to their activities:
//
//	w := worker.New(c, "orders", worker.Options{Interceptors: []interceptor.WorkerInterceptor{
//		activity.Must(activity.Interceptor(g, activity.Policy{Activity: "ChargeCard"})),
//	}})
//
// An activity that processes a slice (send 1,000 emails, pay 300
// invoices) guards each item instead, with [DoBatch]: items completed
// earlier replay from one bulk read, the rest run with bounded concurrency,
// and progress kept in the heartbeat details lets a retried attempt skip
// straight to the items not yet done:
//
//	func SendInvoices(ctx context.Context, invoices []Invoice) ([]Receipt, error) {
//		return activity.DoBatch(ctx, g, invoices, sendInvoice,
//			activity.WithGuardOptions(guard.WithKeyPath("invoice_id")))
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
// stored with the guard's codec (guard.New's guard.WithCodec, JSON by
// default) or the step's own guard.WithCodec: to keep step values under the
// data converter's payload codec, give guard.WithCodec(activity.PayloadCodec{...})
// to guard.New or to the step. guard.Step in an activity that is not
// guarded returns adapt.ErrNotInCall without running; [Interceptor]
// turns it into a non-retryable error of type [ErrorTypeNotInCall].
//
// # Options
//
// Guard options (the key path, payload validation, a required key, TTL,
// lease, wait mode, …) are the guard package's own: given to guard.New they
// are the defaults of every activity, and [WithGuardOptions] gives them to
// one activity; DoBatch's batch options are given with [WithBatchOptions].
// The activity package's own default, a lease of the heartbeat timeout,
// gives way to both:
//
//	activity.Must(activity.Wrap(g, ChargeCard, activity.WithGuardOptions(
//		guard.WithKeyPath("order_id"),
//		guard.WithPayloadValidation("amount"),
//		guard.WithRequireKey(true))))
//
// [Wrap], its siblings and [Interceptor] check every option when they
// are called, and return an invalid one (an expression that does not
// compile, a batch option outside DoBatch) as an error; wrapped in [Must]
// they panic instead. Either way the mistake
// shows when the worker starts, never in a workflow.
//
// # Keys
//
// The key's scope is the activity type name, so two activity types never
// share keys. What identifies a call, in order of precedence:
//
//  1. a key the workflow stamped into the activity's header (see the
//     idemguard workflow package: workflow.ContextWithKey,
//     workflow.StepKey), which the worker receives through [Interceptor];
//  2. with [WithExecutionScope], the workflow ID and activity ID: the same on
//     every retry of one activity execution, different for every other
//     execution;
//  3. the input: all of it by default, or the part a JMESPath expression
//     selects (guard.WithKeyPath). An activity without input is keyed by
//     execution scope.
//
// A guarded function called directly from inside another guarded activity
// (not scheduled by the workflow) is a call of its own: its scope is the
// function's name ([Name]) and its key comes from its own input, never from
// the enclosing activity's key.
//
// # Leases
//
// A claim's lease is the activity's heartbeat timeout when it has one,
// otherwise the time left until the activity's deadline; guard.WithLease,
// given to guard.New or with [WithGuardOptions], overrides both. The guard
// extends the lease for as long as the attempt's function runs, so a worker
// that dies blocks the key for one lease, while an attempt that Temporal
// gave up on (its heartbeat timed out) but whose function still runs keeps
// the key: its retries get [ErrorTypeInProgress] until it returns, at the
// latest at its start-to-close deadline if it honours its context.
// Heartbeats work as before.
//
// # Results
//
// Results are stored as Temporal payloads, encoded by the data converter
// given with [WithDataConverter] (pass the one given to
// client.Options.DataConverter; the default is the SDK's) under the
// activity's serialization context, so that payload codecs such as
// encryption or compression apply to stored results too. What reaches the
// workflow history is encoded by the worker's own data converter, as for an
// activity that is not guarded: [Wrap] returns the decoded result, and the
// interceptor a converter.RawValue, which the worker encodes again.
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
//
// # Telemetry
//
// A guarded activity's idemguard.execute span (package telemetry) carries
// the activity's temporal.activity.type, temporal.activity.id and
// temporal.activity.attempt, and, when a workflow scheduled it,
// temporal.workflow.id, temporal.workflow.run_id and
// temporal.workflow.type.
package activity
