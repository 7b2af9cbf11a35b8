package dynamodb

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemguard/idemguard/store"
)

func TestNumberSize(t *testing.T) {
	// Sizes measured on DynamoDB Local (TestItemSizeMatchesDynamoDB
	// re-measures them against the server).
	for _, c := range []struct {
		n    string
		want int
	}{
		{"0", 1}, {"1", 2}, {"10", 2}, {"100", 2}, {"1000", 2}, {"12", 2}, {"123", 3},
		{"1795390428000", 7}, {"1795397568", 6}, {"-5", 3}, {"0.5", 2}, {"12.5", 3},
		{"0.05", 2}, {"0.0012", 2}, {"1E+2", 2}, {"1.5e3", 2}, {"-0.001", 3}, {"99", 2},
		{"101", 3}, {"1001", 3}, {"10.01", 3}, {"0.10", 2},
		{"123456789012345678901234567890123456", 19},
		{"1000000000000000000000000000000000000000", 2},
	} {
		if got := numberSize(c.n); got != c.want {
			t.Errorf("numberSize(%s) = %d, want %d", c.n, got, c.want)
		}
	}
}

func TestEncodeData(t *testing.T) {
	c, err := newConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	var compressible bytes.Buffer
	for compressible.Len() <= defaultCompressAbove {
		compressible.WriteString(`{"k":"v"},`)
	}
	incompressible := make([]byte, defaultCompressAbove+1)
	for i := range incompressible {
		incompressible[i] = byte(rand.Uint32())
	}
	for _, tc := range []struct {
		name     string
		in       []byte
		wantType string
		gzipped  bool
	}{
		{"json object", []byte(`{"a":1}`), "S", false},
		{"json string", []byte(`"x"`), "S", false},
		{"json with spaces", []byte(" [1, 2] "), "S", false},
		{"text", []byte("hello"), "B", false},
		{"empty", []byte{}, "B", false},
		{"json with invalid UTF-8", []byte("\"\xff\""), "B", false},
		{"compressible text", compressible.Bytes(), "B", true},
		{"incompressible", incompressible, "B", false},
	} {
		v, gz, err := c.encodeData(tc.in)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if typeName(v) != tc.wantType || gz != tc.gzipped {
			t.Errorf("%s: stored as %s gzipped=%v, want %s gzipped=%v", tc.name, typeName(v), gz, tc.wantType, tc.gzipped)
		}
		got, err := c.decodeData(v, gz)
		if err != nil || !bytes.Equal(got, tc.in) || got == nil {
			t.Errorf("%s: decoded as %d bytes (nil=%v), %v; want the %d input bytes", tc.name, len(got), got == nil, err, len(tc.in))
		}
	}
	// Compression off: compressible JSON-free text stays raw.
	off, _ := newConfig([]Option{WithCompressAbove(-1)})
	if _, gz, _ := off.encodeData(compressible.Bytes()); gz {
		t.Errorf("WithCompressAbove(-1) still compressed")
	}
}

func TestRecordRoundTrip(t *testing.T) {
	for _, opts := range [][]Option{nil, {WithSortKey("sk", "idempotency#f"), WithCompressAbove(0)}} {
		c, err := newConfig(opts)
		if err != nil {
			t.Fatal(err)
		}
		t0 := time.Unix(1900000000, 0).UTC()
		for _, rec := range []*store.Record{
			{Key: "s#1", Status: store.StatusInProgress, Token: "t", ExpiresAt: t0, LeaseExpiresAt: t0.Add(-time.Minute)},
			{Key: "s#2", Status: store.StatusCompleted, Token: "t", PayloadHash: "h", Result: []byte(`{"a":[1,2]}`), ExpiresAt: t0},
			{Key: "s#3", Status: store.StatusCompleted, ResultKind: store.ResultError, Result: []byte("declined"), ExpiresAt: t0},
			{Key: "s#4", Status: store.StatusCompleted, ResultKind: store.ResultUnavailable, ExpiresAt: t0},
			{Key: "s#5", Status: store.StatusCompleted, Result: []byte{}, ExpiresAt: t0},
			{Key: "", Status: store.StatusCompleted, ExpiresAt: time.Time{}},
		} {
			e, err := c.encode(rec)
			if err != nil {
				t.Fatalf("encode %+v: %v", rec, err)
			}
			got, err := c.decode(c.item(rec.Key, e))
			if err != nil {
				t.Fatalf("decode %+v: %v", rec, err)
			}
			if d := diff(got, rec); d != "" {
				t.Errorf("%+v round-tripped with %s", rec, d)
			}
			if (rec.Result == nil) != (got.Result == nil) {
				t.Errorf("%+v: nil result became %#v", rec, got.Result)
			}
		}
	}
}

// diff describes how two records differ, or returns "".
func diff(a, b *store.Record) string {
	var d []string
	if a.Key != b.Key || a.Status != b.Status || a.Token != b.Token || a.PayloadHash != b.PayloadHash || a.ResultKind != b.ResultKind {
		d = append(d, fmt.Sprintf("fields %q %v %q %q %v vs %q %v %q %q %v",
			a.Key, a.Status, a.Token, a.PayloadHash, a.ResultKind, b.Key, b.Status, b.Token, b.PayloadHash, b.ResultKind))
	}
	if !bytes.Equal(a.Result, b.Result) {
		d = append(d, fmt.Sprintf("result %.40q vs %.40q", a.Result, b.Result))
	}
	if !a.ExpiresAt.Equal(b.ExpiresAt) || !a.LeaseExpiresAt.Equal(b.LeaseExpiresAt) {
		d = append(d, fmt.Sprintf("times %v %v vs %v %v", a.ExpiresAt, a.LeaseExpiresAt, b.ExpiresAt, b.LeaseExpiresAt))
	}
	return strings.Join(d, "; ")
}

func TestEncodeRefuses(t *testing.T) {
	c, _ := newConfig(nil)
	t0 := time.Now()
	for _, rec := range []*store.Record{
		{Key: "k", Status: 0, ExpiresAt: t0},
		{Key: "k", Status: store.StatusCompleted, ResultKind: 9, ExpiresAt: t0},
		{Key: "k", Status: store.StatusCompleted, ExpiresAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)},
	} {
		if _, err := c.encode(rec); err == nil {
			t.Errorf("encode(%+v) succeeded", rec)
		}
	}
	big := make([]byte, maxItemSize)
	for i := range big {
		big[i] = byte(rand.Uint32())
	}
	if _, err := c.encode(&store.Record{Key: "k", Status: store.StatusCompleted, Result: big, ExpiresAt: t0}); !errors.Is(err, store.ErrTooLarge) {
		t.Errorf("encode of a 400 KiB result = %v, want ErrTooLarge", err)
	}
}

func TestDataToJSON(t *testing.T) {
	c, _ := newConfig(nil)
	for _, tc := range []struct {
		v    types.AttributeValue
		want string
	}{
		{&types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
			"b": &types.AttributeValueMemberN{Value: "1.50"},
			"a": &types.AttributeValueMemberSS{Value: []string{"x", "y"}},
		}}, `{"a":["x","y"],"b":1.50}`},
		{&types.AttributeValueMemberNS{Value: []string{"1", "-2e3"}}, `[1,-2e3]`},
		{&types.AttributeValueMemberBS{Value: [][]byte{{1, 2}}}, `["` + base64.StdEncoding.EncodeToString([]byte{1, 2}) + `"]`},
		{&types.AttributeValueMemberL{Value: []types.AttributeValue{&types.AttributeValueMemberB{Value: []byte("hi")}}}, `["aGk="]`},
		{&types.AttributeValueMemberM{Value: map[string]types.AttributeValue{}}, `{}`},
	} {
		got, err := c.decodeData(tc.v, false)
		if err != nil || string(got) != tc.want {
			t.Errorf("decodeData(%#v) = %s, %v; want %s", tc.v, got, err, tc.want)
		}
		if !json.Valid(got) {
			t.Errorf("decodeData(%#v) = %s, not JSON", tc.v, got)
		}
	}
	// Not numbers, nil values and deep nesting are corrupt, not panics.
	deep := types.AttributeValue(&types.AttributeValueMemberNULL{Value: true})
	for range maxDepth + 2 {
		deep = &types.AttributeValueMemberL{Value: []types.AttributeValue{deep}}
	}
	for _, v := range []types.AttributeValue{
		&types.AttributeValueMemberN{Value: "NaN"},
		&types.AttributeValueMemberN{Value: `"1"`},
		&types.AttributeValueMemberN{Value: "1 "},
		&types.AttributeValueMemberL{Value: []types.AttributeValue{nil}},
		&types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"x": nil}},
		deep,
	} {
		if _, err := c.decodeData(v, false); !errors.Is(err, store.ErrCorrupt) {
			t.Errorf("decodeData(%T) = %v, want ErrCorrupt", v, err)
		}
	}
}

func TestOptionErrorsNameTheOption(t *testing.T) {
	for _, tc := range []struct {
		opt  Option
		want string
	}{
		{WithAttributes(Attributes{Lease: "a[1]"}), "Attributes.Lease"},
		{WithAttributes(Attributes{Encoding: strings.Repeat("x", 300)}), "Attributes.Encoding"},
		{WithAttributes(Attributes{Validation: "\xff"}), "Attributes.Validation"},
		{WithAttributes(Attributes{Data: defaultAttributes.Status}), "Attributes.Data"},
		{WithMaxAttempts(-1), "WithMaxAttempts"},
		{WithSortKey("sk", ""), "WithSortKey"},
	} {
		_, err := newConfig([]Option{tc.opt})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v does not name %s", err, tc.want)
		}
	}
}

func TestJitterBackoff(t *testing.T) {
	b := jitterBackoff{base: 25 * time.Millisecond, max: time.Second}
	for attempt := 0; attempt < 64; attempt++ {
		limit := min(time.Second, 25*time.Millisecond<<min(attempt, 20))
		for range 100 {
			d, err := b.BackoffDelay(attempt, nil)
			if err != nil || d < 0 || d >= limit {
				t.Fatalf("attempt %d: delay %v, %v; want [0, %v)", attempt, d, err, limit)
			}
		}
	}
}

// The format attribute: absent is format 1 (Powertools' items, and items
// of releases before it); one newer than the build is reported before
// anything else of the item is read, so an item the build would misread
// (an unknown status here) is not called corrupt; one that is no format
// is corrupt.
func TestDecodeFormat(t *testing.T) {
	c, err := newConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	item := func(format types.AttributeValue, status string) map[string]types.AttributeValue {
		m := map[string]types.AttributeValue{"id": strAttr("s#k"), "status": strAttr(status), "expiration": numAttr(1_800_000_000)}
		if format != nil {
			m["format"] = format
		}
		return m
	}
	if rec, err := c.decode(item(nil, "COMPLETED")); err != nil || rec.Status != store.StatusCompleted {
		t.Errorf("no format attribute: %+v, %v; want a record", rec, err)
	}
	if _, err := c.decode(item(numAttr(store.FormatVersion), "COMPLETED")); err != nil {
		t.Errorf("format %d: %v", store.FormatVersion, err)
	}
	_, err = c.decode(item(numAttr(store.FormatVersion+1), "SETTLED"))
	var fe *store.FormatError
	if !errors.As(err, &fe) || fe.Format != store.FormatVersion+1 || fe.Known != store.FormatVersion || errors.Is(err, store.ErrCorrupt) {
		t.Errorf("format %d with an unknown status: %v; want a *store.FormatError and not ErrCorrupt", store.FormatVersion+1, err)
	}
	for _, bad := range []types.AttributeValue{numAttr(0), numAttr(-1), &types.AttributeValueMemberN{Value: "1.5"}, strAttr("1"), numAttr(1 << 40)} {
		var de *store.DecodeError
		if _, err := c.decode(item(bad, "COMPLETED")); !errors.As(err, &de) || de.Attr != "format" {
			t.Errorf("format %#v: %v; want a DecodeError naming the format attribute", bad, err)
		}
	}
	// Every item the store writes carries the format.
	e, err := c.encode(&store.Record{Key: "s#k", Status: store.StatusInProgress, Token: "t", ExpiresAt: time.Unix(1_800_000_000, 0)})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.item("s#k", e)["format"]; fmt.Sprint(got) != fmt.Sprint(numAttr(store.FormatVersion)) {
		t.Errorf("encoded format attribute %#v; want N %d", got, store.FormatVersion)
	}
}
