package temporalglue

import (
	"context"
	"fmt"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
)

// KeyHeader is the Temporal header field in which the workflow side sends
// an explicit idempotency key to the activity: a string payload written
// with the SDK's default converter.
const KeyHeader = "idemguard-key"

type explicitKeyCtx struct{}

// ContextWithExplicitKey returns a copy of ctx that carries key as the
// explicit idempotency key of guarded activities running with it. An empty
// key leaves ctx as it is.
func ContextWithExplicitKey(ctx context.Context, key string) context.Context {
	if key == "" {
		return ctx
	}
	return context.WithValue(ctx, explicitKeyCtx{}, key)
}

// ExplicitKey returns the key set with [ContextWithExplicitKey].
func ExplicitKey(ctx context.Context) (string, bool) {
	k, ok := ctx.Value(explicitKeyCtx{}).(string)
	return k, ok && k != ""
}

// EncodeKeyHeader returns the header payload that carries key.
func EncodeKeyHeader(key string) (*commonpb.Payload, error) {
	return converter.GetDefaultDataConverter().ToPayload(key)
}

// DecodeKeyHeader returns the key carried in header, if it has one.
func DecodeKeyHeader(header map[string]*commonpb.Payload) (string, bool, error) {
	p, ok := header[KeyHeader]
	if !ok || p == nil {
		return "", false, nil
	}
	var key string
	if err := converter.GetDefaultDataConverter().FromPayload(p, &key); err != nil {
		return "", false, err
	}
	return key, key != "", nil
}

// KeyHeaderToContext moves a key stamped into the activity's header into
// ctx (see [ContextWithExplicitKey]), inside an activity inbound
// interceptor's ExecuteActivity, where the header is readable. A malformed
// key header is a non-retryable error of type [ErrorTypeInvalidInput].
func KeyHeaderToContext(ctx context.Context) (context.Context, error) {
	key, ok, err := DecodeKeyHeader(interceptor.Header(ctx))
	if err != nil {
		return ctx, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("idemguard: malformed %s header: %v", KeyHeader, err), ErrorTypeInvalidInput, err)
	}
	if ok {
		ctx = ContextWithExplicitKey(ctx, key)
	}
	return ctx, nil
}
