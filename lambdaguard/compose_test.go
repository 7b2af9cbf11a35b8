package lambdaguard_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	oteltrace "go.opentelemetry.io/otel/trace"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/guard/guardtest"
	"github.com/idemguard/idemguard/internal/telemetry"
	"github.com/idemguard/idemguard/internal/testing/teststores"
	"github.com/idemguard/idemguard/lambdaguard"
)

// A handler, a batch's record handler and an API Gateway handler join the
// composition suite on every store, in process: a guard.Step inside them
// keeps its promises through a replay, an error after it, a reused key, a
// live holder, a takeover and a disabled guard. Each answer is mapped to
// the guard error it stands for from what can be seen of it outside the
// wrapper: an invocation's errorType, as the runtime reports it
// (invokeError); the API's status (409, 422) and, for a response served
// without Idempotency-Key-Status, a lost lease, as for httpguard. An SQS
// partial batch response cannot tell them apart: it names the records to
// redeliver, the same for a refusal, a lost lease and the handler's own
// error, and no answer of a record handler travels in it. So a reported
// record's reason is read where the function's operator reads it, the
// guard's telemetry of the record (sqsOutcome), and a replayed record's
// answer is the one of the call that recorded the key (sqsResults).
func TestComposition(t *testing.T) {
	t.Run("handler", func(t *testing.T) {
		guardtest.RunComposition(t, guardtest.EntryPoint{
			Name: "lambdaguard.Wrap",
			Run: func(ctx context.Context, t *testing.T, g *guard.Guard, call guardtest.Call, effect guardtest.Effect, body guardtest.Body) (string, error) {
				h, err := lambdaguard.Wrap(g, func(ctx context.Context, e struct{}) (string, error) { return body(ctx, effect) },
					lambdaguard.WithScope("fn"), lambdaguard.WithGuardOptions(guard.WithKeyPath("key"), guard.WithPayloadValidation("payload")))
				if err != nil {
					return "", err
				}
				event, _ := json.Marshal(map[string]string{"key": call.Key, "payload": call.Payload})
				out, err := h.Invoke(ctx, event)
				if err != nil {
					return "", invokeError(err)
				}
				var v string
				err = json.Unmarshal(out, &v)
				return v, err
			},
		}, teststores.All())
	})
	t.Run("sqs", func(t *testing.T) {
		rec := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
		t.Cleanup(func() { tp.Shutdown(context.Background()) })
		results := &sqsResults{}
		guardtest.RunComposition(t, guardtest.EntryPoint{
			Name:         "lambdaguard.WrapSQS",
			GuardOptions: []guard.Option{guard.WithTracerProvider(tp)},
			Run: func(ctx context.Context, t *testing.T, g *guard.Guard, call guardtest.Call, effect guardtest.Effect, body guardtest.Body) (string, error) {
				var v string
				var ran bool
				var ferr error
				h, err := lambdaguard.WrapSQS(g, func(ctx context.Context, m events.SQSMessage) error {
					ran = true
					v, ferr = body(ctx, effect)
					return ferr
				}, lambdaguard.WithScope("fn"), lambdaguard.WithGuardOptions(guard.WithPayloadValidation("body")))
				if err != nil {
					return "", err
				}
				ctx, span := tp.Tracer("lambda").Start(ctx, "invocation")
				resp, err := h(ctx, events.SQSEvent{Records: []events.SQSMessage{{MessageId: call.Key, Body: call.Payload}}})
				span.End()
				if err != nil {
					return "", err
				}
				reported := len(resp.BatchItemFailures) > 0
				if g.Disabled() {
					// A pass-through: no record, no telemetry of one.
					if reported {
						return "", fmt.Errorf("reported for redelivery: %w", ferr)
					}
					return v, nil
				}
				outcome, errType := sqsOutcome(t, rec, span.SpanContext().TraceID())
				switch {
				case reported:
					return "", sqsReported(outcome, errType, ferr)
				case outcome == telemetry.OutcomeExecuted && ran:
					results.publish(call.Key, v)
					return v, nil
				case outcome == telemetry.OutcomeReplayed && !ran:
					return results.await(ctx, call.Key)
				}
				return "", fmt.Errorf("not reported, but the record's outcome is %q (the handler ran: %t)", outcome, ran)
			},
		}, teststores.All())
	})
	t.Run("api", func(t *testing.T) {
		guardtest.RunComposition(t, guardtest.EntryPoint{
			Name: "lambdaguard.WrapAPIGateway",
			Run: func(ctx context.Context, t *testing.T, g *guard.Guard, call guardtest.Call, effect guardtest.Effect, body guardtest.Body) (string, error) {
				h, err := lambdaguard.WrapAPIGateway(g, func(ctx context.Context, r events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error) {
					v, err := body(ctx, effect)
					switch {
					case errors.Is(err, guard.ErrPayloadMismatch):
						// A step refused the key reused: the handler
						// answers as the middleware does.
						return events.APIGatewayProxyResponse{StatusCode: 422, Body: err.Error()}, nil
					case err != nil:
						return events.APIGatewayProxyResponse{StatusCode: 503, Body: err.Error()}, nil
					}
					return events.APIGatewayProxyResponse{StatusCode: 201, Body: v}, nil
				}, lambdaguard.WithScope("api"))
				if err != nil {
					return "", err
				}
				resp, err := h(ctx, restRequest(call.Key, call.Payload))
				if err != nil {
					return "", err
				}
				answer := fmt.Sprintf("%d %s", resp.StatusCode, resp.Body)
				switch status := resp.MultiValueHeaders["Idempotency-Key-Status"]; {
				case resp.StatusCode == 409:
					return "", fmt.Errorf("%s: %w", answer, guard.ErrInProgress)
				case resp.StatusCode == 422:
					return "", fmt.Errorf("%s: %w", answer, guard.ErrPayloadMismatch)
				case resp.StatusCode != 201:
					return "", errors.New(answer)
				case len(status) == 0 && !g.Disabled():
					// Served, but not recorded: its claim was taken over.
					return "", fmt.Errorf("%s, not recorded: %w", answer, guard.ErrLeaseLost)
				}
				return resp.Body, nil
			},
		}, teststores.All())
	})
}

// invokeError returns the error of an invocation as its caller gets it,
// the errorType and errorMessage the runtime reports (runtimeError),
// wrapping the guard error its errorType stands for.
func invokeError(err error) error {
	ie := runtimeError(err)
	reported := fmt.Errorf("%s: %s", ie.Type, ie.Message)
	for typ, sentinel := range map[string]error{
		"IdempotencyAlreadyInProgressError": guard.ErrInProgress,
		"IdempotencyValidationError":        guard.ErrPayloadMismatch,
		"IdempotencyLeaseLostError":         guard.ErrLeaseLost,
	} {
		if ie.Type == typ {
			return fmt.Errorf("%w: %w", reported, sentinel)
		}
	}
	return reported
}

// sqsOutcome returns what the guard's telemetry says of the one record of
// the invocation traced as trace: the record's outcome, which the batch
// span counts, and, for an error, its error.type, on the record's
// idemguard.execute span.
func sqsOutcome(t *testing.T, rec *tracetest.SpanRecorder, trace oteltrace.TraceID) (outcome, errType string) {
	t.Helper()
	for _, s := range rec.Ended() {
		if s.SpanContext().TraceID() != trace {
			continue
		}
		attrs := attribute.NewSet(s.Attributes()...)
		switch s.Name() {
		case telemetry.SpanBatch:
			for _, o := range telemetry.BatchOutcomes() {
				if n, _ := attrs.Value(telemetry.BatchOutcomeKey(o)); n.AsInt64() > 0 {
					outcome = o
				}
			}
		case telemetry.SpanExecute:
			if _, step := attrs.Value(telemetry.StepKey); !step {
				v, _ := attrs.Value(telemetry.ErrorTypeKey)
				errType = v.AsString()
			}
		}
	}
	if outcome == "" {
		t.Fatalf("no %s span counts the record's outcome", telemetry.SpanBatch)
	}
	return outcome, errType
}

// sqsReported returns the error of a record reported for redelivery: a
// partial batch response says only that, the same for every reason, so
// the reason is the one an operator reads in the record's telemetry, and
// the error wraps the guard error it stands for. handlerErr is the record
// handler's own, if it ran and failed.
func sqsReported(outcome, errType string, handlerErr error) error {
	err := fmt.Errorf("reported for redelivery (outcome %s, error.type %q): %w", outcome, errType, errors.Join(handlerErr, errors.New("record failed")))
	switch {
	case outcome == telemetry.OutcomeInProgress:
		return fmt.Errorf("%w: %w", err, guard.ErrInProgress)
	case outcome == telemetry.OutcomePayloadMismatch:
		return fmt.Errorf("%w: %w", err, guard.ErrPayloadMismatch)
	case outcome == telemetry.OutcomeError && errType == telemetry.ErrorTypeLeaseLost:
		return fmt.Errorf("%w: %w", err, guard.ErrLeaseLost)
	}
	return err
}

// sqsResults are the results of the records whose calls recorded their
// outcome, by key. A record handler's result does not travel with a
// partial batch response (it is what the handler did), so a replay, which
// does not run the handler, stands for the result of the call that
// recorded the key's outcome.
type sqsResults struct {
	mu        sync.Mutex
	byKey     map[string]string // protected by mu
	published chan struct{}     // closed at the next publication; protected by mu
}

// publish records v as the result of the call that recorded key.
func (r *sqsResults) publish(key, v string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byKey == nil {
		r.byKey = map[string]string{}
	}
	r.byKey[key] = v
	if r.published != nil {
		close(r.published)
		r.published = nil
	}
}

// await returns the result published for key, waiting for it while the
// call that recorded it has yet to return (a replay may read the record
// before its writer's invocation has answered).
func (r *sqsResults) await(ctx context.Context, key string) (string, error) {
	for {
		r.mu.Lock()
		v, ok := r.byKey[key]
		if r.published == nil {
			r.published = make(chan struct{})
		}
		published := r.published
		r.mu.Unlock()
		if ok {
			return v, nil
		}
		select {
		case <-published:
		case <-ctx.Done():
			return "", fmt.Errorf("replayed, but no call that recorded %s returned a result: %w", key, context.Cause(ctx))
		}
	}
}
