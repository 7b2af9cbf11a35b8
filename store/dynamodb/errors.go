package dynamodb

import (
	"errors"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/smithy-go"
)

// The store's errors are [*store.OpError] values (Store "dynamodb",
// Resource the table) wrapping the cause: an SDK error (reach it with
// errors.As), a [*store.DecodeError], or an error matching
// [store.ErrTooLarge]. One whose cause is DynamoDB throttling
// (ProvisionedThroughputExceededException, ThrottlingException,
// RequestLimitExceeded and the other codes the SDK's retryer treats as
// throttling), or a TransactionConflictException (the item is in a
// transaction in flight), matches [store.ErrThrottled]; it is returned only
// once the store's retryer has given up.

// isThrottle reports whether err is, or wraps, an API error whose code the
// SDK's retryer counts as throttling.
func isThrottle(err error) bool {
	var api smithy.APIError
	if !errors.As(err, &api) {
		return false
	}
	if api.ErrorCode() == "TransactionConflictException" {
		// A write that met a transaction in flight on its item: it may
		// succeed once the transaction ends.
		return true
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
