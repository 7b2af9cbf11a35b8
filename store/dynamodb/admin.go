package dynamodb

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemguard/idemguard/store"
)

// listAPI is the part of the DynamoDB client that [Store.List] uses: Scan
// for a table in plain mode, Query for one in sort-key mode.
// *dynamodb.Client satisfies it. It is separate from [API] so that clients
// and test doubles written for API keep working: the store checks for it
// with a type assertion, and a client without it makes List return
// [store.ErrSkip].
type listAPI interface {
	Scan(ctx context.Context, in *dynamodb.ScanInput, optFns ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
	Query(ctx context.Context, in *dynamodb.QueryInput, optFns ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
}

var (
	_ listAPI     = (*dynamodb.Client)(nil)
	_ store.Admin = (*Store)(nil)
)

const (
	// defaultListLimit is the page size of [Store.List] when the query
	// gives none; maxListLimit caps the size a query may ask for.
	defaultListLimit = 100
	maxListLimit     = 1000
	// maxRequestsPerPage bounds the Scan or Query requests of one List
	// page, so that a filter that matches little returns a short page
	// (with a cursor) rather than reading the whole table in one call.
	maxRequestsPerPage = 16
)

// List implements [store.Admin]. In plain mode it is a Scan of the table;
// in sort-key mode ([WithSortKey]) a Query of the store's partition, so
// that a table shared by several applications lists only this one's
// records. The key prefix is a begins_with on the key attribute (a filter
// for Scan, part of the key condition for Query) and the status an
// equality filter, both built with the expression builder; reads are
// strongly consistent.
//
// A page holds at most q.Limit records (default 100, at most 1,000). Each request asks DynamoDB to read no more items
// than the page still has room for, and a page sends at most 16 requests,
// so memory stays bounded by the page size however large the table is;
// with a filter that matches few items a page may hold fewer records, or
// none, while more remain. The cursor is DynamoDB's LastEvaluatedKey,
// encoded; a page ends exactly where its last request stopped, so no item
// is skipped or repeated between pages. Records come in DynamoDB's order:
// by partition key hash for Scan, by key for Query (NewestFirst is false).
//
// An item that cannot be read as a record is left out of the page and
// reported in an error matching [store.ErrCorrupt], returned with the
// page (whose cursor is valid). A client that lacks Scan and Query (the
// SDK's has them) makes List return [store.ErrSkip]. List needs the IAM action
// dynamodb:Scan (plain mode) or dynamodb:Query (sort-key mode).
func (s *Store) List(ctx context.Context, q store.Query) (store.Page, error) {
	const op = "List"
	var page store.Page
	if err := ctx.Err(); err != nil {
		return page, s.opErr(op, q.Prefix, err)
	}
	lc, ok := s.client.(listAPI)
	if !ok {
		return page, store.ErrSkip
	}
	limit := q.Limit
	if limit <= 0 {
		limit = defaultListLimit
	}
	limit = min(limit, maxListLimit)
	start, err := s.decodeCursor(q.Cursor)
	if err != nil {
		return page, s.opErr(op, q.Prefix, err)
	}
	req, err := s.listRequest(q)
	if err != nil {
		return page, s.opErr(op, q.Prefix, err)
	}
	var bad []error
	for n := 0; n < maxRequestsPerPage && len(page.Records) < limit; n++ {
		items, last, err := req.send(ctx, lc, s, start, int32(limit-len(page.Records)))
		if err != nil {
			return store.Page{}, s.opErr(op, q.Prefix, err)
		}
		for _, item := range items {
			rec, err := s.cfg.decode(item)
			if err != nil {
				bad = append(bad, s.opErr(op, keyOf(s.cfg, item), err))
				continue
			}
			page.Records = append(page.Records, rec)
		}
		start = last
		if len(last) == 0 {
			break
		}
	}
	if len(start) > 0 {
		if page.Next, err = s.encodeCursor(start); err != nil {
			return store.Page{}, s.opErr(op, q.Prefix, err)
		}
	}
	return page, errors.Join(bad...)
}

// listRequest is a List query's expressions, built once per call.
type listRequest struct {
	query  bool // sort-key mode: Query the partition instead of a Scan
	filter *string
	keyCnd *string
	proj   *string
	names  map[string]string
	values map[string]types.AttributeValue
}

func (s *Store) listRequest(q store.Query) (*listRequest, error) {
	c := s.cfg
	if q.Status != 0 {
		if q.Status != store.StatusInProgress && q.Status != store.StatusCompleted {
			return nil, fmt.Errorf("dynamodb: unknown status %v", q.Status)
		}
	}
	b := expression.NewBuilder().WithProjection(c.recordProjection())

	var filters []expression.ConditionBuilder
	if q.Status != 0 {
		filters = append(filters, name(c.statusAttr).Equal(value(strAttr(q.Status.String()))))
	}
	r := &listRequest{query: c.sortKeyAttr != ""}
	if r.query {
		kc := expression.Key(c.keyAttr).Equal(value(strAttr(c.partitionValue)))
		if q.Prefix != "" {
			kc = kc.And(expression.Key(c.sortKeyAttr).BeginsWith(q.Prefix))
		}
		b = b.WithKeyCondition(kc)
	} else if q.Prefix != "" {
		filters = append(filters, name(c.keyAttr).BeginsWith(q.Prefix))
	}
	switch len(filters) {
	case 0:
	case 1:
		b = b.WithFilter(filters[0])
	default:
		b = b.WithFilter(expression.And(filters[0], filters[1], filters[2:]...))
	}
	x, err := b.Build()
	if err != nil {
		return nil, err
	}
	r.filter, r.keyCnd, r.proj = x.Filter(), x.KeyCondition(), x.Projection()
	r.names, r.values = x.Names(), x.Values()
	return r, nil
}

// send reads at most limit items starting after start, and returns them
// with the LastEvaluatedKey (empty after the last item).
func (r *listRequest) send(ctx context.Context, lc listAPI, s *Store, start map[string]types.AttributeValue, limit int32) ([]map[string]types.AttributeValue, map[string]types.AttributeValue, error) {
	if r.query {
		out, err := lc.Query(ctx, &dynamodb.QueryInput{
			TableName:                 s.tableName,
			KeyConditionExpression:    r.keyCnd,
			FilterExpression:          r.filter,
			ProjectionExpression:      r.proj,
			ExpressionAttributeNames:  r.names,
			ExpressionAttributeValues: r.values,
			ExclusiveStartKey:         start,
			Limit:                     aws.Int32(limit),
			ConsistentRead:            aws.Bool(true),
		}, s.optFns...)
		if err != nil {
			return nil, nil, err
		}
		return out.Items, out.LastEvaluatedKey, nil
	}
	out, err := lc.Scan(ctx, &dynamodb.ScanInput{
		TableName:                 s.tableName,
		FilterExpression:          r.filter,
		ProjectionExpression:      r.proj,
		ExpressionAttributeNames:  r.names,
		ExpressionAttributeValues: r.values,
		ExclusiveStartKey:         start,
		Limit:                     aws.Int32(limit),
		ConsistentRead:            aws.Bool(true),
	}, s.optFns...)
	if err != nil {
		return nil, nil, err
	}
	return out.Items, out.LastEvaluatedKey, nil
}

// keyAttrs returns the names of the table's primary key attributes.
func (c *config) keyAttrs() []string {
	if c.sortKeyAttr != "" {
		return []string{c.keyAttr, c.sortKeyAttr}
	}
	return []string{c.keyAttr}
}

// encodeCursor encodes a LastEvaluatedKey, whose attributes are the
// table's key attributes (all S), as base64url JSON of name → value.
func (s *Store) encodeCursor(last map[string]types.AttributeValue) (string, error) {
	m := make(map[string]string, len(last))
	for _, a := range s.cfg.keyAttrs() {
		v, ok := last[a].(*types.AttributeValueMemberS)
		if !ok {
			return "", fmt.Errorf("dynamodb: LastEvaluatedKey lacks the string key attribute %q", a)
		}
		m[a] = v.Value
	}
	if len(last) != len(m) {
		names := make([]string, 0, len(last))
		for n := range last {
			names = append(names, n)
		}
		sort.Strings(names)
		return "", fmt.Errorf("dynamodb: LastEvaluatedKey has attributes %q, not the table's key", names)
	}
	b, err := json.Marshal(m)
	if err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// decodeCursor is the inverse of encodeCursor; it returns nil for "". A
// cursor must name exactly the store's key attributes, and in sort-key
// mode hold the store's own partition value.
func (s *Store) decodeCursor(cur string) (map[string]types.AttributeValue, error) {
	if cur == "" {
		return nil, nil
	}
	invalid := fmt.Errorf("dynamodb: invalid list cursor %.40q", cur)
	b, err := base64.RawURLEncoding.DecodeString(cur)
	if err != nil {
		return nil, invalid
	}
	var m map[string]string
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, invalid
	}
	attrs := s.cfg.keyAttrs()
	if len(m) != len(attrs) {
		return nil, invalid
	}
	start := make(map[string]types.AttributeValue, len(attrs))
	for _, a := range attrs {
		v, ok := m[a]
		if !ok || v == "" {
			return nil, invalid
		}
		start[a] = strAttr(v)
	}
	if s.cfg.sortKeyAttr != "" && m[s.cfg.keyAttr] != s.cfg.partitionValue {
		return nil, invalid
	}
	return start, nil
}

// Delete implements [store.Admin] with one unconditional DeleteItem that
// asks for the deleted item back (ReturnValues ALL_OLD): it deletes the
// record key whatever it holds, and returns [store.ErrNotFound] if there
// was none.
func (s *Store) Delete(ctx context.Context, key string) error {
	const op = "Delete"
	if err := ctx.Err(); err != nil {
		return s.opErr(op, key, err)
	}
	out, err := s.client.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName:    s.tableName,
		Key:          s.cfg.keyItem(key),
		ReturnValues: types.ReturnValueAllOld,
	}, s.optFns...)
	if err != nil {
		return s.opErr(op, key, err)
	}
	if len(out.Attributes) == 0 {
		return store.ErrNotFound
	}
	return nil
}
