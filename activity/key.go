package activity

import (
	"context"

	commonpb "go.temporal.io/api/common/v1"

	"github.com/idemguard/idemguard/internal/temporalglue"
)

// KeyHeader is the Temporal header field in which the workflow side
// (workflow.WithKey, workflow.StepKey) sends an explicit idempotency key to
// the activity: a string payload written with the SDK's default converter.
const KeyHeader = temporalglue.KeyHeader

// ContextWithExplicitKey returns a copy of ctx that carries an explicit
// idempotency key: guarded activities running with it key on it (within
// their activity type's scope) instead of on their input. The interceptors
// call it with the key the workflow stamped into the activity's header;
// tests may call it directly. An empty key leaves ctx as it is.
func ContextWithExplicitKey(ctx context.Context, key string) context.Context {
	return temporalglue.ContextWithExplicitKey(ctx, key)
}

// ExplicitKeyFromContext returns the explicit key that ctx carries: the key
// the workflow stamped into the activity's header, or one set with
// [ContextWithExplicitKey]. It is what the guard derives the idempotency
// key from, not the idempotency key itself: for that, which is what to pass
// downstream, call guard.KeyFromContext inside the guarded activity.
func ExplicitKeyFromContext(ctx context.Context) (string, bool) {
	return temporalglue.ExplicitKey(ctx)
}

// EncodeKeyHeader returns the header payload that carries key, for tests
// that set the header themselves (testsuite's SetHeader) and for
// interceptors that stamp keys of their own.
func EncodeKeyHeader(key string) (*commonpb.Payload, error) {
	return temporalglue.EncodeKeyHeader(key)
}

// KeyHeaderToContext moves a key stamped into the activity's header by the
// workflow side into ctx (see [ContextWithExplicitKey]). It works inside
// an activity inbound interceptor's ExecuteActivity, where the header is
// readable; interceptors other than this package's and workflow's may call
// it. A malformed key header is a non-retryable error of type
// [ErrorTypeInvalidInput].
func KeyHeaderToContext(ctx context.Context) (context.Context, error) {
	return temporalglue.KeyHeaderToContext(ctx)
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
