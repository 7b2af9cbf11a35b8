package activity

import (
	"context"
	"errors"
	"fmt"

	commonpb "go.temporal.io/api/common/v1"
	failurepb "go.temporal.io/api/failure/v1"
	tactivity "go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/protobuf/proto"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
)

// PayloadCodec is a [guard.Codec] that stores values as the
// *commonpb.Payloads a Temporal data converter makes of them, in protobuf
// binary form, so that payload codecs (encryption, compression) apply to
// stored results. Marshal stores a nil value (an activity that returns only
// an error) as no bytes and a *commonpb.Payloads as it is; Unmarshal into a
// *commonpb.Payloads or **commonpb.Payloads returns the stored payloads
// without decoding them.
//
// Guarded activities and workflows store their results with it already.
// Give it to guard.WithCodec to store other values as Temporal payloads
// (a guard.Step's, or a guard.Do call's inside an activity), or use it to
// decode a stored record's result.
type PayloadCodec struct {
	// DataConverter encodes and decodes values; nil means the SDK's default.
	DataConverter converter.DataConverter
}

func (c PayloadCodec) converter() converter.DataConverter {
	if c.DataConverter == nil {
		return converter.GetDefaultDataConverter()
	}
	return c.DataConverter
}

// Marshal encodes v with the data converter.
func (c PayloadCodec) Marshal(v any) ([]byte, error) {
	if v == nil {
		return nil, nil
	}
	if p, ok := v.(*commonpb.Payloads); ok {
		return proto.Marshal(p)
	}
	p, err := c.converter().ToPayloads(v)
	if err != nil {
		return nil, err
	}
	return proto.Marshal(p)
}

// Unmarshal decodes data into v, a pointer.
func (c PayloadCodec) Unmarshal(data []byte, v any) error {
	p, err := unmarshalPayloads(data)
	if err != nil {
		return err
	}
	switch v := v.(type) {
	case **commonpb.Payloads:
		*v = p
		return nil
	case *commonpb.Payloads:
		proto.Merge(v, p)
		return nil
	}
	return c.converter().FromPayloads(p, v)
}

func unmarshalPayloads(data []byte) (*commonpb.Payloads, error) {
	p := &commonpb.Payloads{}
	if err := proto.Unmarshal(data, p); err != nil {
		return nil, fmt.Errorf("idemguard: stored result is not Temporal payloads: %w", err)
	}
	return p, nil
}

// interceptorCodec is the codec of calls guarded by [Interceptor]. The
// interceptor does not know the activity's result type, so it replays into
// an any: a stored payload comes back as a converter.RawValue, decoded by
// the codec's data converter (so that its payload codec is undone), which
// the worker then encodes again with its own data converter, as it encodes
// the activity's own result. The client's payload codec thus applies to
// what reaches the history whether the activity ran or replayed, with or
// without [WithDataConverter]. Other values (those of guard.Step inside
// the activity) are encoded and decoded as the PayloadCodec does.
type interceptorCodec struct{ PayloadCodec }

func (c interceptorCodec) Unmarshal(data []byte, v any) error {
	out, ok := v.(*any)
	if !ok {
		return c.PayloadCodec.Unmarshal(data, v)
	}
	p, err := unmarshalPayloads(data)
	if err != nil {
		return err
	}
	if len(p.Payloads) != 1 {
		// Not an activity result the worker encoded (one payload): the
		// payloads an activity returned as they are, sent as they are.
		*out = p
		return nil
	}
	var raw converter.RawValue
	if err := c.converter().FromPayload(p.Payloads[0], &raw); err != nil {
		return err
	}
	*out = raw
	return nil
}

// activityConverter returns dc (nil: the SDK's default) as the worker
// applies it to the activity running with ctx: with the activity's
// serialization context, and bound to ctx if dc is context-aware.
func activityConverter(ctx context.Context, dc converter.DataConverter) converter.DataConverter {
	dc = transferAware(dc)
	if tactivity.IsActivity(ctx) {
		info := tactivity.GetInfo(ctx)
		wt := ""
		if info.WorkflowType != nil {
			wt = info.WorkflowType.Name
		}
		dc = converter.WithDataConverterSerializationContext(dc, converter.ActivitySerializationContext{
			Namespace:    info.Namespace,
			WorkflowID:   info.WorkflowExecution.ID,
			WorkflowType: wt,
			ActivityType: info.ActivityType.Name,
			TaskQueue:    info.TaskQueue,
			IsLocal:      info.IsLocalActivity,
		})
	}
	if ca, ok := dc.(converter.ContextAware); ok {
		return ca.WithContext(ctx)
	}
	return dc
}

// failureCodec is a [adapt.ErrorCodec] that stores errors as Temporal
// failures (protobuf binary), so that a replayed application error keeps its
// type, message, details and retryability. Details are encoded with the
// activity's data converter, so payload codecs apply to them.
type failureCodec struct {
	fc converter.FailureConverter
}

func newFailureCodec(dc converter.DataConverter) failureCodec {
	return failureCodec{temporal.NewDefaultFailureConverter(temporal.DefaultFailureConverterOptions{DataConverter: dc})}
}

func (c failureCodec) EncodeError(err error) ([]byte, error) {
	if guard.IsDefinite(err) {
		err = definiteError(err)
	}
	return proto.Marshal(c.fc.ErrorToFailure(err))
}

func (c failureCodec) DecodeError(data []byte) error {
	f := &failurepb.Failure{}
	if err := proto.Unmarshal(data, f); err != nil {
		return fmt.Errorf("%w: stored error is not a Temporal failure: %w", guard.ErrResultUnavailable, err)
	}
	return c.fc.FailureToError(f)
}

// isStoredFailure is the definite-error predicate of [WithStoredFailures]:
// errors marked with guard.Definite, and non-retryable application errors.
func isStoredFailure(err error) bool {
	if guard.IsDefinite(err) {
		return true
	}
	var ae *temporal.ApplicationError
	return errors.As(err, &ae) && error(ae) == err && ae.NonRetryable()
}

var (
	_ guard.Codec      = PayloadCodec{}
	_ guard.Codec      = interceptorCodec{}
	_ adapt.ErrorCodec = failureCodec{}
)

// transferAware returns dc, or the SDK's default data converter when dc is
// nil. The default converter applies transfer type conversion
// (converter.ValueWithTransferTypeConverter, experimental in the SDK) as
// the worker does; since go.temporal.io/sdk v1.51 the SDK no longer exports
// the wrapper that makes another converter transfer-aware, so a custom
// converter is used as it is: a result with a transfer type converter is
// stored as that converter encodes the value itself.
func transferAware(dc converter.DataConverter) converter.DataConverter {
	if dc == nil {
		return converter.GetDefaultDataConverter()
	}
	return dc
}
