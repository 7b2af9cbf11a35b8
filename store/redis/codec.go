package redis

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/idemguard/idemguard/internal/compress"
	"github.com/idemguard/idemguard/internal/epoch"
	"github.com/idemguard/idemguard/store"
)

// Field names of a record's hash. The first five are AWS Powertools'
// default attribute names, with the same meanings and units; the last three
// are idemguard's own. See the package documentation.
const (
	// FieldStatus holds "INPROGRESS" or "COMPLETED".
	FieldStatus = "status"
	// FieldExpiry holds the record's expiry, epoch seconds, rounded up.
	FieldExpiry = "expiration"
	// FieldLease holds an in-progress lease's end, epoch milliseconds,
	// rounded up; absent when the claim holds until the expiry.
	FieldLease = "in_progress_expiration"
	// FieldData holds the stored result's bytes, gzip-compressed when
	// FieldEncoding says so; absent when there is no result.
	FieldData = "data"
	// FieldValidation holds the payload hash; absent when validation is off.
	FieldValidation = "validation"
	// FieldToken holds the fencing token of the claim.
	FieldToken = "token"
	// FieldResultKind holds "error" or "unavailable" for results that are
	// not values; absent for a value.
	FieldResultKind = "result_kind"
	// FieldEncoding holds "gzip" when FieldData is compressed; absent
	// otherwise.
	FieldEncoding = "data_encoding"
)

const (
	kindError       = "error"
	kindUnavailable = "unavailable"
)

// encoded is a record as the scripts write it.
type encoded struct {
	fields   []any // field, value pairs for HSET
	pexpire  int64 // when the server deletes the key, epoch ms
	expiry   int64 // FieldExpiry, epoch seconds
	dataSize int   // stored size of FieldData
}

// encode turns rec into hash fields. It refuses times it could not store,
// and results over the store's limit with an error matching
// [store.ErrTooLarge].
func (s *Store) encode(rec *store.Record) (*encoded, error) {
	if _, ok := store.ParseStatus(rec.Status.String()); !ok {
		return nil, fmt.Errorf("redis: record %q has an invalid status %v", rec.Key, rec.Status)
	}
	if err := epoch.Check("redis", "ExpiresAt", rec.ExpiresAt); err != nil {
		return nil, err
	}
	if n := len(rec.Result); n > s.maxResult {
		return nil, fmt.Errorf("%w: the result is %d bytes, over the store's limit of %d", store.ErrTooLarge, n, s.maxResult)
	}
	e := &encoded{expiry: epoch.CeilSeconds(rec.ExpiresAt)}
	e.pexpire = s.pexpireAt(e.expiry)
	e.fields = make([]any, 0, 16)
	e.fields = append(e.fields,
		FieldStatus, rec.Status.String(),
		FieldExpiry, strconv.FormatInt(e.expiry, 10),
		FieldToken, rec.Token)
	if !rec.LeaseExpiresAt.IsZero() {
		if err := epoch.Check("redis", "LeaseExpiresAt", rec.LeaseExpiresAt); err != nil {
			return nil, err
		}
		e.fields = append(e.fields, FieldLease, strconv.FormatInt(epoch.CeilMillis(rec.LeaseExpiresAt), 10))
	}
	if rec.PayloadHash != "" {
		e.fields = append(e.fields, FieldValidation, rec.PayloadHash)
	}
	switch rec.ResultKind {
	case store.ResultValue:
	case store.ResultError:
		e.fields = append(e.fields, FieldResultKind, kindError)
	case store.ResultUnavailable:
		e.fields = append(e.fields, FieldResultKind, kindUnavailable)
	default:
		return nil, fmt.Errorf("redis: record %q has an invalid result kind %v", rec.Key, rec.ResultKind)
	}
	if rec.Result != nil {
		data := rec.Result
		z, ok, err := compress.Gzip(data, s.compressAbove)
		if err != nil {
			return nil, err
		}
		if ok {
			data = z
			e.fields = append(e.fields, FieldEncoding, compress.Encoding)
		}
		e.fields = append(e.fields, FieldData, data)
		e.dataSize = len(data)
	}
	return e, nil
}

// pexpireAt returns when the server should delete a record whose expiry is
// expiry (epoch seconds): that instant plus the grace, in epoch ms.
func (s *Store) pexpireAt(expiry int64) int64 {
	return expiry*1000 + s.expiryGrace.Milliseconds()
}

// DecodeError says why a hash could not be read as a record. It matches
// [store.ErrCorrupt] with [errors.Is].
type DecodeError struct {
	// Field is the hash field at fault, or "" when the key is not a hash.
	Field string
	// Reason says what is wrong with it.
	Reason string
	// Err is the underlying error, if any (for example from gzip).
	Err error
}

// Error says which field is at fault and why.
func (e *DecodeError) Error() string {
	s := "redis: corrupt record: "
	if e.Field != "" {
		s += fmt.Sprintf("field %q ", e.Field)
	}
	s += e.Reason
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Is reports whether target is [store.ErrCorrupt].
func (e *DecodeError) Is(target error) bool { return target == store.ErrCorrupt }

// Unwrap returns the underlying error.
func (e *DecodeError) Unwrap() error { return e.Err }

func corrupt(field, format string, args ...any) error {
	return &DecodeError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// notHash is the error for a key that holds another type than a hash.
func notHash(typ string) error {
	return &DecodeError{Reason: fmt.Sprintf("the key holds a %s, not a hash", typ)}
}

// flatToMap turns an HGETALL reply returned by a script (field, value,
// field, value, ...) into a map.
func flatToMap(v []any) (map[string]string, error) {
	if len(v)%2 != 0 {
		return nil, fmt.Errorf("redis: a script returned %d elements for a hash", len(v))
	}
	m := make(map[string]string, len(v)/2)
	for i := 0; i < len(v); i += 2 {
		k, ok1 := v[i].(string)
		val, ok2 := v[i+1].(string)
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("redis: a script returned a hash element of type %T", v[i+1])
		}
		m[k] = val
	}
	return m, nil
}

// decode reads the hash h of the record key. It never panics; a hash it
// cannot read gives a [*DecodeError].
func (s *Store) decode(key string, h map[string]string) (*store.Record, error) {
	rec := &store.Record{Key: key}
	status, ok := h[FieldStatus]
	if !ok {
		return nil, corrupt(FieldStatus, "is missing")
	}
	if rec.Status, ok = store.ParseStatus(status); !ok {
		return nil, corrupt(FieldStatus, "has the unknown status %.40q", status)
	}
	exp, ok, err := intField(h, FieldExpiry, epoch.MinSeconds, epoch.MaxSeconds)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, corrupt(FieldExpiry, "is missing")
	}
	rec.ExpiresAt = time.Unix(exp, 0).UTC()
	lease, ok, err := intField(h, FieldLease, epoch.MinSeconds*1000, epoch.MaxSeconds*1000)
	if err != nil {
		return nil, err
	}
	if ok {
		rec.LeaseExpiresAt = time.UnixMilli(lease).UTC()
	}
	rec.Token = h[FieldToken]
	rec.PayloadHash = h[FieldValidation]
	switch kind := h[FieldResultKind]; kind {
	case "":
		rec.ResultKind = store.ResultValue
	case kindError:
		rec.ResultKind = store.ResultError
	case kindUnavailable:
		rec.ResultKind = store.ResultUnavailable
	default:
		return nil, corrupt(FieldResultKind, "has the unknown result kind %.40q", kind)
	}
	enc, hasEnc := h[FieldEncoding]
	data, hasData := h[FieldData]
	switch {
	case hasEnc && enc != compress.Encoding:
		return nil, corrupt(FieldEncoding, "has the unknown encoding %.40q", enc)
	case hasEnc && !hasData:
		return nil, corrupt(FieldEncoding, "marks a result as compressed, but there is none")
	case hasEnc:
		out, err := compress.Gunzip([]byte(data), s.maxResult)
		if errors.Is(err, compress.ErrLimit) {
			return nil, corrupt(FieldData, "decompresses to more than the store's limit of %d bytes", s.maxResult)
		}
		if err != nil {
			return nil, &DecodeError{Field: FieldData, Reason: "is not valid gzip", Err: err}
		}
		rec.Result = out
	case hasData:
		rec.Result = []byte(data)
	}
	return rec, nil
}

// intField returns the integer field name of h, which must lie in [lo, hi];
// ok is false if it is absent.
func intField(h map[string]string, name string, lo, hi int64) (n int64, ok bool, err error) {
	v, ok := h[name]
	if !ok {
		return 0, false, nil
	}
	n, err = strconv.ParseInt(v, 10, 64)
	if err != nil || n < lo || n > hi {
		return 0, false, corrupt(name, "holds %.40q, not a time", v)
	}
	return n, true, nil
}
