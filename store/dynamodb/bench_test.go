package dynamodb_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemguard/idemguard/store"
	idemddb "github.com/idemguard/idemguard/store/dynamodb"
)

// cannedAPI answers every request with the same output and no network, so
// that the benchmarks measure the store's own CPU time: building the
// requests and reading the answers. If conflict is set, PutItem fails its
// condition and returns conflict as the old item (ALL_OLD).
type cannedAPI struct {
	conflict map[string]types.AttributeValue
}

func (a *cannedAPI) GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	return &dynamodb.GetItemOutput{Item: a.conflict}, nil
}

func (a *cannedAPI) PutItem(context.Context, *dynamodb.PutItemInput, ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	if a.conflict != nil {
		return nil, &types.ConditionalCheckFailedException{Item: a.conflict}
	}
	return &dynamodb.PutItemOutput{}, nil
}

func (a *cannedAPI) UpdateItem(context.Context, *dynamodb.UpdateItemInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	return &dynamodb.UpdateItemOutput{}, nil
}

func (a *cannedAPI) DeleteItem(context.Context, *dynamodb.DeleteItemInput, ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	return &dynamodb.DeleteItemOutput{}, nil
}

// benchRecord is a claim as the guard makes one: a 64-hex-digit key, a
// 32-hex-digit token, a lease, no payload hash.
func benchRecord(i int, now time.Time) *store.Record {
	return &store.Record{
		Key:            "orders.charge#" + strconv.FormatInt(int64(i), 16) + "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"[:56],
		Status:         store.StatusInProgress,
		Token:          "5d41402abc4b2a76b9719d911017c592",
		ExpiresAt:      now.Add(time.Hour),
		LeaseExpiresAt: now.Add(time.Minute),
	}
}

func newBenchStore(b *testing.B, api idemddb.API) *idemddb.Store {
	b.Helper()
	s, err := idemddb.New(api, "bench")
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// BenchmarkAcquire is a claim of a fresh key: one PutItem that succeeds.
func BenchmarkAcquire(b *testing.B) {
	s := newBenchStore(b, &cannedAPI{})
	ctx := context.Background()
	now := time.Now()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, err := s.Acquire(ctx, benchRecord(i, now), now); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAcquireConflict is a claim of a completed key (a replay): the
// PutItem fails its condition and the old item is decoded.
func BenchmarkAcquireConflict(b *testing.B) {
	now := time.Now()
	rec := benchRecord(0, now)
	old := map[string]types.AttributeValue{
		"id":         &types.AttributeValueMemberS{Value: rec.Key},
		"status":     &types.AttributeValueMemberS{Value: "COMPLETED"},
		"expiration": &types.AttributeValueMemberN{Value: strconv.FormatInt(now.Add(time.Hour).Unix(), 10)},
		"token":      &types.AttributeValueMemberS{Value: "b1946ac92492d2347c6235b4d2611184"},
		"data":       &types.AttributeValueMemberS{Value: `{"id":"ch_0123456789","amount_cents":4200}`},
	}
	s := newBenchStore(b, &cannedAPI{conflict: old})
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if got, err := s.Acquire(ctx, rec, now); got == nil || err != store.ErrConflict {
			b.Fatalf("Acquire = %v, %v; want the old record and ErrConflict", got, err)
		}
	}
}

// BenchmarkComplete is a completion with a small JSON result, as the guard
// sends it: no lease, no payload hash.
func BenchmarkComplete(b *testing.B) {
	s := newBenchStore(b, &cannedAPI{})
	ctx := context.Background()
	now := time.Now()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		rec := benchRecord(i, now)
		rec.Status = store.StatusCompleted
		rec.LeaseExpiresAt = time.Time{}
		rec.Result = []byte(`{"id":"ch_0123456789","amount_cents":4200}`)
		if err := s.Complete(ctx, rec); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkExtend is a lease renewal.
func BenchmarkExtend(b *testing.B) {
	s := newBenchStore(b, &cannedAPI{})
	ctx := context.Background()
	now := time.Now()
	rec := benchRecord(0, now)
	b.ReportAllocs()
	for b.Loop() {
		if err := s.Extend(ctx, rec.Key, rec.Token, now.Add(2*time.Minute), now.Add(time.Hour)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkNew is the one-time cost of a store: checking the options and
// building every expression the store sends.
func BenchmarkNew(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		newBenchStore(b, &cannedAPI{})
	}
}
