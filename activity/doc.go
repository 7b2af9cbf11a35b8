// Package activity guards Temporal activities with idempotency records, so
// that an activity's side effect happens once however often Temporal runs
// the activity: a retry after a failure that came after the side effect, a
// result lost when a worker crashed or the activity timed out just after it
// finished, or two workflows asking for the same business operation.
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
