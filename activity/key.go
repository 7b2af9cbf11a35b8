package activity

import (
	"context"
	"fmt"
	"sync/atomic"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"

	"github.com/idemguard/idemguard/guard"
)

// keyHeader is the Temporal header field in which the workflow side
// (workflow.ContextWithKey, through [Interceptor]) sends an explicit
// idempotency key to the activity: a string payload written with the SDK's
// default converter. Workflows written with another SDK may stamp it
// themselves.
const keyHeader = "idemguard-key"

type explicitKeyCtx struct{}

// explicitKey returns the key the workflow stamped into the activity's
// header, which the interceptor moved into ctx.
func explicitKey(ctx context.Context) (string, bool) {
	k, ok := ctx.Value(explicitKeyCtx{}).(string)
	return k, ok && k != ""
}

// encodeKeyHeader returns the header payload that carries key.
func encodeKeyHeader(key string) (*commonpb.Payload, error) {
	return converter.GetDefaultDataConverter().ToPayload(key)
}

// keyHeaderToContext moves a key stamped into the activity's header into
// ctx, inside an activity inbound interceptor's ExecuteActivity, where the
// header is readable. A malformed key header is a non-retryable error of
// type [ErrorTypeInvalidInput].
func keyHeaderToContext(ctx context.Context) (context.Context, error) {
	p, ok := interceptor.Header(ctx)[keyHeader]
	if !ok || p == nil {
		return ctx, nil
	}
	var key string
	if err := converter.GetDefaultDataConverter().FromPayload(p, &key); err != nil {
		return ctx, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("idemguard: malformed %s header: %v", keyHeader, err), ErrorTypeInvalidInput, err)
	}
	if key == "" {
		return ctx, nil
	}
	return context.WithValue(ctx, explicitKeyCtx{}, key), nil
}

// callMarker marks the context of a function running inside a call that
// this package guards, so that a guarded function called from inside it is
// told apart from the activity itself.
type callMarker struct {
	key         string      // the running call's idempotency key ("" if unguarded)
	intercepted bool        // the call is the interceptor's
	taken       atomic.Bool // a wrapped function took the intercepted call as its own
}

type callCtx struct{}

// withCall returns ctx, the context of a guarded call's function, marked as
// running inside that call.
func withCall(ctx context.Context, intercepted bool) context.Context {
	key, _ := guard.KeyFromContext(ctx)
	return context.WithValue(ctx, callCtx{}, &callMarker{key: key, intercepted: intercepted})
}

func callFromContext(ctx context.Context) *callMarker {
	m, _ := ctx.Value(callCtx{}).(*callMarker)
	return m
}

// takeOver reports whether this is the first wrapped function to look at
// the intercepted call: the activity's own function, if it is wrapped.
func (m *callMarker) takeOver() bool {
	return m.taken.CompareAndSwap(false, true)
}
