package dynamodb_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemguard/idemguard/store"
	idemddb "github.com/idemguard/idemguard/store/dynamodb"
)

// listSpy records the Scan and Query requests a store sends.
type listSpy struct {
	*dynamodb.Client
	mu      sync.Mutex
	scans   []*dynamodb.ScanInput  // protected by mu
	queries []*dynamodb.QueryInput // protected by mu
	deletes []*dynamodb.DeleteItemInput
}

func (c *listSpy) Scan(ctx context.Context, in *dynamodb.ScanInput, optFns ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	c.mu.Lock()
	c.scans = append(c.scans, in)
	c.mu.Unlock()
	return c.Client.Scan(ctx, in, optFns...)
}

func (c *listSpy) Query(ctx context.Context, in *dynamodb.QueryInput, optFns ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	c.mu.Lock()
	c.queries = append(c.queries, in)
	c.mu.Unlock()
	return c.Client.Query(ctx, in, optFns...)
}

func (c *listSpy) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	c.mu.Lock()
	c.deletes = append(c.deletes, in)
	c.mu.Unlock()
	return c.Client.DeleteItem(ctx, in, optFns...)
}

func (c *listSpy) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.scans, c.queries, c.deletes = nil, nil, nil
}

func (f *fixture) spyStore(t *testing.T, opts ...idemddb.Option) (*idemddb.Store, *listSpy) {
	t.Helper()
	spy := &listSpy{Client: f.client}
	s, err := idemddb.New(spy, f.table, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s, spy
}

// A status filter that matches nothing in a table of 100 completed records:
// each page reads at most as many items as it has room for and sends at
// most 16 requests, so it comes back short (here empty) with a cursor
// rather than reading the whole table; the listing still ends.
func TestListPagesBounded(t *testing.T) {
	f := newFixture(t)
	keys := make([]string, 100)
	for i := range keys {
		keys[i] = fmt.Sprintf("bounded#%03d", i)
	}
	f.fill(t, keys)
	s, spy := f.spyStore(t)

	p, err := s.List(f.ctx, store.Query{Status: store.StatusInProgress, Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Records) != 0 || p.Next == "" {
		t.Fatalf("first page = %d records, next %q; want none and a cursor", len(p.Records), p.Next)
	}
	if len(spy.scans) != 16 {
		t.Errorf("first page sent %d Scans, want 16", len(spy.scans))
	}
	for i, in := range spy.scans {
		if aws.ToInt32(in.Limit) != 2 || !aws.ToBool(in.ConsistentRead) || in.FilterExpression == nil {
			t.Errorf("Scan %d: Limit %d, consistent %v, filter %v; want 2, a consistent read, a filter",
				i, aws.ToInt32(in.Limit), aws.ToBool(in.ConsistentRead), aws.ToString(in.FilterExpression))
		}
	}
	pages := 1
	for q := (store.Query{Status: store.StatusInProgress, Limit: 2, Cursor: p.Next}); q.Cursor != ""; pages++ {
		if pages > 10 {
			t.Fatal("listing did not end")
		}
		p, err := s.List(f.ctx, q)
		if err != nil || len(p.Records) != 0 {
			t.Fatalf("page %d = %d records, %v", pages+1, len(p.Records), err)
		}
		q.Cursor = p.Next
	}
	if pages != 4 { // 100 items at 32 a page
		t.Errorf("listing took %d pages, want 4", pages)
	}

	// A page of completed records fills up to its limit, asking each
	// request only for the room left.
	spy.reset()
	p, err = s.List(f.ctx, store.Query{Status: store.StatusCompleted, Prefix: "bounded#", Limit: 7})
	if err != nil || len(p.Records) != 7 || p.Next == "" {
		t.Fatalf("page of completed = %d records, next %q, %v; want 7 and a cursor", len(p.Records), p.Next, err)
	}
	if len(spy.scans) != 1 || aws.ToInt32(spy.scans[0].Limit) != 7 {
		t.Errorf("sent %d Scans (first Limit %d), want one with Limit 7", len(spy.scans), aws.ToInt32(spy.scans[0].Limit))
	}
}

// In sort-key mode List queries the store's own partition: another
// application's records in the same table are not listed, and no Scan is
// sent.
func TestListSortKeyModeQueriesPartition(t *testing.T) {
	opts := []idemddb.Option{idemddb.WithAttributes(idemddb.Attributes{Key: "pk"}), idemddb.WithSortKey("sk", "idempotency#orders")}
	f := newFixture(t, opts...)
	other, err := idemddb.New(f.client, f.table, idemddb.WithAttributes(idemddb.Attributes{Key: "pk"}), idemddb.WithSortKey("sk", "idempotency#billing"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		f.mustAcquire(t, f.claim(fmt.Sprintf("charge#%d", i)))
		if _, err := other.Acquire(f.ctx, f.claim(fmt.Sprintf("charge#other-%d", i)), f.t0); err != nil {
			t.Fatal(err)
		}
	}
	s, spy := f.spyStore(t, opts...)
	p, err := s.List(f.ctx, store.Query{Prefix: "charge#"})
	if err != nil || p.Next != "" {
		t.Fatalf("List = %v, next %q", err, p.Next)
	}
	var got []string
	for _, r := range p.Records {
		got = append(got, r.Key)
	}
	if fmt.Sprint(got) != "[charge#0 charge#1 charge#2]" {
		t.Errorf("listed %v; want this partition's three records, in key order", got)
	}
	if len(spy.scans) != 0 || len(spy.queries) != 1 || !aws.ToBool(spy.queries[0].ConsistentRead) {
		t.Errorf("sent %d Scans and %d Queries; want one consistent Query", len(spy.scans), len(spy.queries))
	}
}

func TestListInvalidCursor(t *testing.T) {
	f := newFixture(t)
	sk, err := idemddb.New(f.client, f.table, idemddb.WithSortKey("sk", "idempotency#orders"))
	if err != nil {
		t.Fatal(err)
	}
	enc := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	for _, tc := range []struct {
		s      *idemddb.Store
		cursor string
	}{
		{f.s, "not base64!"},
		{f.s, enc("not json")},
		{f.s, enc(`{}`)},
		{f.s, enc(`{"id":""}`)},
		{f.s, enc(`{"other":"x"}`)},
		{f.s, enc(`{"id":"x","sk":"y"}`)},
		{f.s, enc(`{"id":7}`)},
		{sk, enc(`{"id":"x"}`)},
		{sk, enc(`{"id":"idempotency#billing","sk":"charge#1"}`)}, // another partition
	} {
		if _, err := tc.s.List(f.ctx, store.Query{Cursor: tc.cursor}); err == nil {
			t.Errorf("List(cursor %q) = nil error, want an invalid cursor", tc.cursor)
		}
	}
	// A cursor the store made is accepted.
	for i := range 3 {
		f.mustAcquire(t, f.claim(fmt.Sprintf("cursor#%d", i)))
	}
	p, err := f.s.List(f.ctx, store.Query{Limit: 1})
	if err != nil || p.Next == "" {
		t.Fatalf("List = %v, next %q", err, p.Next)
	}
	if _, err := f.s.List(f.ctx, store.Query{Limit: 1, Cursor: p.Next}); err != nil {
		t.Errorf("List with the store's own cursor = %v", err)
	}
}

// scanless hides Scan and Query, as a client written for idemddb.API alone
// would.
type scanless struct{ idemddb.API }

func TestListWithoutListAPI(t *testing.T) {
	f := newFixture(t)
	s, err := idemddb.New(scanless{f.client}, f.table)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.List(f.ctx, store.Query{}); !errors.Is(err, store.ErrSkip) {
		t.Errorf("List without Scan = %v, want store.ErrSkip", err)
	}
}

// An item that is not a record is left out of the page and reported as
// ErrCorrupt, with the other records and a usable cursor.
func TestListCorruptItem(t *testing.T) {
	f := newFixture(t)
	f.fill(t, []string{"charge#good-1", "charge#good-2", "charge#good-3"})
	f.put(t, map[string]types.AttributeValue{"id": s("charge#bad"), "status": s("WEIRD"), "expiration": num(f.t0.Unix() + 3600)})
	var listed []string
	corrupt := 0
	q := store.Query{Limit: 3}
	for range 10 {
		p, err := f.s.List(f.ctx, q)
		var oe *store.OpError
		switch {
		case err == nil:
		case errors.Is(err, store.ErrCorrupt) && errors.As(err, &oe) && oe.Key == "charge#bad":
			corrupt++
		default:
			t.Fatalf("List = %v", err)
		}
		for _, r := range p.Records {
			listed = append(listed, r.Key)
		}
		if q.Cursor = p.Next; q.Cursor == "" {
			break
		}
	}
	if corrupt != 1 || len(listed) != 3 {
		t.Errorf("listed %v with %d ErrCorrupt pages; want the three good records and one ErrCorrupt", listed, corrupt)
	}
}

// Delete is one unconditional DeleteItem that asks for the old item, to
// tell a deleted record from an absent one.
func TestDeleteRequest(t *testing.T) {
	f := newFixture(t, idemddb.WithAttributes(idemddb.Attributes{Key: "pk"}), idemddb.WithSortKey("sk", "idempotency#orders"))
	s, spy := f.spyStore(t, f.opts...)
	rec := f.claim("charge#1")
	f.mustAcquire(t, rec)
	if err := s.Delete(f.ctx, rec.Key); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(f.ctx, rec.Key); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("second Delete = %v, want ErrNotFound", err)
	}
	if len(spy.deletes) != 2 {
		t.Fatalf("sent %d DeleteItems, want 2", len(spy.deletes))
	}
	in := spy.deletes[0]
	if in.ConditionExpression != nil || in.ReturnValues != types.ReturnValueAllOld {
		t.Errorf("DeleteItem condition %q, ReturnValues %q; want none and ALL_OLD", aws.ToString(in.ConditionExpression), in.ReturnValues)
	}
	if pk, _ := in.Key["pk"].(*types.AttributeValueMemberS); pk == nil || pk.Value != "idempotency#orders" {
		t.Errorf("DeleteItem key %v; want the static partition and the key in sk", in.Key)
	}
}
