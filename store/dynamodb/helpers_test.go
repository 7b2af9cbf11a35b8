package dynamodb_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemguard/idemguard/internal/testing/dynamodbtest"
	"github.com/idemguard/idemguard/internal/testing/reqcount"
	"github.com/idemguard/idemguard/store"
	idemddb "github.com/idemguard/idemguard/store/dynamodb"
)

// fixture is a store on a fresh table, with the raw client and a request
// counter on that client.
type fixture struct {
	client *dynamodb.Client
	n      *reqcount.Counter
	table  string
	s      *idemddb.Store
	opts   []idemddb.Option
	ctx    context.Context
	t0     time.Time
}

func newFixture(t *testing.T, opts ...idemddb.Option) *fixture {
	t.Helper()
	f := &fixture{opts: opts}
	f.client = dynamodbtest.NewClient(t, func(o *dynamodb.Options) { f.n = dynamodbtest.CountRequests(o) })
	f.table = dynamodbtest.NewTable(t, f.client, opts...)
	s, err := idemddb.New(f.client, f.table, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	f.s = s
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	f.ctx = ctx
	f.t0 = time.Now().Truncate(time.Second).Add(24 * time.Hour)
	f.n.Reset()
	return f
}

var tokens atomic.Int64

// claim returns an in-progress record for key: a one-minute lease and a
// one-hour life from f.t0.
func (f *fixture) claim(key string) *store.Record {
	return &store.Record{
		Key:            key,
		Status:         store.StatusInProgress,
		Token:          fmt.Sprintf("tok-%d", tokens.Add(1)),
		PayloadHash:    "ph-" + key,
		ExpiresAt:      f.t0.Add(time.Hour),
		LeaseExpiresAt: f.t0.Add(time.Minute),
	}
}

func (f *fixture) mustAcquire(t *testing.T, rec *store.Record) {
	t.Helper()
	if old, err := f.s.Acquire(f.ctx, rec, f.t0); err != nil {
		t.Fatalf("Acquire(%q) = %v, %v", rec.Key, old, err)
	}
}

// complete stores result as rec's outcome.
func (f *fixture) complete(t *testing.T, rec *store.Record, result []byte) *store.Record {
	t.Helper()
	done := *rec
	done.Status = store.StatusCompleted
	done.Result = result
	done.ExpiresAt = f.t0.Add(2 * time.Hour)
	if err := f.s.Complete(f.ctx, &done); err != nil {
		t.Fatalf("Complete(%q) = %v", rec.Key, err)
	}
	return &done
}

// id is the primary key of an item in plain mode with the default names.
func id(k string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"id": s(k)}
}

// raw reads the item with primary key key straight from the table.
func (f *fixture) raw(t *testing.T, key map[string]types.AttributeValue) map[string]types.AttributeValue {
	t.Helper()
	out, err := f.client.GetItem(f.ctx, &dynamodb.GetItemInput{TableName: aws.String(f.table), Key: key, ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatalf("GetItem: %v", err)
	}
	return out.Item
}

// put writes item straight to the table.
func (f *fixture) put(t *testing.T, item map[string]types.AttributeValue) {
	t.Helper()
	if _, err := f.client.PutItem(f.ctx, &dynamodb.PutItemInput{TableName: aws.String(f.table), Item: item}); err != nil {
		t.Fatalf("PutItem: %v", err)
	}
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

func s(v string) *types.AttributeValueMemberS { return &types.AttributeValueMemberS{Value: v} }
func n(v string) *types.AttributeValueMemberN { return &types.AttributeValueMemberN{Value: v} }
func b(v []byte) *types.AttributeValueMemberB { return &types.AttributeValueMemberB{Value: v} }
func num(v int64) *types.AttributeValueMemberN {
	return &types.AttributeValueMemberN{Value: fmt.Sprint(v)}
}
