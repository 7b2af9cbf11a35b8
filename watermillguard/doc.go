// Package watermillguard is Watermill handler middleware that processes
// each message once, however often it is delivered: a publisher's retry,
// a broker's redelivery after a consumer died, a consumer group rebalance.
//
//	router.AddMiddleware(poisonQueue, watermillguard.MustMiddleware(g))
//
// It works on every broker Watermill supports (Kafka, NATS, AMQP, SQS/SNS,
// Redis Streams, SQL, ...) and every idempotency store of the guard
// (memory, DynamoDB, Redis, PostgreSQL).
//
// # Claim, run, complete
//
// For each delivery the middleware claims the message's key in the guard's
// store, runs the handler, and records the outcome: the messages the
// handler produced (their UUIDs, metadata and payloads). It never marks a
// message as seen before the handler has succeeded. A redelivery of a
// message that was handled finds the record in the claim and replays it:
// the handler does not run, and the router publishes the stored produced
// messages again, with the same UUIDs, and acknowledges the delivery. A
// handler that failed released the key (unless its error was definite),
// so the redelivery runs it again. A first delivery costs two store round
// trips (claim, complete), a redelivery of a handled message one.
//
// # A message in progress elsewhere
//
// A delivery whose message another delivery holds (a concurrent one in
// this process, another consumer, a consumer that died in the handler)
// waits for it in the handler, by default: it replays the holder's
// outcome when the holder completes, runs the handler when the holder
// failed, and takes the claim over (and runs the handler, whose completed
// guard.Step calls replay) once the holder's lease can have lapsed: its
// end plus the guard's clock skew (guard.WithClockSkew). Concurrent
// deliveries in one process share one run: the waiting one returns copies
// of the produced messages, without polling the store. Waiting for another
// process polls the store with backoff (20 ms, doubling to a second), and
// lasts at most a lease, the clock skew and half a second; if the holder
// is still alive then (a handler running longer, whose lease is
// extended), the middleware returns *adapt.InProgressError and the router
// nacks the delivery. Such a delivery is logged once per key and lease, at
// info level ([WithLogger]).
//
// A message's claim has a lease of 15 s unless the guard
// or [WithGuardOptions] give guard.WithLease; the guard extends it every
// third of a lease while the handler runs, so a consumer that dies holding
// a message stalls it for about 16 s. guard.WithWait(0), given to the guard
// or with [WithGuardOptions], returns *adapt.InProgressError at once
// instead of waiting (for a broker whose nack delays the redelivery
// without holding back other messages); guard.WithWait(budget) waits for
// a budget of its own.
//
// The wait holds the subscription's other messages back no longer than a
// nack would: where a subscription delivers one message at a time (Redis
// Streams, a Kafka partition), a nacked message is delivered again before
// the next one, after the resend delay if there is one; on Go Channel each
// message is delivered on its own, so a wait holds back only its message. The broker settings that decide when
// a dead consumer's messages are redelivered (Redis Streams' MaxIdleTime
// and ClaimInterval, Kafka's session timeout, SQS's visibility timeout,
// NATS' ack wait) are in docs/consumers.md.
//
// Watermill's own middleware.Deduplicator differs on both counts: it keeps
// the keys it has seen in the consumer's memory, so a redelivery to
// another consumer, or after a restart, is handled again; and it marks a
// message as seen before the handler runs, so a handler that fails after
// the mark loses the message: its redelivery is dropped as a duplicate.
//
// # Keys
//
// The key is the message UUID, within a scope that is the router handler's
// name (see [WithScope]): two handlers that consume the same topic keep
// records of their own. [WithKeyFromMetadata] takes the key from a metadata
// field instead, and [WithKeyFromPayload] from the payload read as JSON
// (with guard.WithKeyPath, a JMESPath expression over it).
// guard.WithPayloadValidation, given to [WithGuardOptions], stores a hash
// of the payload (or of what an expression selects from it) with the record,
// so that a redelivered key with another payload is reported
// ([guard.ErrPayloadMismatch]) instead of being dropped as a duplicate.
//
// # Acknowledgements
//
// The middleware returns what the router acts on: produced messages to
// publish and acknowledge, or an error, which the router answers with a
// negative acknowledgement (the broker redelivers the message) unless a
// middleware outside this one, such as the poison queue, handles it:
//
//	outcome                                    returns                 router
//	first delivery, the handler succeeded      produced messages       publishes them, acks
//	redelivery of a handled message (replayed) the stored messages     publishes them again, acks
//	duplicate in progress elsewhere            waits for it, then as   as they say
//	                                           replayed (or shared) or
//	                                           first delivery
//	  still in progress after a lease          *adapt.InProgressError  nacks: redelivered later
//	  (with guard.WithWait(0): at once)
//	the handler failed (error released)        the handler's error     nacks: redelivered, runs again
//	the handler failed with a definite error   *PermanentError         poison queue: acks
//	  (recorded; redeliveries replay it)
//	payload mismatch, no key, payload not JSON *PermanentError         poison queue: acks
//	store failure before the handler ran       *adapt.StoreError       nacks: redelivered
//
// A [PermanentError] is one that a redelivery meets again; [IsPermanent]
// is the filter for Watermill's poison queue
// (middleware.PoisonQueueWithFilter), which publishes such a message to
// its poison topic and acknowledges it. Without a poison queue, the router
// nacks a permanent error like any other, and the broker redelivers the
// message for ever, each time at the cost of one store round trip: install
// one, or a middleware of your own that acknowledges permanent errors.
//
// A handler that produced messages and then failed publishes nothing: the
// messages of the run that completes are the ones stored and published.
// The messages a run produces are published only after the record of the
// run is complete, so a consumer killed before it acknowledged a message
// (after the handler, or even after publishing) leaves a record whose
// replay publishes the same messages with the same UUIDs. A consumer
// downstream that is guarded the same way drops them as duplicates: along
// a chain of guarded consumers, each message is processed once although
// every hop delivers at least once.
//
// # Middleware order
//
// Watermill runs middleware in the order it was added, the first added
// outermost. This order works:
//
//	router.AddMiddleware(
//		poisonQueue, // middleware.PoisonQueueWithFilter(pub, topic, watermillguard.IsPermanent)
//		watermillguard.MustMiddleware(g),
//		middleware.Retry{
//			MaxRetries: 3, InitialInterval: 100 * time.Millisecond, Multiplier: 2,
//			ShouldRetry:         func(p middleware.RetryParams) bool { return !guard.IsDefinite(p.Err) },
//			ResetContextOnRetry: true,
//		}.Middleware,
//		middleware.Timeout(time.Minute),
//	)
//
// The poison queue goes outside the guard, to see its permanent errors.
// Retry inside the guard runs all its attempts under one claim (two store
// round trips however many attempts), whose lease the guard extends while
// Retry backs off; its ShouldRetry skips definite errors, which another
// attempt would only repeat, and ResetContextOnRetry gives each attempt a
// fresh Timeout. Retry outside the guard works too: each attempt is then a
// guarded call of its own (a failed attempt released the key, and the next
// claims it again), and a duplicate in progress elsewhere or a store
// failure is retried as well; there, skip permanent errors
// (!watermillguard.IsPermanent(p.Err)). The claim's lease (15 s
// unless guard.WithLease is given) is extended while the handler runs.
//
// These orders do not work:
//
//   - The poison queue inside the guard: the handler's errors never reach
//     the guard (the poison queue turns them into success), so every
//     failed message is recorded as handled, transient failures included;
//     and the guard's own permanent errors (payload mismatch, no key, a
//     payload that is not JSON) never reach the poison queue, so the
//     broker redelivers those messages for ever.
//   - Timeout between the poison queue and the guard. Watermill's Timeout
//     leaves the message holding the context it cancels when the handler
//     returns, and a publisher that publishes with the message's context
//     (Redis Streams, SQL) then fails to publish to the poison topic: the
//     router nacks the message, and the broker redelivers it for ever. Put
//     Timeout inside the guard, which hands the message back with the
//     context it came with, or outside the poison queue.
//   - Watermill's Deduplicator or InstantAck outside the guard: both let a
//     message be acknowledged (or dropped) before the handler succeeded,
//     which is what this middleware exists to prevent.
//
// # Handlers of several side effects
//
// The handler runs with the guarded call's context, msg.Context(): pass it
// to [guard.Step] to guard each side effect of a handler that does several,
// so that a redelivery after a failure runs only the steps that did not
// complete, and to [guard.KeyFromContext] to hand the message's key to a
// system that deduplicates on it (a payment provider's Idempotency-Key),
// which closes the one window no store can close: a consumer that dies
// after the side effect and before the record is complete.
//
// # Telemetry
//
// The guard's idemguard.execute span is a child of the span in the
// message's context (put there by a tracing middleware that runs before
// this one, or propagated by the publisher), and carries the message UUID
// ([MessageIDKey]); the handler's spans are its children. The guard's
// idemguard.calls metric counts deliveries by outcome: those with outcome
// "replayed" are the duplicates dropped.
package watermillguard
