package activity

import (
	"context"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
)

// KeyHeader is the Temporal header field in which the workflow side
// (workflow.WithKey, workflow.StepKey) sends an explicit idempotency key to
// the activity: a string payload written with the SDK's default converter.
const KeyHeader = "idemguard-key"

type keyCtxKey struct{}

// ContextWithKey returns a copy of ctx that carries an explicit idempotency
// key: guarded activities running with it key on it (within their activity
// type's scope) instead of on their input. The interceptors call it with the
// key the workflow stamped into the activity's header; tests may call it
// directly. An empty key leaves ctx as it is.
func ContextWithKey(ctx context.Context, key string) context.Context {
	if key == "" {
		return ctx
	}
	return context.WithValue(ctx, keyCtxKey{}, key)
}

// KeyFromContext returns the explicit key set with [ContextWithKey].
func KeyFromContext(ctx context.Context) (string, bool) {
	k, ok := ctx.Value(keyCtxKey{}).(string)
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

type guardedCtxKey struct{}

// withGuardedByInterceptor marks ctx as running under the interceptor's
// guard, so that a decorated function inside does not claim the key again.
func withGuardedByInterceptor(ctx context.Context) context.Context {
	return context.WithValue(ctx, guardedCtxKey{}, true)
}

func guardedByInterceptor(ctx context.Context) bool {
	b, _ := ctx.Value(guardedCtxKey{}).(bool)
	return b
}
