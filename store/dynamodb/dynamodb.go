package dynamodb

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemguard/idemguard/internal/epoch"
	"github.com/idemguard/idemguard/store"
)

// API is the part of the DynamoDB client the store uses. *dynamodb.Client
// satisfies it; tests may wrap it. The store builds its expressions once
// and gives every request the same expression strings and
// ExpressionAttributeNames maps, so an implementation must not modify its
// inputs (the SDK's client does not).
type API interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
}

var _ API = (*dynamodb.Client)(nil)

// Store is a [store.Store] that keeps each record as one item of a DynamoDB
// table. It is safe for concurrent use; create it with [New].
type Store struct {
	client    API
	table     string
	tableName *string // table, for the requests
	cfg       *config
	x         [numExprs]*compiled       // the expressions, built in New
	optFns    []func(*dynamodb.Options) // per-request client options (the retryer)
	txx       txExprs                   // the transactional completion's expressions, built on the first Begin
}

var (
	_ store.Store      = (*Store)(nil)
	_ store.KeyLimiter = (*Store)(nil)
)

// New returns a store for table, sending its requests through client. The
// table must exist with the key schema the options describe (partition key
// "id" of type S by default; see [WithAttributes] and [WithSortKey]) and
// should have TTL enabled on the expiry attribute; [CreateTable] makes one.
// New checks the options, not the table; it returns an error if client is
// nil, table is empty, or an option is invalid.
func New(client API, table string, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, errors.New("dynamodb: New: nil client")
	}
	if table == "" {
		return nil, errors.New("dynamodb: New: empty table name")
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	s := &Store{client: client, table: table, tableName: aws.String(table), cfg: cfg}
	if s.x, err = cfg.buildExprs(); err != nil {
		return nil, err
	}
	if r := cfg.newRetryer(); r != nil {
		s.optFns = []func(*dynamodb.Options){func(o *dynamodb.Options) { o.Retryer = r }}
	}
	return s, nil
}

// Table returns the name of the store's table.
func (s *Store) Table() string { return s.table }

// DynamoDB's limits on the values of an item's key attributes, in bytes of
// UTF-8.
const (
	maxPartitionKeyBytes = 2048
	maxSortKeyBytes      = 1024
)

// MaxKeyBytes implements [store.KeyLimiter]: the longest idempotency key
// DynamoDB can hold in the store's layout, [maxPartitionKeyBytes] when the
// key is the partition key (the default) and [maxSortKeyBytes] when it is
// the sort key ([WithSortKey]; New refuses a static partition value over
// maxPartitionKeyBytes). The guard refuses a longer key before it sends a
// request; a key is the call's scope, "#" and 64 hex digits, so a scope
// may be at most 1,983 bytes (959 in the sort-key layout).
func (s *Store) MaxKeyBytes() int {
	if s.cfg.sortKeyAttr != "" {
		return maxSortKeyBytes
	}
	return maxPartitionKeyBytes
}

// Name returns "dynamodb", the store's name in telemetry (idemguard.store).
func (s *Store) Name() string { return "dynamodb" }

func (s *Store) opErr(op, key string, err error) error {
	return &store.OpError{Store: "dynamodb", Op: op, Key: key, Resource: fmt.Sprintf("table %q", s.table), Err: err, Throttled: isThrottle(err)}
}

// Acquire implements [store.Store] with one conditional PutItem that asks
// for the existing item back when the condition fails
// (ReturnValuesOnConditionCheckFailure ALL_OLD), and for the item it
// replaced when it succeeds (ReturnValues ALL_OLD), which tells a claim
// taken over. Only if DynamoDB returns no item on a failed condition does
// it read the record with a consistent GetItem. An existing item that
// cannot be read gives an error matching [store.ErrCorrupt].
func (s *Store) Acquire(ctx context.Context, rec *store.Record, now time.Time) (*store.Record, error) {
	const op = "Acquire"
	if err := ctx.Err(); err != nil {
		return nil, s.opErr(op, rec.Key, err)
	}
	e, err := s.cfg.encode(rec)
	if err != nil {
		return nil, s.opErr(op, rec.Key, err)
	}
	c := s.cfg
	x := s.x[exprAcquire] // see acquireExpr
	out, err := s.client.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:                s.tableName,
		Item:                     c.item(rec.Key, e),
		ConditionExpression:      x.cond,
		ExpressionAttributeNames: x.names,
		ExpressionAttributeValues: x.fill(&slotValues{
			slotNowSeconds: numAttr(epoch.FloorSeconds(now)),
			slotInProgress: inProgressAttr(),
			slotNowMillis:  numAttr(epoch.FloorMillis(now)),
		}),
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		// On success, the item replaced: a claim taken over is reported
		// from the same request (ReturnValues costs no capacity on PutItem).
		ReturnValues: types.ReturnValueAllOld,
	}, s.optFns...)
	if err == nil {
		return c.lapsedClaim(out.Attributes, now), nil
	}
	var ccf *types.ConditionalCheckFailedException
	if !errors.As(err, &ccf) {
		return nil, s.wrapWriteErr(op, rec.Key, err)
	}
	var old *store.Record
	if len(ccf.Item) > 0 {
		if old, err = c.decode(ccf.Item); err != nil {
			return nil, s.opErr(op, rec.Key, err)
		}
	} else {
		old, err = s.get(ctx, op, rec.Key)
		if errors.Is(err, store.ErrNotFound) {
			return nil, store.ErrConflict
		}
		if err != nil {
			return nil, err
		}
	}
	// Also a record under rec's own token (the SDK retried a PutItem whose
	// first attempt was written but whose answer was lost, or a claimant
	// repeats its claim): the caller recognises it by the token, and learns
	// the lease end actually stored.
	return old, store.ErrConflict
}

// lapsedClaim returns the record of item, the item a successful Acquire
// at now replaced, if it was a claim whose lease lapsed: in progress and
// not expired by the condition's own reckoning (expiry in seconds later
// than now's). Anything else, or an item that does not decode, is nil: the
// claim is the caller's either way. Completed items are not decoded, so a
// compressed result is never unpacked for nothing.
func (c *config) lapsedClaim(item map[string]types.AttributeValue, now time.Time) *store.Record {
	if st, ok := item[c.statusAttr].(*types.AttributeValueMemberS); !ok || st.Value != store.StatusInProgress.String() {
		return nil
	}
	old, err := c.decode(item)
	if err != nil || old.ExpiresAt.Unix() <= epoch.FloorSeconds(now) {
		return nil
	}
	return old
}

// Complete implements [store.Store] with one UpdateItem conditional on the
// token. It refuses, before sending, a record whose item would exceed
// 400 KB even with its result compressed.
func (s *Store) Complete(ctx context.Context, rec *store.Record) error {
	const op = "Complete"
	if err := ctx.Err(); err != nil {
		return s.opErr(op, rec.Key, err)
	}
	done := *rec
	done.Status = store.StatusCompleted
	e, err := s.cfg.encode(&done)
	if err != nil {
		return s.opErr(op, rec.Key, err)
	}
	// See completeExpr. e.token holds rec.Token.
	return s.update(ctx, op, rec.Key, exprComplete+completeVariant(e), completeSlots(e, e.token))
}

// Extend implements [store.Store] with one UpdateItem conditional on the
// token and on the record being in progress.
func (s *Store) Extend(ctx context.Context, key, token string, leaseExpiresAt, expiresAt time.Time) error {
	const op = "Extend"
	if err := ctx.Err(); err != nil {
		return s.opErr(op, key, err)
	}
	if err := checkTime("expiresAt", expiresAt); err != nil {
		return s.opErr(op, key, err)
	}
	// See extendExpr.
	x := exprExtend
	v := &slotValues{
		slotExpiry:     numAttr(epoch.CeilSeconds(expiresAt)),
		slotToken:      strAttr(token),
		slotInProgress: inProgressAttr(),
	}
	if !leaseExpiresAt.IsZero() {
		if err := checkTime("leaseExpiresAt", leaseExpiresAt); err != nil {
			return s.opErr(op, key, err)
		}
		x = exprExtendLease
		v[slotLease] = numAttr(epoch.CeilMillis(leaseExpiresAt))
	}
	return s.update(ctx, op, key, x, v)
}

// update sends expression i with the values v.
func (s *Store) update(ctx context.Context, op, key string, i int, v *slotValues) error {
	x := s.x[i]
	_, err := s.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 s.tableName,
		Key:                       s.cfg.keyItem(key),
		ConditionExpression:       x.cond,
		UpdateExpression:          x.update,
		ExpressionAttributeNames:  x.names,
		ExpressionAttributeValues: x.fill(v),
	}, s.optFns...)
	return s.wrapWriteErr(op, key, err)
}

// Release implements [store.Store] with one DeleteItem conditional on the
// token and the in-progress status.
func (s *Store) Release(ctx context.Context, key, token string) error {
	const op = "Release"
	if err := ctx.Err(); err != nil {
		return s.opErr(op, key, err)
	}
	x := s.x[exprRelease] // see releaseExpr
	_, err := s.client.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName:                 s.tableName,
		Key:                       s.cfg.keyItem(key),
		ConditionExpression:       x.cond,
		ExpressionAttributeNames:  x.names,
		ExpressionAttributeValues: x.fill(&slotValues{slotToken: strAttr(token), slotInProgress: inProgressAttr()}),
	}, s.optFns...)
	return s.wrapWriteErr(op, key, err)
}

// wrapWriteErr maps the error of a conditional write: nil stays nil, a
// failed condition is [store.ErrTokenMismatch] (Acquire handles its own
// before calling this), DynamoDB's size refusal matches [store.ErrTooLarge],
// and anything else is wrapped in an [*store.OpError].
func (s *Store) wrapWriteErr(op, key string, err error) error {
	if err == nil {
		return nil
	}
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return store.ErrTokenMismatch
	}
	if isItemTooLarge(err) {
		err = fmt.Errorf("%w: %w", store.ErrTooLarge, err)
	}
	return s.opErr(op, key, err)
}

// Get implements [store.Store] with a strongly consistent GetItem.
func (s *Store) Get(ctx context.Context, key string) (*store.Record, error) {
	const op = "Get"
	if err := ctx.Err(); err != nil {
		return nil, s.opErr(op, key, err)
	}
	return s.get(ctx, op, key)
}

func (s *Store) get(ctx context.Context, op, key string) (*store.Record, error) {
	out, err := s.client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      s.tableName,
		Key:            s.cfg.keyItem(key),
		ConsistentRead: aws.Bool(true),
	}, s.optFns...)
	if err != nil {
		return nil, s.opErr(op, key, err)
	}
	if len(out.Item) == 0 {
		return nil, store.ErrNotFound
	}
	rec, err := s.cfg.decode(out.Item)
	if err != nil {
		return nil, s.opErr(op, key, err)
	}
	return rec, nil
}

// name and value build expression operands. Attribute names are never
// split on dots: "a.b" is one attribute.
func name(n string) expression.NameBuilder { return expression.NameNoDotSplit(n) }

func value(v types.AttributeValue) expression.ValueBuilder { return expression.Value(v) }
