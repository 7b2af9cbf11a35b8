package lambdaguard

import (
	"context"
	"strings"

	"github.com/aws/aws-lambda-go/events"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/internal/leasecap"
)

// WrapSQS returns a handler for SQS events that runs fn once per message,
// each message a guarded call of its own, keyed by its messageId (or by
// what guard.WithKeyPath selects from the message's JSON, such as
// "powertools_json(body).order_id"), and answers with the messages to
// redeliver: give it to lambda.Start, on an event source mapping with
// ReportBatchItemFailures.
//
// A message whose call completed earlier (a redelivery, a duplicate)
// replays without running fn and is not reported. A message for which fn
// fails, whose key another invocation holds (in progress), or which the
// guard refuses (a key path that fails on it, a payload mismatch, a store
// failure) is reported in BatchItemFailures, and so redelivered after its
// visibility timeout (or moved to the dead-letter queue after
// maxReceiveCount); fn's error releases its key, unless it is definite
// (guard.Definite), when it is stored and the message keeps failing
// without running fn again.
//
// Messages of a standard queue run concurrently (guard.DoBatch: one bulk
// read finds those that completed, [WithBatchOptions] sets the
// concurrency). On a FIFO queue (a message carrying a MessageGroupId, or
// a queue ARN ending in .fifo) messages run one at a time in order, and
// the first failure stops the batch: it and every message after it are
// reported, as AWS Powertools' SqsFifoPartialProcessor does by default
// and as Lambda requires to keep each group's order; [WithSkipGroupOnError]
// stops only the failed message's group.
//
// The claims of an invocation hold until its deadline, as for [Wrap].
func WrapSQS(g *guard.Guard, fn func(context.Context, events.SQSMessage) error, opts ...Option) (func(context.Context, events.SQSEvent) (events.SQSEventResponse, error), error) {
	b, err := newBatch(g, fn, opts, "messageId", sqsWrapper)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, e events.SQSEvent) (events.SQSEventResponse, error) {
		var resp events.SQSEventResponse
		var group func(events.SQSMessage) string
		if isFIFO(e.Records) {
			group = func(m events.SQSMessage) string { return m.Attributes["MessageGroupId"] }
		}
		for _, i := range b.run(ctx, e.Records, group) {
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: e.Records[i].MessageId})
		}
		return resp, nil
	}, nil
}

// WrapKinesis returns a handler for Kinesis stream events that runs fn
// once per record, each record a guarded call keyed by its sequence
// number (or by what guard.WithKeyPath selects from the record's JSON),
// in order: the first record that fails (fn's error, a key in progress,
// a refusal) stops the batch, and it and the records after it are
// reported in BatchItemFailures by sequence number. Lambda resumes the
// shard from the first of them, so the records after it run after it, in
// order, and those that completed before replay. Use it on an event
// source mapping with ReportBatchItemFailures.
func WrapKinesis(g *guard.Guard, fn func(context.Context, events.KinesisEventRecord) error, opts ...Option) (func(context.Context, events.KinesisEvent) (events.KinesisEventResponse, error), error) {
	b, err := newBatch(g, fn, opts, "kinesis.sequenceNumber", batchWrapper)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, e events.KinesisEvent) (events.KinesisEventResponse, error) {
		var resp events.KinesisEventResponse
		for _, i := range b.run(ctx, e.Records, inOrder[events.KinesisEventRecord]) {
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.KinesisBatchItemFailure{ItemIdentifier: e.Records[i].Kinesis.SequenceNumber})
		}
		return resp, nil
	}, nil
}

// WrapDynamoDBStream is [WrapKinesis] for DynamoDB Streams events: records
// are keyed by their eventID and reported by their sequence number.
func WrapDynamoDBStream(g *guard.Guard, fn func(context.Context, events.DynamoDBEventRecord) error, opts ...Option) (func(context.Context, events.DynamoDBEvent) (events.DynamoDBEventResponse, error), error) {
	b, err := newBatch(g, fn, opts, "eventID", batchWrapper)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, e events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
		var resp events.DynamoDBEventResponse
		for _, i := range b.run(ctx, e.Records, inOrder[events.DynamoDBEventRecord]) {
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.DynamoDBBatchItemFailure{ItemIdentifier: e.Records[i].Change.SequenceNumber})
		}
		return resp, nil
	}, nil
}

// inOrder puts every record of a stream's batch in one group: they run in
// order, and the first failure stops the batch.
func inOrder[R any](R) string { return "" }

// isFIFO reports whether records come from a FIFO queue.
func isFIFO(records []events.SQSMessage) bool {
	for _, m := range records {
		if _, ok := m.Attributes["MessageGroupId"]; ok || strings.HasSuffix(m.EventSourceARN, ".fifo") {
			return true
		}
	}
	return false
}

// batch runs the records of one event, each a guarded call of fn.
type batch[R any] struct {
	g         *guard.Guard
	scope     string
	fn        func(context.Context, R) error
	call      []guard.CallOption
	batchOpts []guard.BatchOption
	skipGroup bool
}

func newBatch[R any](g *guard.Guard, fn func(context.Context, R) error, opts []Option, keyPath string, kind wrapper) (*batch[R], error) {
	c, err := newConfig(g, opts, kind)
	if err != nil {
		return nil, err
	}
	if fn == nil {
		return nil, invalid("nil record handler")
	}
	call := make([]guard.CallOption, 0, len(c.guardOpts)+1)
	call = append(call, adapt.WithDefaults(guard.WithKeyPath(keyPath)))
	call = append(call, c.guardOpts...)
	if err := c.check(g, call); err != nil {
		return nil, err
	}
	bo := make([]guard.BatchOption, 0, len(call)+len(c.batchOpts))
	for _, o := range call {
		bo = append(bo, adapt.Lift(o))
	}
	bo = append(bo, c.batchOpts...)
	return &batch[R]{g: g, scope: c.scope, fn: fn, call: call, batchOpts: bo, skipGroup: c.skipGroup}, nil
}

// run runs records and returns the indexes of those to report, in order.
// Without group the records run concurrently, through guard.DoBatch, and
// each failure is reported alone. With group they run one at a time, in
// order: a failure stops the batch (or, with skipGroup, its group), and
// every record not run since is reported too.
func (b *batch[R]) run(ctx context.Context, records []R, group func(R) string) []int {
	ctx = leasecap.AtDeadline(ctx)
	var failed []int
	if group == nil {
		res := guard.DoBatch(ctx, b.g, b.scope, records, func(ctx context.Context, r R) (struct{}, error) {
			return struct{}{}, b.fn(ctx, r)
		}, b.batchOpts...)
		for i, r := range res {
			if r.Err != nil {
				failed = append(failed, i)
			}
		}
		return failed
	}
	stopped := map[string]bool{}
	for i, r := range records {
		gr := group(r)
		if !b.skipGroup {
			gr = ""
		}
		if stopped[gr] {
			failed = append(failed, i)
			continue
		}
		_, err := guard.Do(ctx, b.g, b.scope, r, func(ctx context.Context) (struct{}, error) {
			return struct{}{}, b.fn(ctx, r)
		}, b.call...)
		if err != nil {
			stopped[gr] = true
			failed = append(failed, i)
		}
	}
	return failed
}
