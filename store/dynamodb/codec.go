package dynamodb

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemguard/idemguard/internal/compress"
	"github.com/idemguard/idemguard/internal/epoch"
	"github.com/idemguard/idemguard/store"
)

// maxItemSize is DynamoDB's limit on the size of one item: 400 KB, counted
// as the UTF-8 lengths of the attribute names plus the sizes of the values.
const maxItemSize = 400 << 10

const (
	kindError       = "error"
	kindUnavailable = "unavailable"
	encodingGzip    = compress.Encoding
	// maxDepth bounds the nesting of a foreign data attribute (DynamoDB
	// itself allows 32 levels).
	maxDepth = 64
)

// formatValue is the format attribute of every item the store writes.
var formatValue types.AttributeValue = numAttr(store.FormatVersion)

func checkTime(what string, t time.Time) error { return epoch.Check("dynamodb", what, t) }

func numAttr(n int64) *types.AttributeValueMemberN {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}

func strAttr(s string) *types.AttributeValueMemberS {
	return &types.AttributeValueMemberS{Value: s}
}

// keyItem returns the primary key of the item for key.
func (c *config) keyItem(key string) map[string]types.AttributeValue {
	if c.sortKeyAttr != "" {
		return map[string]types.AttributeValue{
			c.keyAttr:     strAttr(c.partitionValue),
			c.sortKeyAttr: strAttr(key),
		}
	}
	return map[string]types.AttributeValue{c.keyAttr: strAttr(key)}
}

// encoded holds the attributes of a record other than its key. A nil value
// means the attribute is absent.
type encoded struct {
	status     types.AttributeValue
	expiry     types.AttributeValue
	lease      types.AttributeValue
	token      types.AttributeValue
	validation types.AttributeValue
	data       types.AttributeValue
	kind       types.AttributeValue
	encoding   types.AttributeValue
	format     types.AttributeValue
}

// namedAttr is one attribute of an item; v is nil when it is absent.
type namedAttr struct {
	name string
	v    types.AttributeValue
}

// attrs lists the attributes of e by name, absent ones with a nil value.
func (c *config) attrs(e *encoded) [9]namedAttr {
	return [...]namedAttr{
		{c.statusAttr, e.status},
		{c.expiryAttr, e.expiry},
		{c.leaseAttr, e.lease},
		{c.tokenAttr, e.token},
		{c.validationAttr, e.validation},
		{c.dataAttr, e.data},
		{c.kindAttr, e.kind},
		{c.encodingAttr, e.encoding},
		{c.formatAttr, e.format},
	}
}

// item returns the whole item: key plus the present attributes of e.
func (c *config) item(key string, e *encoded) map[string]types.AttributeValue {
	m := c.keyItem(key)
	for _, a := range c.attrs(e) {
		if a.v != nil {
			m[a.name] = a.v
		}
	}
	return m
}

// itemSize returns sizeOf(c.item(key, e)) without building the item: the
// attribute names are distinct (New checks), so the item holds each of them
// once.
func (c *config) itemSize(key string, e *encoded) int {
	n := len(c.keyAttr)
	if c.sortKeyAttr != "" {
		n += len(c.partitionValue) + len(c.sortKeyAttr) + len(key)
	} else {
		n += len(key)
	}
	for _, a := range c.attrs(e) {
		if a.v != nil {
			n += len(a.name) + attrSize(a.v)
		}
	}
	return n
}

// encode turns rec into attributes. It refuses times it could not store and
// items larger than 400 KB, the latter with an error matching
// [store.ErrTooLarge].
func (c *config) encode(rec *store.Record) (*encoded, error) {
	if err := checkTime("ExpiresAt", rec.ExpiresAt); err != nil {
		return nil, err
	}
	e := &encoded{
		status: strAttr(rec.Status.String()),
		expiry: numAttr(epoch.CeilSeconds(rec.ExpiresAt)),
		token:  strAttr(rec.Token),
		format: formatValue,
	}
	if rec.Status != store.StatusInProgress && rec.Status != store.StatusCompleted {
		return nil, fmt.Errorf("dynamodb: record %q has an invalid status %v", rec.Key, rec.Status)
	}
	if !rec.LeaseExpiresAt.IsZero() {
		if err := checkTime("LeaseExpiresAt", rec.LeaseExpiresAt); err != nil {
			return nil, err
		}
		e.lease = numAttr(epoch.CeilMillis(rec.LeaseExpiresAt))
	}
	if rec.PayloadHash != "" {
		e.validation = strAttr(rec.PayloadHash)
	}
	switch rec.ResultKind {
	case store.ResultValue:
	case store.ResultError:
		e.kind = strAttr(kindError)
	case store.ResultUnavailable:
		e.kind = strAttr(kindUnavailable)
	default:
		return nil, fmt.Errorf("dynamodb: record %q has an invalid result kind %v", rec.Key, rec.ResultKind)
	}
	if rec.Result != nil {
		data, gz, err := c.encodeData(rec.Result)
		if err != nil {
			return nil, err
		}
		e.data = data
		if gz {
			e.encoding = strAttr(encodingGzip)
		}
	}
	if n := c.itemSize(rec.Key, e); n > maxItemSize {
		return nil, fmt.Errorf("%w: the item would be %d bytes, over DynamoDB's limit of %d (result %d bytes, %d as stored)",
			store.ErrTooLarge, n, maxItemSize, len(rec.Result), attrSize(e.data))
	}
	return e, nil
}

// encodeData returns the data attribute for a result: gzip-compressed B
// above the compression threshold when that makes it smaller, else S when
// the result is UTF-8 JSON text (readable by AWS Powertools), else B.
func (c *config) encodeData(b []byte) (v types.AttributeValue, gzipped bool, err error) {
	z, ok, err := compress.Gzip(b, c.compressAbove)
	if err != nil {
		return nil, false, err
	}
	if ok {
		return &types.AttributeValueMemberB{Value: z}, true, nil
	}
	if utf8.Valid(b) && json.Valid(b) {
		return strAttr(string(b)), false, nil
	}
	return &types.AttributeValueMemberB{Value: b}, false, nil
}

func corrupt(attr, format string, args ...any) error {
	return &store.DecodeError{Attr: attr, Reason: fmt.Sprintf(format, args...)}
}

// DecodeItem reads an item of the store's table as a record. It reads the
// items this store writes and those AWS Powertools writes (Python and Java
// store the result as a JSON string, TypeScript as a native map, list or
// number; each reads back as JSON text). Attributes it does not know are
// ignored. An item it cannot read gives a [*store.DecodeError], which matches
// [store.ErrCorrupt], and an item in a newer format than
// [store.FormatVersion] a [*store.FormatError], which matches
// [store.ErrNewerFormat]; DecodeItem never panics.
func (s *Store) DecodeItem(item map[string]types.AttributeValue) (*store.Record, error) {
	return s.cfg.decode(item)
}

func (c *config) decode(item map[string]types.AttributeValue) (*store.Record, error) {
	// The format first: nothing else of a newer one is read.
	if err := c.checkFormat(item); err != nil {
		return nil, err
	}
	var rec store.Record
	var err error
	if c.sortKeyAttr != "" {
		if _, err = stringAttr(item, c.keyAttr, true); err != nil {
			return nil, err
		}
		rec.Key, err = stringAttr(item, c.sortKeyAttr, true)
	} else {
		rec.Key, err = stringAttr(item, c.keyAttr, true)
	}
	if err != nil {
		return nil, err
	}
	status, err := stringAttr(item, c.statusAttr, true)
	if err != nil {
		return nil, err
	}
	if rec.Status.UnmarshalText([]byte(status)) != nil {
		return nil, corrupt(c.statusAttr, "has the unknown status %.40q", status)
	}
	exp, ok, err := numberAttr(item, c.expiryAttr, epoch.MinSeconds, epoch.MaxSeconds)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, corrupt(c.expiryAttr, "is missing")
	}
	rec.ExpiresAt = time.Unix(exp, 0).UTC()
	lease, ok, err := numberAttr(item, c.leaseAttr, epoch.MinSeconds*1000, epoch.MaxSeconds*1000)
	if err != nil {
		return nil, err
	}
	if ok {
		rec.LeaseExpiresAt = time.UnixMilli(lease).UTC()
	}
	if rec.Token, err = stringAttr(item, c.tokenAttr, false); err != nil {
		return nil, err
	}
	if rec.PayloadHash, err = stringAttr(item, c.validationAttr, false); err != nil {
		return nil, err
	}
	kind, err := stringAttr(item, c.kindAttr, false)
	if err != nil {
		return nil, err
	}
	switch kind {
	case "":
		rec.ResultKind = store.ResultValue
	case kindError:
		rec.ResultKind = store.ResultError
	case kindUnavailable:
		rec.ResultKind = store.ResultUnavailable
	default:
		return nil, corrupt(c.kindAttr, "has the unknown result kind %.40q", kind)
	}
	enc, err := stringAttr(item, c.encodingAttr, false)
	if err != nil {
		return nil, err
	}
	if enc != "" && enc != encodingGzip {
		return nil, corrupt(c.encodingAttr, "has the unknown encoding %.40q", enc)
	}
	if rec.Result, err = c.decodeData(item[c.dataAttr], enc == encodingGzip); err != nil {
		return nil, err
	}
	return &rec, nil
}

// checkFormat checks the format of item (see [store.CheckFormat]): its
// format attribute, an N holding an integer, or 1 if it has none.
func (c *config) checkFormat(item map[string]types.AttributeValue) error {
	v, ok := item[c.formatAttr]
	if !ok || v == nil {
		return nil
	}
	nv, ok := v.(*types.AttributeValueMemberN)
	if !ok {
		return corrupt(c.formatAttr, "is a %s, want N", typeName(v))
	}
	n, err := strconv.ParseInt(nv.Value, 10, 64)
	if err != nil {
		return corrupt(c.formatAttr, "holds %.40q, not a record format", nv.Value)
	}
	return store.CheckFormat(c.formatAttr, n)
}

// stringAttr returns the S attribute name of item: "" if it is absent and
// not required, a [*store.DecodeError] if it is absent and required or not an S.
func stringAttr(item map[string]types.AttributeValue, name string, required bool) (string, error) {
	v, ok := item[name]
	if !ok || v == nil {
		if required {
			return "", corrupt(name, "is missing")
		}
		return "", nil
	}
	s, ok := v.(*types.AttributeValueMemberS)
	if !ok {
		return "", corrupt(name, "is a %s, want S", typeName(v))
	}
	return s.Value, nil
}

// numberAttr returns the N attribute name of item as an integer in
// [lo, hi], rounding a fractional value up; ok is false if it is absent.
func numberAttr(item map[string]types.AttributeValue, name string, lo, hi int64) (n int64, ok bool, err error) {
	v, ok := item[name]
	if !ok || v == nil {
		return 0, false, nil
	}
	nv, ok := v.(*types.AttributeValueMemberN)
	if !ok {
		return 0, false, corrupt(name, "is a %s, want N", typeName(v))
	}
	n, err = strconv.ParseInt(nv.Value, 10, 64)
	if err != nil {
		f, ferr := strconv.ParseFloat(nv.Value, 64)
		if ferr != nil || math.IsNaN(f) || math.IsInf(f, 0) || f < float64(lo) || f > float64(hi) {
			return 0, false, corrupt(name, "holds %.40q, not a time", nv.Value)
		}
		n = int64(math.Ceil(f))
	}
	if n < lo || n > hi {
		return 0, false, corrupt(name, "holds %.40q, not a time", nv.Value)
	}
	return n, true, nil
}

// decodeData returns the result bytes held by the data attribute v: nil if
// it is absent; the text of an S; the bytes of a B, gunzipped if gzipped;
// the JSON text of any other type (AWS Powertools for TypeScript stores
// results as native maps, lists and numbers).
func (c *config) decodeData(v types.AttributeValue, gzipped bool) ([]byte, error) {
	if v == nil {
		if gzipped {
			return nil, corrupt(c.encodingAttr, "marks a result as compressed, but there is none")
		}
		return nil, nil
	}
	if gzipped {
		b, ok := v.(*types.AttributeValueMemberB)
		if !ok {
			return nil, corrupt(c.dataAttr, "is a %s, but compressed results are B", typeName(v))
		}
		return gunzip(c.dataAttr, b.Value)
	}
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return []byte(v.Value), nil
	case *types.AttributeValueMemberB:
		if v.Value == nil {
			return []byte{}, nil
		}
		return v.Value, nil
	}
	j, err := toJSON(v, 0)
	if err != nil {
		return nil, &store.DecodeError{Attr: c.dataAttr, Reason: "cannot be read as JSON", Err: err}
	}
	b, err := json.Marshal(j)
	if err != nil {
		return nil, &store.DecodeError{Attr: c.dataAttr, Reason: "cannot be read as JSON", Err: err}
	}
	return b, nil
}

func gunzip(attr string, b []byte) ([]byte, error) {
	out, err := compress.Gunzip(b, maxDecompressedSize)
	if errors.Is(err, compress.ErrLimit) {
		return nil, corrupt(attr, "decompresses to more than %d bytes", maxDecompressedSize)
	}
	if err != nil {
		return nil, &store.DecodeError{Attr: attr, Reason: "is not valid gzip", Err: err}
	}
	return out, nil
}

// toJSON converts a DynamoDB value to a value encoding/json marshals as the
// JSON it stands for: M → object, L and sets → array, N → number, S →
// string, BOOL, NULL, and B → base64 string (as encoding/json writes
// []byte).
func toJSON(v types.AttributeValue, depth int) (any, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("nested deeper than %d levels", maxDepth)
	}
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return v.Value, nil
	case *types.AttributeValueMemberN:
		return jsonNumber(v.Value)
	case *types.AttributeValueMemberBOOL:
		return v.Value, nil
	case *types.AttributeValueMemberNULL:
		return nil, nil
	case *types.AttributeValueMemberB:
		return base64.StdEncoding.EncodeToString(v.Value), nil
	case *types.AttributeValueMemberM:
		m := make(map[string]any, len(v.Value))
		for k, e := range v.Value {
			j, err := toJSON(e, depth+1)
			if err != nil {
				return nil, err
			}
			m[k] = j
		}
		return m, nil
	case *types.AttributeValueMemberL:
		l := make([]any, len(v.Value))
		for i, e := range v.Value {
			j, err := toJSON(e, depth+1)
			if err != nil {
				return nil, err
			}
			l[i] = j
		}
		return l, nil
	case *types.AttributeValueMemberSS:
		return v.Value, nil
	case *types.AttributeValueMemberNS:
		l := make([]any, len(v.Value))
		for i, n := range v.Value {
			j, err := jsonNumber(n)
			if err != nil {
				return nil, err
			}
			l[i] = j
		}
		return l, nil
	case *types.AttributeValueMemberBS:
		l := make([]string, len(v.Value))
		for i, b := range v.Value {
			l[i] = base64.StdEncoding.EncodeToString(b)
		}
		return l, nil
	case nil:
		return nil, errors.New("nil attribute value")
	}
	return nil, fmt.Errorf("unsupported attribute type %s", typeName(v))
}

// jsonNumber checks that n is a JSON number literal, as DynamoDB numbers
// are.
func jsonNumber(n string) (json.Number, error) {
	if !json.Valid([]byte(n)) || n == "" || !(n[0] == '-' || (n[0] >= '0' && n[0] <= '9')) {
		return "", fmt.Errorf("%.40q is not a JSON number", n)
	}
	return json.Number(n), nil
}

func typeName(v types.AttributeValue) string {
	switch v.(type) {
	case *types.AttributeValueMemberS:
		return "S"
	case *types.AttributeValueMemberN:
		return "N"
	case *types.AttributeValueMemberB:
		return "B"
	case *types.AttributeValueMemberBOOL:
		return "BOOL"
	case *types.AttributeValueMemberNULL:
		return "NULL"
	case *types.AttributeValueMemberM:
		return "M"
	case *types.AttributeValueMemberL:
		return "L"
	case *types.AttributeValueMemberSS:
		return "SS"
	case *types.AttributeValueMemberNS:
		return "NS"
	case *types.AttributeValueMemberBS:
		return "BS"
	case nil:
		return "nil value"
	}
	return fmt.Sprintf("%T", v)
}

// sizeOf returns the size DynamoDB counts for item against its 400 KB
// limit (maxItemSize): for each attribute, the UTF-8 length of its name
// plus the size of its value. Strings count their UTF-8 length, binaries
// their length, numbers about one byte per two significant digits plus one,
// booleans and nulls one byte, and maps and lists three bytes plus one per
// element on top of their contents.
func sizeOf(item map[string]types.AttributeValue) int {
	n := 0
	for name, v := range item {
		n += len(name) + attrSize(v)
	}
	return n
}

func attrSize(v types.AttributeValue) int {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return len(v.Value)
	case *types.AttributeValueMemberB:
		return len(v.Value)
	case *types.AttributeValueMemberN:
		return numberSize(v.Value)
	case *types.AttributeValueMemberBOOL, *types.AttributeValueMemberNULL:
		return 1
	case *types.AttributeValueMemberSS:
		n := 0
		for _, s := range v.Value {
			n += len(s)
		}
		return n
	case *types.AttributeValueMemberNS:
		n := 0
		for _, s := range v.Value {
			n += numberSize(s)
		}
		return n
	case *types.AttributeValueMemberBS:
		n := 0
		for _, b := range v.Value {
			n += len(b)
		}
		return n
	case *types.AttributeValueMemberM:
		n := 3
		for k, e := range v.Value {
			n += len(k) + attrSize(e) + 1
		}
		return n
	case *types.AttributeValueMemberL:
		n := 3
		for _, e := range v.Value {
			n += attrSize(e) + 1
		}
		return n
	}
	return 0
}

// numberSize is DynamoDB's size of a number. DynamoDB keeps numbers as
// base-100 digits aligned on the decimal point (like Oracle's NUMBER):
// one byte per pair of decimal digits, without leading and trailing zero
// pairs, plus one byte, plus one more for a negative number. For example 1795390428000 is 1|79|53|90|42|80|00,
// six pairs once the trailing 00 goes, so 7 bytes. A string that is not a
// number counts as its length, which overestimates.
func numberSize(n string) int {
	mant, exp := n, 0
	if i := strings.IndexAny(n, "eE"); i >= 0 {
		e, err := strconv.Atoi(n[i+1:])
		if err != nil || e > 1000 || e < -1000 {
			return len(n)
		}
		mant, exp = n[:i], e
	}
	neg := strings.HasPrefix(mant, "-")
	mant = strings.TrimLeft(mant, "+-")
	point := strings.IndexByte(mant, '.')
	if point < 0 {
		point = len(mant)
	}
	digits := mant[:point] + strings.TrimPrefix(mant[point:], ".")
	for _, r := range digits {
		if r < '0' || r > '9' {
			return len(n)
		}
	}
	p := point + exp // digits before the decimal point
	trimmed := strings.TrimLeft(digits, "0")
	p -= len(digits) - len(trimmed)
	trimmed = strings.TrimRight(trimmed, "0")
	if trimmed == "" {
		return 1
	}
	l := len(trimmed)
	if p%2 != 0 { // pad on the left to align pairs on the point
		l++
	}
	size := (l+1)/2 + 1
	if neg {
		size++ // a negative number ends with a terminator byte
	}
	return size
}
