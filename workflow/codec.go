package workflow

import (
	"context"
	"errors"
	"fmt"

	failurepb "go.temporal.io/api/failure/v1"
	tactivity "go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/protobuf/proto"

	"github.com/idemguard/idemguard/activity"
	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
)

// workflowConverter returns dc (nil: the SDK's default) as the worker
// applies it to the result of the workflow whose local activity runs with
// ctx: with the workflow's serialization context, and bound to ctx if dc is
// context-aware. Like the activity package's, a nil dc is the SDK's default
// converter, transfer-aware; a custom one is used as it is (the SDK no
// longer exports the wrapper that makes it transfer-aware).
func workflowConverter(ctx context.Context, dc converter.DataConverter) converter.DataConverter {
	if dc == nil {
		dc = converter.GetDefaultDataConverter()
	}
	if tactivity.IsActivity(ctx) {
		info := tactivity.GetInfo(ctx)
		dc = converter.WithDataConverterSerializationContext(dc, converter.WorkflowSerializationContext{
			Namespace:  info.Namespace,
			WorkflowID: info.WorkflowExecution.ID,
		})
	}
	if ca, ok := dc.(converter.ContextAware); ok {
		return ca.WithContext(ctx)
	}
	return dc
}

// failureCodec stores a guarded workflow's definite error as a Temporal
// failure, so that a duplicate replays it as the first workflow returned
// it: an application error with its type, message, details and
// retryability; an error that is none is stored as a non-retryable
// application error of type activity.ErrorTypeDefinite with its message.
type failureCodec struct {
	fc converter.FailureConverter
}

func newFailureCodec(dc converter.DataConverter) failureCodec {
	return failureCodec{temporal.NewDefaultFailureConverter(temporal.DefaultFailureConverterOptions{DataConverter: dc})}
}

func (c failureCodec) EncodeError(err error) ([]byte, error) {
	var ae *temporal.ApplicationError
	if !errors.As(activity.TemporalError(err), &ae) {
		ae = temporal.NewNonRetryableApplicationError(err.Error(), activity.ErrorTypeDefinite, nil).(*temporal.ApplicationError)
	}
	return proto.Marshal(c.fc.ErrorToFailure(ae))
}

func (c failureCodec) DecodeError(data []byte) error {
	f := &failurepb.Failure{}
	if err := proto.Unmarshal(data, f); err != nil {
		return fmt.Errorf("%w: stored error is not a Temporal failure: %w", guard.ErrResultUnavailable, err)
	}
	return c.fc.FailureToError(f)
}

var _ adapt.ErrorCodec = failureCodec{}
