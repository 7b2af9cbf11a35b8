package temporalglue

import (
	"context"
	"fmt"

	commonpb "go.temporal.io/api/common/v1"
	tactivity "go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/proto"

	"github.com/idemguard/idemguard/guard"
)

// PayloadCodec is a [guard.Codec] that stores values as the
// *commonpb.Payloads a Temporal data converter makes of them, in protobuf
// binary form, so that payload codecs (encryption, compression) apply to
// stored results. Unmarshal into a *commonpb.Payloads or **commonpb.Payloads
// returns the stored payloads without decoding them.
type PayloadCodec struct {
	// DataConverter encodes and decodes values; nil means the SDK's default.
	DataConverter converter.DataConverter
}

// Converter returns the data converter, the SDK's default if none is set.
func (c PayloadCodec) Converter() converter.DataConverter {
	if c.DataConverter == nil {
		return converter.GetDefaultDataConverter()
	}
	return c.DataConverter
}

// Marshal encodes v with the data converter. A nil v (an activity that
// returns only an error) is stored as no bytes; a *commonpb.Payloads is
// stored as it is.
func (c PayloadCodec) Marshal(v any) ([]byte, error) {
	if v == nil {
		return nil, nil
	}
	if p, ok := v.(*commonpb.Payloads); ok {
		return proto.Marshal(p)
	}
	p, err := c.Converter().ToPayloads(v)
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
	return c.Converter().FromPayloads(p, v)
}

var _ guard.Codec = PayloadCodec{}

// ActivityConverter returns dc (nil: the SDK's default) as the worker
// applies it to the activity running with ctx: transfer-aware, with the
// activity's serialization context, and bound to ctx if dc is
// context-aware.
func ActivityConverter(ctx context.Context, dc converter.DataConverter) converter.DataConverter {
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
	return withContext(ctx, dc)
}

// WorkflowConverter returns dc (nil: the SDK's default) as the worker
// applies it to the result of the workflow whose local activity runs with
// ctx: transfer-aware, with the workflow's serialization context, and bound
// to ctx if dc is context-aware.
func WorkflowConverter(ctx context.Context, dc converter.DataConverter) converter.DataConverter {
	dc = converter.MakeTransferAware(dc)
	if tactivity.IsActivity(ctx) {
		info := tactivity.GetInfo(ctx)
		dc = converter.WithDataConverterSerializationContext(dc, converter.WorkflowSerializationContext{
			Namespace:  info.Namespace,
			WorkflowID: info.WorkflowExecution.ID,
		})
	}
	return withContext(ctx, dc)
}

func withContext(ctx context.Context, dc converter.DataConverter) converter.DataConverter {
	if ca, ok := dc.(converter.ContextAware); ok {
		return ca.WithContext(ctx)
	}
	return dc
}
