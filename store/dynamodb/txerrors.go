package dynamodb

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/idemguard/idemguard/store"
)

// The errors of a transaction ([Store.Begin]): what a guarded function's
// caller can act on when its writes were not applied.

// TxLimit names a limit of DynamoDB's transactions that a [TxLimitError]
// reports.
type TxLimit int

const (
	// TxTooManyActions: more than 100 actions, the guard's
	// completions included.
	TxTooManyActions TxLimit = iota + 1
	// TxTooLarge: more than 4 MB written in all.
	TxTooLarge
	// TxItemTooLarge: a Put of an item over 400 KB.
	TxItemTooLarge
	// TxSameItem: two actions on one item.
	TxSameItem
	// TxRecordItem: an action of the function on the item of an
	// idempotency record the guard completes in the same transaction.
	TxRecordItem
	// TxInvalidAction: an action DynamoDB would refuse as malformed (no
	// table, no key, an expression the builder refused, …).
	TxInvalidAction
)

// String returns the limit's name, for example "too many actions".
func (l TxLimit) String() string {
	switch l {
	case TxTooManyActions:
		return "too many actions"
	case TxTooLarge:
		return "transaction too large"
	case TxItemTooLarge:
		return "item too large"
	case TxSameItem:
		return "two actions on one item"
	case TxRecordItem:
		return "action on the idempotency record"
	case TxInvalidAction:
		return "invalid action"
	}
	return fmt.Sprintf("TxLimit(%d)", int(l))
}

// TxLimitError reports a transaction that DynamoDB would refuse. It is
// returned, before anything is sent, by the [TxWrites] method that added
// the offending action (and then by every later call, Commit included: the
// transaction is failed), or by the transaction's Complete for the completion that
// would not fit. Nothing of the transaction is written; under guard.DoTx
// the key is released, so a retry runs the function again, and fails the
// same way until the function writes less.
//
// The few cases the store cannot see before sending (two Puts of one item
// on a table whose key attributes no action of the transaction shows, an
// Update that makes an item too large) are refused by DynamoDB with a
// ValidationException, which Commit also reports as a TxLimitError whose
// Err is the service's error.
//
// A TxLimitError of [TxTooLarge] matches [store.ErrTooLarge]: the guard
// then completes the record without its result, which may fit.
type TxLimitError struct {
	// Limit is the limit the transaction would exceed.
	Limit TxLimit
	// Index is the offending action's position among the function's
	// actions, from 0, in the order they were added; -1 for a completion,
	// or when DynamoDB did not say.
	Index int
	// Table is the table of the offending action, if known.
	Table string
	// Msg says what exceeds the limit.
	Msg string
	// Err is DynamoDB's error, when DynamoDB refused the transaction;
	// nil when the store refused it before sending.
	Err error
}

// Error says which limit, which action and that nothing was written.
func (e *TxLimitError) Error() string {
	var b strings.Builder
	b.WriteString("dynamodb: transaction refused (")
	b.WriteString(e.Limit.String())
	b.WriteString("); none of its writes happened: ")
	switch {
	case e.Index >= 0 && e.Table != "":
		fmt.Fprintf(&b, "action %d on table %q: ", e.Index, e.Table)
	case e.Index >= 0:
		fmt.Fprintf(&b, "action %d: ", e.Index)
	}
	b.WriteString(e.Msg)
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns DynamoDB's error, if any.
func (e *TxLimitError) Unwrap() error { return e.Err }

// Is reports whether target is [store.ErrTooLarge] and the limit is the
// transaction's size.
func (e *TxLimitError) Is(target error) bool {
	return target == store.ErrTooLarge && e.Limit == TxTooLarge
}

// Cancellation reason codes of DynamoDB ([TxReason.Code]).
const (
	// reasonNone: the action did not cause the cancellation.
	reasonNone = "None"
	// reasonConditionFailed: the action's condition did not hold.
	reasonConditionFailed = "ConditionalCheckFailed"
	// reasonConflict: another request was changing the item.
	reasonConflict = "TransactionConflict"
)

// TxCanceledError reports a transaction that DynamoDB cancelled: none of
// its writes happened, neither the function's nor the guard's completion.
// Under guard.DoTx the key is then released (the guard reads the record,
// finds its claim still held and releases it), so the caller may fix what
// failed and call again, and the function runs again.
//
// Reasons says, per action of the function, why: ConditionalCheckFailed
// for a condition of the function's that did not hold (with the item as it
// was, when the action asked for it with [ReturnOldOnFailure]).
//
// It matches [store.ErrRefused] when a condition of the function's own
// did not hold (and the guard's completions' did): guard.DoTx then
// returns a *adapt.RefusedError wrapping it, which matches
// guard.ErrRefused, not guard.ErrStore: a business outcome (a debit the
// balance does not cover), not a failure of the store.
//
// It matches [store.ErrTokenMismatch] when the guard's completion of a
// record failed its condition (the claim was no longer held under the
// call's token: its lease lapsed and another caller took it over, or it
// was released): guard.DoTx then returns guard.ErrLeaseLost. It matches
// [store.ErrThrottled] when only conflicts with other requests
// (TransactionConflict) or throttling cancelled it, once the transaction's Commit has
// resent it as many times as the store's retryer allows.
type TxCanceledError struct {
	// Reasons has one entry per action of the function, in the order they
	// were added.
	Reasons []TxReason
	// Records lists the idempotency records whose completion failed its
	// condition; when not empty, the error matches
	// [store.ErrTokenMismatch].
	Records []string
	// Err is the SDK's error.
	Err *types.TransactionCanceledException
}

// TxReason is DynamoDB's reason for one action of a cancelled transaction.
type TxReason struct {
	// Index is the action's position among the function's actions, from 0.
	Index int
	// Kind is "Put", "Update", "Delete" or "ConditionCheck".
	Kind string
	// Table is the action's table.
	Table string
	// Key is the item's primary key, when the store knows it (always but
	// for a Put on a table whose key attributes no other action showed).
	Key Item
	// Code is DynamoDB's cancellation reason: "None" (the action did
	// not cause the cancellation), "ConditionalCheckFailed" (its
	// condition did not hold), "TransactionConflict" (another request
	// was changing the item), "ThrottlingError",
	// "ProvisionedThroughputExceeded", "ItemCollectionSizeLimitExceeded",
	// "ValidationError".
	Code string
	// Message is DynamoDB's message, if any.
	Message string
	// Old is the item as it was, for a failed condition of an action built
	// with [ReturnOldOnFailure] (nil if the item did not exist).
	Old Item
}

// Item is an item, or an item's key, as a [TxReason] reports it. It prints
// (String, and so %v) as the JSON its values stand for, attributes in name
// order: {"balance":100,"pk":"acct#a-1"}. Strings are JSON strings, numbers
// JSON numbers, binary values base64, sets arrays.
type Item map[string]types.AttributeValue

// String returns the item as JSON, or "<no item>" for a nil Item.
func (it Item) String() string {
	if it == nil {
		return "<no item>"
	}
	m := make(map[string]any, len(it))
	for name, v := range it {
		j, err := toJSON(v, 0)
		if err != nil {
			j = "<" + typeName(v) + ": " + err.Error() + ">"
		}
		m[name] = j
	}
	b, err := json.Marshal(m)
	if err != nil {
		return fmt.Sprintf("<item of %d attributes: %v>", len(it), err)
	}
	return string(b)
}

// ConditionFailed returns the reasons of the function's actions whose
// condition did not hold.
func (e *TxCanceledError) ConditionFailed() []TxReason {
	var out []TxReason
	for _, r := range e.Reasons {
		if r.Code == reasonConditionFailed {
			out = append(out, r)
		}
	}
	return out
}

// Error says that nothing was written, and why.
func (e *TxCanceledError) Error() string {
	var b strings.Builder
	b.WriteString("dynamodb: transaction cancelled; none of its writes happened")
	var causes []string
	if len(e.Records) > 0 {
		causes = append(causes, fmt.Sprintf("the completion of idempotency record %q failed its condition (no longer held under this call's token)", e.Records[0]))
	}
	for _, r := range e.Reasons {
		if r.Code == "" || r.Code == reasonNone {
			continue
		}
		c := fmt.Sprintf("action %d (%s on %q): %s", r.Index, r.Kind, r.Table, r.Code)
		if r.Message != "" && r.Code != reasonConditionFailed {
			c += " (" + r.Message + ")"
		}
		causes = append(causes, c)
	}
	if len(causes) > 0 {
		b.WriteString(": ")
		b.WriteString(strings.Join(causes, "; "))
	}
	return b.String()
}

// Unwrap returns the SDK's error.
func (e *TxCanceledError) Unwrap() error {
	if e.Err == nil {
		return nil
	}
	return e.Err
}

// Is reports whether target is [store.ErrTokenMismatch] and a completion
// failed, [store.ErrRefused] and a condition of the function's failed
// while the completions' held, or [store.ErrThrottled] and only conflicts
// or throttling cancelled the transaction.
func (e *TxCanceledError) Is(target error) bool {
	switch target {
	case store.ErrTokenMismatch:
		return len(e.Records) > 0
	case store.ErrRefused:
		return len(e.Records) == 0 && len(e.ConditionFailed()) > 0
	case store.ErrThrottled:
		return e.retryable()
	}
	return false
}

// retryableReasons are the cancellation reasons a resend may not meet
// again.
var retryableReasons = map[string]bool{reasonConflict: true, "ThrottlingError": true, "ProvisionedThroughputExceeded": true}

// retryable reports whether only conflicts or throttling cancelled the
// transaction.
func (e *TxCanceledError) retryable() bool {
	if len(e.Records) > 0 || e.Err == nil {
		return false
	}
	any := false
	for _, r := range e.Err.CancellationReasons {
		c := aws.ToString(r.Code)
		switch {
		case retryableReasons[c]:
			any = true
		case c != "" && c != reasonNone:
			return false
		}
	}
	return any
}

// mapError turns the error of the transaction's request into the error
// Commit reports: a [*TxCanceledError] for a cancellation, a
// [*TxLimitError] for the limits DynamoDB checks itself, else err.
func (w *TxWrites) mapError(err error) error {
	var tce *types.TransactionCanceledException
	if errors.As(err, &tce) {
		ce := &TxCanceledError{Err: tce}
		for j, r := range tce.CancellationReasons {
			m, i := w.metaOf(j)
			code := aws.ToString(r.Code)
			if m.rec != "" {
				if code == reasonConditionFailed {
					ce.Records = append(ce.Records, m.rec)
				}
				continue
			}
			if m.kind == "" {
				continue // more reasons than actions: not ours to name
			}
			reason := TxReason{Index: i, Kind: m.kind, Table: m.table, Key: m.key, Code: code, Message: aws.ToString(r.Message)}
			if code == reasonConditionFailed && len(r.Item) > 0 {
				reason.Old = r.Item
			}
			ce.Reasons = append(ce.Reasons, reason)
		}
		return ce
	}
	var api smithy.APIError
	if errors.As(err, &api) && api.ErrorCode() == "ValidationException" {
		msg := strings.ToLower(api.ErrorMessage())
		l := TxLimit(0)
		switch {
		case strings.Contains(msg, "multiple operations on one item"):
			l = TxSameItem
		case strings.Contains(msg, "transaction payload size"), strings.Contains(msg, "transaction request size"):
			l = TxTooLarge
		case strings.Contains(msg, "item size"):
			l = TxItemTooLarge
		case strings.Contains(msg, "length less than or equal to 100"):
			l = TxTooManyActions
		}
		if l != 0 {
			return &TxLimitError{Limit: l, Index: -1, Msg: "DynamoDB refused the transaction", Err: err}
		}
	}
	return err
}
