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
)

// activityConverter returns dc as the worker applies it to the activity
// running with ctx: transfer-aware, with the activity's serialization
// context, and bound to ctx if dc is context-aware.
func activityConverter(ctx context.Context, dc converter.DataConverter) converter.DataConverter {
	dc = converter.MakeTransferAware(dc)
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
		dc = ca.WithContext(ctx)
	}
	return dc
}

// PayloadCodec is a [guard.Codec] that stores values as the
// *commonpb.Payloads a Temporal data converter makes of them, in protobuf
// binary form, so that payload codecs (encryption, compression) apply to
// stored results. Unmarshal into a *commonpb.Payloads or **commonpb.Payloads
// returns the stored payloads without decoding them.
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

// Marshal encodes v with the data converter. A nil v (an activity that
// returns only an error) is stored as no bytes.
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
	p := &commonpb.Payloads{}
	if err := proto.Unmarshal(data, p); err != nil {
		return fmt.Errorf("idemguard: stored result is not Temporal payloads: %w", err)
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

// rawCodec is the interceptor's codec: it encodes a result once and keeps
// the payloads it made (so the worker sends those same payloads), and
// replays stored payloads as they are into an *any.
type rawCodec struct {
	PayloadCodec
	made *commonpb.Payloads // the payloads Marshal made; one call per codec
}

func (c *rawCodec) Marshal(v any) ([]byte, error) {
	if v == nil {
		return nil, nil
	}
	p, ok := v.(*commonpb.Payloads)
	if !ok {
		var err error
		if p, err = c.converter().ToPayloads(v); err != nil {
			return nil, err
		}
	}
	c.made = p
	return proto.Marshal(p)
}

func (c *rawCodec) Unmarshal(data []byte, v any) error {
	if pv, ok := v.(*any); ok {
		var p *commonpb.Payloads
		if err := c.PayloadCodec.Unmarshal(data, &p); err != nil {
			return err
		}
		*pv = p
		return nil
	}
	return c.PayloadCodec.Unmarshal(data, v)
}

// failureCodec is a [guard.ErrorCodec] that stores errors as Temporal
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
	_ guard.Codec      = (*rawCodec)(nil)
	_ guard.ErrorCodec = failureCodec{}
)
