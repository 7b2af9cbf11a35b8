package dynamodb_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemguard/idemguard/internal/testing/dynamodbtest"
	"github.com/idemguard/idemguard/store"
	idemddb "github.com/idemguard/idemguard/store/dynamodb"
)

// wantAttrs checks that item holds exactly the attributes in want (by name
// and value).
func wantAttrs(t *testing.T, item map[string]types.AttributeValue, want map[string]types.AttributeValue) {
	t.Helper()
	for k, w := range want {
		got, ok := item[k]
		if !ok {
			t.Errorf("attribute %q missing; item has %v", k, names(item))
			continue
		}
		if !reflect.DeepEqual(got, w) {
			t.Errorf("attribute %q = %#v, want %#v", k, got, w)
		}
	}
	for k := range item {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected attribute %q = %#v", k, item[k])
		}
	}
}

func names(item map[string]types.AttributeValue) []string {
	var ns []string
	for k := range item {
		ns = append(ns, k)
	}
	return ns
}

// TestDefaultLayout checks the item the store writes with the default
// options, attribute by attribute, including the rounding of times.
func TestDefaultLayout(t *testing.T) {
	f := newFixture(t)
	rec := f.claim("scope#layout")
	// Sub-second times: expiry rounds up to the second, the lease up to the
	// millisecond.
	rec.ExpiresAt = f.t0.Add(time.Hour + 200*time.Millisecond)
	rec.LeaseExpiresAt = f.t0.Add(time.Minute + 1500*time.Microsecond)
	f.mustAcquire(t, rec)
	wantAttrs(t, f.raw(t, id(rec.Key)), map[string]types.AttributeValue{
		"id":                     s(rec.Key),
		"status":                 s("INPROGRESS"),
		"expiration":             num(f.t0.Unix() + 3600 + 1),
		"in_progress_expiration": num(f.t0.UnixMilli() + 60_000 + 2),
		"token":                  s(rec.Token),
		"validation":             s(rec.PayloadHash),
		"format":                 num(store.FormatVersion),
	})
	got, err := f.s.Get(f.ctx, rec.Key)
	if err != nil {
		t.Fatal(err)
	}
	if want := f.t0.Add(time.Hour + time.Second); !got.ExpiresAt.Equal(want) {
		t.Errorf("ExpiresAt read back as %v, want %v (rounded up)", got.ExpiresAt, want)
	}
	if want := f.t0.Add(time.Minute + 2*time.Millisecond); !got.LeaseExpiresAt.Equal(want) {
		t.Errorf("LeaseExpiresAt read back as %v, want %v (rounded up)", got.LeaseExpiresAt, want)
	}

	done := f.complete(t, rec, []byte(`{"charge":"ch_1"}`))
	wantAttrs(t, f.raw(t, id(rec.Key)), map[string]types.AttributeValue{
		"id":                     s(rec.Key),
		"status":                 s("COMPLETED"),
		"expiration":             num(done.ExpiresAt.Unix()),
		"in_progress_expiration": num(f.t0.UnixMilli() + 60_000 + 2),
		"token":                  s(rec.Token),
		"validation":             s(rec.PayloadHash),
		"data":                   s(`{"charge":"ch_1"}`),
		"format":                 num(store.FormatVersion),
	})

	// A definite error, then an unavailable result: the kind attribute
	// appears, and data goes away when the result is nil.
	errRec := f.claim("scope#layout-error")
	errRec.PayloadHash = ""
	f.mustAcquire(t, errRec)
	errDone := *errRec
	errDone.Status, errDone.ResultKind, errDone.Result = store.StatusCompleted, store.ResultError, []byte("card declined")
	if err := f.s.Complete(f.ctx, &errDone); err != nil {
		t.Fatal(err)
	}
	item := f.raw(t, id(errRec.Key))
	if !reflect.DeepEqual(item["result_kind"], s("error")) || !reflect.DeepEqual(item["data"], b([]byte("card declined"))) {
		t.Errorf("definite error stored as kind %#v data %#v; want S error, B (not JSON)", item["result_kind"], item["data"])
	}
	if _, ok := item["validation"]; ok {
		t.Errorf("empty payload hash written as %#v; want no attribute", item["validation"])
	}
	errDone.ResultKind, errDone.Result = store.ResultUnavailable, nil
	if err := f.s.Complete(f.ctx, &errDone); err != nil {
		t.Fatal(err)
	}
	item = f.raw(t, id(errRec.Key))
	if _, ok := item["data"]; ok {
		t.Errorf("nil result left data %#v", item["data"])
	}
	if !reflect.DeepEqual(item["result_kind"], s("unavailable")) {
		t.Errorf("result_kind = %#v, want unavailable", item["result_kind"])
	}
}

func TestCustomAttributeNames(t *testing.T) {
	opts := []idemddb.Option{
		idemddb.WithAttributes(idemddb.Attributes{Key: "PK"}), idemddb.WithAttributes(idemddb.Attributes{Expiry: "ttl"}), idemddb.WithAttributes(idemddb.Attributes{Lease: "lease_ms"}),
		idemddb.WithAttributes(idemddb.Attributes{Status: "state"}), idemddb.WithAttributes(idemddb.Attributes{Data: "body"}), idemddb.WithAttributes(idemddb.Attributes{Validation: "hash"}),
		idemddb.WithAttributes(idemddb.Attributes{Token: "fence"}), idemddb.WithAttributes(idemddb.Attributes{ResultKind: "kind"}), idemddb.WithAttributes(idemddb.Attributes{Encoding: "enc"}),
		idemddb.WithAttributes(idemddb.Attributes{Format: "v"}),
		idemddb.WithCompressAbove(8),
	}
	f := newFixture(t, opts...)
	rec := f.claim("scope#custom")
	f.mustAcquire(t, rec)
	done := *rec
	done.Status, done.ResultKind, done.Result = store.StatusCompleted, store.ResultError, []byte(strings.Repeat(`"x"`, 100))
	if err := f.s.Complete(f.ctx, &done); err != nil {
		t.Fatal(err)
	}
	item := f.raw(t, map[string]types.AttributeValue{"PK": s(rec.Key)})
	want := []string{"PK", "ttl", "lease_ms", "state", "body", "hash", "fence", "kind", "enc", "v"}
	if got := names(item); len(got) != len(want) {
		t.Errorf("item has attributes %v, want %v", got, want)
	}
	for _, k := range want {
		if _, ok := item[k]; !ok {
			t.Errorf("attribute %q missing; item has %v", k, names(item))
		}
	}
	got, err := f.s.Get(f.ctx, rec.Key)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Result, done.Result) || got.ResultKind != store.ResultError || got.Token != rec.Token {
		t.Errorf("read back %+v", got)
	}
	// The TTL created by CreateTable is on the custom expiry attribute.
	ttl, err := f.client.DescribeTimeToLive(f.ctx, &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(f.table)})
	if err != nil {
		t.Fatal(err)
	}
	if d := ttl.TimeToLiveDescription; d == nil || aws.ToString(d.AttributeName) != "ttl" || d.TimeToLiveStatus != types.TimeToLiveStatusEnabled {
		t.Errorf("TTL = %+v, want ENABLED on \"ttl\"", d)
	}
}

func TestSortKeyMode(t *testing.T) {
	opts := []idemddb.Option{idemddb.WithSortKey("sk", "idempotency#orders")}
	f := newFixture(t, opts...)
	rec := f.claim("scope#sorted")
	f.mustAcquire(t, rec)
	item := f.raw(t, map[string]types.AttributeValue{"id": s("idempotency#orders"), "sk": s(rec.Key)})
	if !reflect.DeepEqual(item["sk"], s(rec.Key)) || !reflect.DeepEqual(item["token"], s(rec.Token)) {
		t.Fatalf("item = %v; want the key in sk under the static partition", item)
	}

	// A second store on the same table under another partition value has
	// its own key space.
	other, err := idemddb.New(f.client, f.table, idemddb.WithSortKey("sk", "idempotency#billing"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Get(f.ctx, rec.Key); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("other partition Get = %v, want ErrNotFound", err)
	}
	if old, err := other.Acquire(f.ctx, f.claim(rec.Key), f.t0); err != nil {
		t.Errorf("other partition Acquire = %v, %v; want success", old, err)
	}

	// The table has a HASH and a RANGE key.
	d, err := f.client.DescribeTable(f.ctx, &dynamodb.DescribeTableInput{TableName: aws.String(f.table)})
	if err != nil {
		t.Fatal(err)
	}
	if ks := d.Table.KeySchema; len(ks) != 2 || aws.ToString(ks[1].AttributeName) != "sk" && aws.ToString(ks[0].AttributeName) != "sk" {
		t.Errorf("key schema %+v, want id HASH + sk RANGE", ks)
	}
}

// TestPowertoolsPythonItem reads an item laid out as AWS Powertools for
// Python (and Java) write it: data is the JSON text of the result as an S,
// there is no token.
func TestPowertoolsPythonItem(t *testing.T) {
	for _, mode := range []struct {
		name string
		opts []idemddb.Option
		key  func(string) map[string]types.AttributeValue
	}{
		{"plain", nil, id},
		{"sort-key", []idemddb.Option{idemddb.WithSortKey("sk", "idempotency#my-function")},
			func(k string) map[string]types.AttributeValue {
				return map[string]types.AttributeValue{"id": s("idempotency#my-function"), "sk": s(k)}
			}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			f := newFixture(t, mode.opts...)
			key := "my-function.app.handler#47ff40de78c4dfd8f69b948ff29ee4a3"
			data := `{"order_id": 12391, "status": "paid"}`
			item := mode.key(key)
			item["expiration"] = num(f.t0.Unix() + 3600)
			item["in_progress_expiration"] = num(f.t0.UnixMilli() + 2000)
			item["status"] = s("COMPLETED")
			item["data"] = s(data)
			item["validation"] = s("a0c4f0f2b1f0e4a9c0ab5e1d1e2bd5c1")
			f.put(t, item)

			want := &store.Record{
				Key:            key,
				Status:         store.StatusCompleted,
				PayloadHash:    "a0c4f0f2b1f0e4a9c0ab5e1d1e2bd5c1",
				ResultKind:     store.ResultValue,
				Result:         []byte(data),
				ExpiresAt:      f.t0.Add(time.Hour),
				LeaseExpiresAt: f.t0.Add(2 * time.Second),
			}
			old, err := f.s.Acquire(f.ctx, f.claim(key), f.t0.Add(time.Minute))
			if !errors.Is(err, store.ErrConflict) || old == nil {
				t.Fatalf("Acquire over a Powertools COMPLETED item = %v, %v; want the record and ErrConflict", old, err)
			}
			checkRecord(t, "conflict", old, want)
			got, err := f.s.Get(f.ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			checkRecord(t, "Get", got, want)

			// An INPROGRESS Powertools item whose lease lapsed is taken over.
			stale := mode.key(key + "-stale")
			stale["expiration"] = num(f.t0.Unix() + 3600)
			stale["in_progress_expiration"] = num(f.t0.UnixMilli() + 2000)
			stale["status"] = s("INPROGRESS")
			f.put(t, stale)
			if _, err := f.s.Acquire(f.ctx, f.claim(key+"-stale"), f.t0.Add(time.Second)); !errors.Is(err, store.ErrConflict) {
				t.Errorf("Acquire inside the Powertools lease = %v, want ErrConflict", err)
			}
			mine := f.claim(key + "-stale")
			if old, err := f.s.Acquire(f.ctx, mine, f.t0.Add(2*time.Second)); err != nil {
				t.Errorf("Acquire after the Powertools lease = %v, %v; want success", old, err)
			}
		})
	}
}

// TestPowertoolsTypeScriptItem reads an item laid out as AWS Powertools for
// TypeScript writes it: data is the result marshalled to native DynamoDB
// types.
func TestPowertoolsTypeScriptItem(t *testing.T) {
	f := newFixture(t)
	key := "my-function#KRWM3PTMwiHz4SvHTZoRBQ=="
	item := id(key)
	item["expiration"] = num(f.t0.Unix() + 3600)
	item["status"] = s("COMPLETED")
	item["data"] = &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
		"statusCode": n("200"),
		"amount":     n("-12.50"),
		"ok":         &types.AttributeValueMemberBOOL{Value: true},
		"note":       &types.AttributeValueMemberNULL{Value: true},
		"items": &types.AttributeValueMemberL{Value: []types.AttributeValue{
			s("a"), n("1"), &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"nested": s("é")}},
		}},
	}}
	f.put(t, item)
	want := `{"statusCode":200,"amount":-12.50,"ok":true,"note":null,"items":["a",1,{"nested":"é"}]}`
	old, err := f.s.Acquire(f.ctx, f.claim(key), f.t0)
	if !errors.Is(err, store.ErrConflict) || old == nil {
		t.Fatalf("Acquire over a TypeScript item = %v, %v", old, err)
	}
	if !sameJSON(t, old.Result, []byte(want)) {
		t.Errorf("Result = %s, want JSON equal to %s", old.Result, want)
	}
	if old.Status != store.StatusCompleted || old.ResultKind != store.ResultValue || !old.LeaseExpiresAt.IsZero() {
		t.Errorf("record = %+v", old)
	}

	// Scalars and lists at the top level, as TypeScript marshals them.
	for _, c := range []struct {
		v    types.AttributeValue
		want string
	}{
		{n("42"), `42`},
		{&types.AttributeValueMemberL{Value: []types.AttributeValue{n("1"), s("two")}}, `[1,"two"]`},
		{&types.AttributeValueMemberBOOL{Value: false}, `false`},
		{&types.AttributeValueMemberNULL{Value: true}, `null`},
	} {
		item["data"] = c.v
		f.put(t, item)
		got, err := f.s.Get(f.ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if string(got.Result) != c.want {
			t.Errorf("data %#v read as %s, want %s", c.v, got.Result, c.want)
		}
	}
}

func sameJSON(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Errorf("not JSON: %s: %v", a, err)
		return false
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("not JSON: %s: %v", b, err)
	}
	return reflect.DeepEqual(x, y)
}

func checkRecord(t *testing.T, what string, got, want *store.Record) {
	t.Helper()
	if got.Key != want.Key || got.Status != want.Status || got.Token != want.Token ||
		got.PayloadHash != want.PayloadHash || got.ResultKind != want.ResultKind ||
		!bytes.Equal(got.Result, want.Result) || !got.ExpiresAt.Equal(want.ExpiresAt) ||
		!got.LeaseExpiresAt.Equal(want.LeaseExpiresAt) {
		t.Errorf("%s record:\n got %+v\nwant %+v", what, got, want)
	}
}

func TestCompressedResult(t *testing.T) {
	f := newFixture(t)
	var sb strings.Builder
	sb.WriteString("[")
	for i := range 5000 {
		if i > 0 {
			sb.WriteString(",")
		}
		fmt.Fprintf(&sb, `{"line":%d,"sku":"SKU-%04d","qty":1}`, i, i%100)
	}
	sb.WriteString("]")
	result := []byte(sb.String())
	if len(result) < 150<<10 {
		t.Fatalf("test result only %d bytes", len(result))
	}
	rec := f.claim("scope#compressed")
	f.mustAcquire(t, rec)
	f.complete(t, rec, result)

	item := f.raw(t, id(rec.Key))
	data, ok := item["data"].(*types.AttributeValueMemberB)
	if !ok {
		t.Fatalf("data = %T, want B", item["data"])
	}
	if !reflect.DeepEqual(item["data_encoding"], s("gzip")) {
		t.Errorf("data_encoding = %#v, want S gzip", item["data_encoding"])
	}
	if len(data.Value) >= len(result)/4 {
		t.Errorf("stored %d bytes for a %d-byte repetitive result; want it compressed", len(data.Value), len(result))
	}
	zr, err := gzip.NewReader(bytes.NewReader(data.Value))
	if err != nil {
		t.Fatalf("data is not gzip: %v", err)
	}
	if raw, _ := io.ReadAll(zr); !bytes.Equal(raw, result) {
		t.Errorf("gunzipped data differs from the result")
	}
	got, err := f.s.Get(f.ctx, rec.Key)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Result, result) {
		t.Errorf("Get returned %d bytes, want the %d-byte result", len(got.Result), len(result))
	}
	old, err := f.s.Acquire(f.ctx, f.claim(rec.Key), f.t0)
	if !errors.Is(err, store.ErrConflict) || old == nil || !bytes.Equal(old.Result, result) {
		t.Errorf("conflict did not return the decompressed result: err %v", err)
	}

	// A result far over 400 KB fits when it compresses: 2 MB of JSON.
	big := bytes.Repeat(result[:len(result)-1], 12)
	rec2 := f.claim("scope#compressed-big")
	f.mustAcquire(t, rec2)
	f.complete(t, rec2, big)
	if got, err := f.s.Get(f.ctx, rec2.Key); err != nil || !bytes.Equal(got.Result, big) {
		t.Errorf("2 MB compressible result did not round-trip: %v", err)
	}

	// Below the threshold, or with compression off, JSON stays readable text.
	plain := newFixture(t, idemddb.WithCompressAbove(-1))
	rec3 := plain.claim("scope#uncompressed")
	plain.mustAcquire(t, rec3)
	plain.complete(t, rec3, result)
	item = plain.raw(t, id(rec3.Key))
	if d, ok := item["data"].(*types.AttributeValueMemberS); !ok || d.Value != string(result) {
		t.Errorf("with compression off, data = %T; want the JSON as S", item["data"])
	}
	if _, ok := item["data_encoding"]; ok {
		t.Errorf("with compression off, data_encoding = %#v", item["data_encoding"])
	}
}

// TestItemSizeLimit finds, with the store's own size computation, the
// largest incompressible result that fits, and checks it against DynamoDB:
// that result is stored, one byte more is refused before anything is sent.
func TestItemSizeLimit(t *testing.T) {
	f := newFixture(t)
	rec := f.claim("scope#size-limit")
	f.mustAcquire(t, rec)
	f.complete(t, rec, []byte{}) // an empty B: the item without its result
	overhead := idemddb.ItemSize(f.raw(t, id(rec.Key)))
	fits := idemddb.MaxItemSize - overhead

	f.n.Reset()
	done := f.complete(t, rec, randomBytes(fits))
	if got := f.n.Get("UpdateItem"); got != 1 {
		t.Errorf("Complete at the limit sent %d UpdateItem requests, want 1", got)
	}
	if got := idemddb.ItemSize(f.raw(t, id(rec.Key))); got != idemddb.MaxItemSize {
		t.Errorf("stored item is %d bytes by ItemSize, want exactly %d", got, idemddb.MaxItemSize)
	}

	f.n.Reset()
	over := *done
	over.Result = randomBytes(fits + 1)
	err := f.s.Complete(f.ctx, &over)
	if !errors.Is(err, store.ErrTooLarge) {
		t.Fatalf("Complete one byte over = %v, want ErrTooLarge", err)
	}
	var opErr *store.OpError
	if !errors.As(err, &opErr) || opErr.Op != "Complete" || opErr.Resource != fmt.Sprintf("table %q", f.table) {
		t.Errorf("error %v is not an *OpError naming Complete and the table", err)
	}
	if got := f.n.Total(); got != 0 {
		t.Errorf("a refused Complete sent %s, want no request", f.n)
	}

	// DynamoDB itself refuses that item, so the limit is real, and the
	// store maps its refusal to ErrTooLarge too.
	item := f.raw(t, id(rec.Key))
	item["data"] = b(over.Result)
	_, err = f.client.PutItem(f.ctx, &dynamodb.PutItemInput{TableName: aws.String(f.table), Item: item})
	if err == nil {
		t.Fatalf("DynamoDB accepted a %d-byte item", idemddb.ItemSize(item))
	}
	t.Logf("DynamoDB refuses %d bytes: %v", idemddb.ItemSize(item), err)
}

func TestCreateTableExisting(t *testing.T) {
	client := dynamodbtest.NewClient(t)
	table := dynamodbtest.NewTable(t, client)
	ctx := t.Context()
	// Again with the same schema: fine, TTL already on.
	if err := idemddb.CreateTable(ctx, client, table); err != nil {
		t.Errorf("CreateTable on an existing table = %v", err)
	}
	// With another key schema: refused.
	if err := idemddb.CreateTable(ctx, client, table, idemddb.WithSortKey("sk", "p")); err == nil {
		t.Errorf("CreateTable with a sort key over a table without one succeeded")
	}
	// With TTL wanted on another attribute: refused.
	if err := idemddb.CreateTable(ctx, client, table, idemddb.WithAttributes(idemddb.Attributes{Expiry: "other"})); !errors.Is(err, idemddb.ErrTTLNotEnabled) {
		t.Errorf("CreateTable asking TTL on another attribute = %v, want ErrTTLNotEnabled", err)
	}
	if err := idemddb.CreateTable(ctx, client, table, idemddb.WithAttributes(idemddb.Attributes{Key: "a[0]"})); err == nil {
		t.Errorf("CreateTable with an invalid option succeeded")
	}
}

// noTTL is a client on which enabling TTL fails, as on an emulator without
// TTL support.
type noTTL struct{ *dynamodb.Client }

func (noTTL) UpdateTimeToLive(context.Context, *dynamodb.UpdateTimeToLiveInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateTimeToLiveOutput, error) {
	return nil, errors.New("UnknownOperationException")
}

func TestCreateTableWithoutTTL(t *testing.T) {
	client := dynamodbtest.NewClient(t)
	table := dynamodbtest.TableName(t)
	err := idemddb.CreateTable(t.Context(), noTTL{client}, table)
	t.Cleanup(func() {
		client.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(table)})
	})
	if !errors.Is(err, idemddb.ErrTTLNotEnabled) {
		t.Fatalf("CreateTable without TTL support = %v, want ErrTTLNotEnabled", err)
	}
	// The table is usable all the same.
	s, err := idemddb.New(client, table)
	if err != nil {
		t.Fatal(err)
	}
	rec := &store.Record{Key: "scope#no-ttl", Status: store.StatusInProgress, Token: "t", ExpiresAt: time.Now().Add(time.Hour)}
	if _, err := s.Acquire(t.Context(), rec, time.Now()); err != nil {
		t.Errorf("Acquire on a table without TTL = %v", err)
	}
}
