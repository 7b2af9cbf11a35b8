package redis

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/idemguard/idemguard/internal/compress"
	"github.com/idemguard/idemguard/internal/epoch"
	"github.com/idemguard/idemguard/store"
)

// Field names of a record's hash. The first five are AWS Powertools'
// default attribute names, with the same meanings and units; the last four
// are idemguard's own. See the package documentation.
const (
	// fieldStatus holds "INPROGRESS" or "COMPLETED".
	fieldStatus = "status"
	// fieldExpiry holds the record's expiry, epoch seconds, rounded up.
	fieldExpiry = "expiration"
	// fieldLease holds an in-progress lease's end, epoch milliseconds,
	// rounded up; absent when the claim holds until the expiry.
	fieldLease = "in_progress_expiration"
	// fieldData holds the stored result's bytes, gzip-compressed when
	// fieldEncoding says so; absent when there is no result.
	fieldData = "data"
	// fieldValidation holds the payload hash; absent when validation is off.
	fieldValidation = "validation"
	// fieldToken holds the fencing token of the claim.
	fieldToken = "token"
	// fieldResultKind holds "error" or "unavailable" for results that are
	// not values; absent for a value.
	fieldResultKind = "result_kind"
	// fieldEncoding holds "gzip" when fieldData is compressed; absent
	// otherwise.
	fieldEncoding = "data_encoding"
	// fieldFormat holds the record's format, [store.FormatVersion] of the
	// release that wrote it, in decimal; a hash without it (written before
	// formats were recorded) is format 1.
	fieldFormat = "format"
)

const (
	kindError       = "error"
	kindUnavailable = "unavailable"
)

// Values of the hash as script arguments, boxed once: converting a string
// that is not a constant to an interface allocates.
var (
	argError   any = kindError
	argUnavail any = kindUnavailable
	argGzip    any = compress.Encoding
	argFormat  any = fieldFormat
	argVersion any = int64(store.FormatVersion)
)

// encode returns the argument list of script sc on rec's record (see
// scriptArgs), allocated once at its final length: header (the script's own
// arguments), rec's expiration (fieldExpiry, epoch seconds, which it also
// returns), for a claim its token and its lease end (epoch ms, or "" for
// none), and then, as field, value pairs for HSET, the record's format and
// the fields a record has only sometimes: the lease end of a completed
// record, payload hash, result kind, encoding and result. The script
// writes the status, and the fields given by position. Times are int64s,
// which go-redis writes as decimal text, without a string of their own. encode
// refuses times it could not store, and results over the store's limit
// with an error matching [store.ErrTooLarge].
func (s *Store) encode(sc *script, rec *store.Record, claim bool, header ...any) (args []any, expiry int64, err error) {
	var kind any
	switch rec.ResultKind {
	case store.ResultValue:
	case store.ResultError:
		kind = argError
	case store.ResultUnavailable:
		kind = argUnavail
	default:
		return nil, 0, fmt.Errorf("redis: record %q has an invalid result kind %v", rec.Key, rec.ResultKind)
	}
	if err := epoch.Check("redis", "ExpiresAt", rec.ExpiresAt); err != nil {
		return nil, 0, err
	}
	hasLease := !rec.LeaseExpiresAt.IsZero()
	if hasLease {
		if err := epoch.Check("redis", "LeaseExpiresAt", rec.LeaseExpiresAt); err != nil {
			return nil, 0, err
		}
	}
	if n := len(rec.Result); n > s.maxResult {
		return nil, 0, fmt.Errorf("%w: the result is %d bytes, over the store's limit of %d", store.ErrTooLarge, n, s.maxResult)
	}
	data, zipped := rec.Result, false
	if data != nil {
		z, ok, err := compress.Gzip(data, s.compressAbove)
		if err != nil {
			return nil, 0, err
		}
		if ok {
			data, zipped = z, true
		}
	}

	n := len(header) + 1 + 2 // the expiration, the format
	if claim {
		n += 2 // the token and the lease
	}
	for _, b := range []bool{hasLease && !claim, rec.PayloadHash != "", kind != nil, zipped, data != nil} {
		if b {
			n += 2
		}
	}
	expiry = epoch.CeilSeconds(rec.ExpiresAt)
	args = s.scriptArgs(sc, rec.Key, n)
	args = append(args, header...)
	args = append(args, expiry)
	switch {
	case claim && hasLease:
		args = append(args, rec.Token, epoch.CeilMillis(rec.LeaseExpiresAt))
	case claim:
		args = append(args, rec.Token, "")
	case hasLease:
		args = append(args, fieldLease, epoch.CeilMillis(rec.LeaseExpiresAt))
	}
	args = append(args, argFormat, argVersion)
	if rec.PayloadHash != "" {
		args = append(args, fieldValidation, rec.PayloadHash)
	}
	if kind != nil {
		args = append(args, fieldResultKind, kind)
	}
	if zipped {
		args = append(args, fieldEncoding, argGzip)
	}
	if data != nil {
		args = append(args, fieldData, data)
	}
	return args, expiry, nil
}

// pexpireAt returns when the server should delete a record whose expiry is
// expiry (epoch seconds): that instant plus the grace, in epoch ms.
func (s *Store) pexpireAt(expiry int64) int64 {
	return expiry*1000 + s.expiryGrace.Milliseconds()
}

func corrupt(field, format string, args ...any) error {
	return &store.DecodeError{Attr: field, Reason: fmt.Sprintf(format, args...)}
}

// notHash is the error for a key that holds another type than a hash.
func notHash(typ string) error {
	return &store.DecodeError{Reason: fmt.Sprintf("the key holds a %s, not a hash", typ)}
}

// fields are the values of a record's hash that the store reads; others
// are ignored.
type fields struct {
	status, expiry, lease, token, validation, kind, encoding, data, format string
	// has says which were present, by the bits below.
	has uint8
}

const (
	hasStatus uint8 = 1 << iota
	hasExpiry
	hasLease
	hasEncoding
	hasData
	hasFormat
)

// set notes the hash field name's value.
func (f *fields) set(name, value string) {
	switch name {
	case fieldStatus:
		f.status, f.has = value, f.has|hasStatus
	case fieldExpiry:
		f.expiry, f.has = value, f.has|hasExpiry
	case fieldLease:
		f.lease, f.has = value, f.has|hasLease
	case fieldToken:
		f.token = value
	case fieldValidation:
		f.validation = value
	case fieldResultKind:
		f.kind = value
	case fieldEncoding:
		f.encoding, f.has = value, f.has|hasEncoding
	case fieldData:
		f.data, f.has = value, f.has|hasData
	case fieldFormat:
		f.format, f.has = value, f.has|hasFormat
	}
}

// decodeMap reads the hash h of the record key, as HGETALL returns it.
func (s *Store) decodeMap(key string, h map[string]string) (*store.Record, error) {
	var f fields
	for name, value := range h {
		f.set(name, value)
	}
	return s.decode(key, &f)
}

// decodePacked reads the record key as the claim script returns it: "R",
// then each of packedFields as "-" when absent or as its length, ":" and
// its value. The token and payload hash are copied out of v, which holds
// the result too, so that a record kept does not keep v.
func (s *Store) decodePacked(key, v string) (*store.Record, error) {
	var f fields
	rest := v[1:]
	for i := range len(packedFields) {
		if rest == "" {
			return nil, errors.New("redis: the claim script returned a truncated record")
		}
		if rest[0] == '-' {
			rest = rest[1:]
			continue
		}
		n, j := 0, 0
		for ; j < len(rest) && j < 10 && '0' <= rest[j] && rest[j] <= '9'; j++ {
			n = n*10 + int(rest[j]-'0')
		}
		if j == 0 || j == len(rest) || rest[j] != ':' || n > len(rest)-j-1 {
			return nil, errors.New("redis: the claim script returned a malformed record")
		}
		value := rest[j+1 : j+1+n]
		rest = rest[j+1+n:]
		switch i { // the order of packedFields
		case 0:
			f.status, f.has = value, f.has|hasStatus
		case 1:
			f.expiry, f.has = value, f.has|hasExpiry
		case 2:
			f.lease, f.has = value, f.has|hasLease
		case 3:
			f.token = strings.Clone(value)
		case 4:
			f.validation = strings.Clone(value)
		case 5:
			f.kind = value
		case 6:
			f.encoding, f.has = value, f.has|hasEncoding
		case 7:
			f.data, f.has = value, f.has|hasData
		case 8:
			f.format, f.has = value, f.has|hasFormat
		}
	}
	if rest != "" {
		return nil, errors.New("redis: the claim script returned a malformed record")
	}
	return s.decode(key, &f)
}

// decode reads the fields f of the record key. It never panics; fields it
// cannot read give a [*store.DecodeError], and a format newer than the
// store reads a [*store.FormatError].
func (s *Store) decode(key string, f *fields) (*store.Record, error) {
	// The format first: nothing else of a newer one is read.
	if f.has&hasFormat != 0 {
		n, err := strconv.ParseInt(f.format, 10, 64)
		if err != nil {
			return nil, corrupt(fieldFormat, "holds %.40q, not a record format", f.format)
		}
		if err := store.CheckFormat(fieldFormat, n); err != nil {
			return nil, err
		}
	}
	rec := &store.Record{Key: key}
	if f.has&hasStatus == 0 {
		return nil, corrupt(fieldStatus, "is missing")
	}
	if rec.Status.UnmarshalText([]byte(f.status)) != nil {
		return nil, corrupt(fieldStatus, "has the unknown status %.40q", f.status)
	}
	if f.has&hasExpiry == 0 {
		return nil, corrupt(fieldExpiry, "is missing")
	}
	exp, err := intField(fieldExpiry, f.expiry, epoch.MinSeconds, epoch.MaxSeconds)
	if err != nil {
		return nil, err
	}
	rec.ExpiresAt = time.Unix(exp, 0).UTC()
	if f.has&hasLease != 0 {
		lease, err := intField(fieldLease, f.lease, epoch.MinSeconds*1000, epoch.MaxSeconds*1000)
		if err != nil {
			return nil, err
		}
		rec.LeaseExpiresAt = time.UnixMilli(lease).UTC()
	}
	rec.Token = f.token
	rec.PayloadHash = f.validation
	switch f.kind {
	case "":
		rec.ResultKind = store.ResultValue
	case kindError:
		rec.ResultKind = store.ResultError
	case kindUnavailable:
		rec.ResultKind = store.ResultUnavailable
	default:
		return nil, corrupt(fieldResultKind, "has the unknown result kind %.40q", f.kind)
	}
	hasEnc, hasData := f.has&hasEncoding != 0, f.has&hasData != 0
	switch {
	case hasEnc && f.encoding != compress.Encoding:
		return nil, corrupt(fieldEncoding, "has the unknown encoding %.40q", f.encoding)
	case hasEnc && !hasData:
		return nil, corrupt(fieldEncoding, "marks a result as compressed, but there is none")
	case hasEnc:
		out, err := compress.Gunzip([]byte(f.data), s.maxResult)
		if errors.Is(err, compress.ErrLimit) {
			return nil, corrupt(fieldData, "decompresses to more than the store's limit of %d bytes", s.maxResult)
		}
		if err != nil {
			return nil, &store.DecodeError{Attr: fieldData, Reason: "is not valid gzip", Err: err}
		}
		rec.Result = out
	case hasData:
		rec.Result = []byte(f.data)
	}
	return rec, nil
}

// intField parses the integer field name's value v, which must lie in
// [lo, hi].
func intField(name, v string, lo, hi int64) (int64, error) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < lo || n > hi {
		return 0, corrupt(name, "holds %.40q, not a time", v)
	}
	return n, nil
}
