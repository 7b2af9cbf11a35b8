package dynamodb

import (
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/smithy-go"

	"github.com/idemguard/idemguard/store"
)

// OpError is the error a [Store] method returns when a request fails or an
// item cannot be read. It names the operation, table and key, and wraps the
// cause: an SDK error (reach it with [errors.As]), a [*DecodeError], or an
// error matching [store.ErrTooLarge].
//
// An OpError whose cause is DynamoDB throttling
// (ProvisionedThroughputExceededException, ThrottlingException,
// RequestLimitExceeded and the other codes the SDK's retryer treats as
// throttling) matches [store.ErrThrottled] with [errors.Is]; it is returned
// only once the store's retryer has given up.
type OpError struct {
	// Op is the store method: "Acquire", "Complete", "Extend", "Release",
	// "Get", "GetMany", "List" or "Delete".
	Op string
	// Table is the table name.
	Table string
	// Key is the idempotency key (for GetMany, the first key of the failed
	// request; for List, the query's prefix).
	Key string
	// Err is the cause.
	Err error
}

// Error describes the failed operation and its cause.
func (e *OpError) Error() string {
	return fmt.Sprintf("dynamodb: %s %q in table %q: %v", e.Op, e.Key, e.Table, e.Err)
}

// Unwrap returns the cause.
func (e *OpError) Unwrap() error { return e.Err }

// Is reports whether target is [store.ErrThrottled] and the cause is
// throttling.
func (e *OpError) Is(target error) bool {
	return target == store.ErrThrottled && isThrottle(e.Err)
}

// isThrottle reports whether err is, or wraps, an API error whose code the
// SDK's retryer counts as throttling.
func isThrottle(err error) bool {
	var api smithy.APIError
	if !errors.As(err, &api) {
		return false
	}
	_, ok := retry.DefaultThrottleErrorCodes[api.ErrorCode()]
	return ok
}

// isItemTooLarge reports whether err is DynamoDB's refusal of an item over
// 400 KB. DynamoDB has no error type for it: it is a ValidationException
// whose message speaks of the item size, so this is a message check, a
// backstop behind the size the store computes before sending.
func isItemTooLarge(err error) bool {
	var api smithy.APIError
	if !errors.As(err, &api) || api.ErrorCode() != "ValidationException" {
		return false
	}
	msg := strings.ToLower(api.ErrorMessage())
	return strings.Contains(msg, "item size") && strings.Contains(msg, "maximum allowed size")
}
