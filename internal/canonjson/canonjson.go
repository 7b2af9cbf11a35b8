// Package canonjson writes the canonical JSON that idempotency keys hash:
// the RFC 8785 (JSON Canonicalization Scheme) form of a Go value's
// encoding/json encoding, or of a JSON text.
//
// # Output
//
// The output has no white space; object members are sorted by the UTF-16
// code units of their names; strings escape only '"', '\' (as \" and \\)
// and the control characters (\b, \f, \n, \r, \t, else \u00xx, lowercase),
// everything else is written as its UTF-8 bytes; literals are unchanged.
//
// For a value v whose strings are valid UTF-8, Append writes exactly what
// RFC 8785 makes of json.Marshal(v), without calling either: it follows
// encoding/json's rules for every type encoding/json accepts (struct tags
// and field promotion, omitempty and omitzero, the ",string" option,
// MarshalJSON and MarshalText methods and their precedence, []byte as
// base64, map keys of string and integer kinds or with MarshalText). The
// output of a MarshalJSON method is canonicalised as JSON text. The rules
// are those of encoding/json's classic implementation, the default; they
// hold in every build, so that keys do not depend on it, also where
// GOEXPERIMENT=jsonv2 changes encoding/json (which then names string-kind
// map keys by their MarshalText, reads tag names with quotes or
// backslashes, and accepts map keys of other kinds).
//
// # Numbers
//
// RFC 8785 numbers are IEEE-754 doubles, written as ECMAScript's
// Number.prototype.toString writes them: the shortest decimal that reads
// back as the same double, in fixed notation from 1e-6 to 1e21 and in
// exponent notation outside ("1e+21", "1e-7"); -0 is 0. Integers beyond
// 2^53 therefore lose precision (9007199254740993 is written
// 9007199254740992), and a float32 is the double nearest the shortest
// decimal encoding/json writes for it. A number beyond the range of a
// double (1e400) is an error, and so, as in encoding/json, are NaN and the
// infinities. A ",string" field is a string holding encoding/json's text of
// the number, unchanged.
//
// # Invalid strings
//
// RFC 8785 has no form for a string that is not Unicode: invalid UTF-8, or
// in JSON text an escaped UTF-16 surrogate that is not half of a pair
// ("\ud800"). encoding/json replaces each invalid byte with U+FFFD, which
// would make different inputs canonicalise alike. Here such a string is
// written verbatim instead: its invalid bytes as they are, a lone surrogate
// as the three bytes of its generalised UTF-8 (WTF-8) encoding, the rest as
// usual; and the result reports valid false. Such output is not RFC 8785
// and not UTF-8, but two inputs that differ in such strings still give
// different outputs; and utf8.Valid is false for any value in the output
// that contains such a string (as a value or a member name), true for any
// value that does not. (A string is taken as the bytes it stands for: the
// text "\ud800" and the raw bytes ED A0 80 are the same string.) Members
// are sorted by comparing their names' bytes, but with the lead bytes EE
// and EF after F0..F4: for valid UTF-8 that is the order of UTF-16 code
// units, and it orders invalid names too.
//
// # Errors
//
// Append fails where json.Marshal does (unsupported types and values,
// methods that fail or return invalid JSON) and where RFC 8785 rejects
// json.Marshal's output: duplicate member names (which MarshalJSON methods
// and map keys with MarshalText can produce), numbers out of range, and
// nesting of arrays and objects deeper than 10000. Instead of
// encoding/json's cycle detection it also fails on a value more than 10000
// pointers and interfaces deep. AppendText fails on anything that is not
// JSON text, and on what RFC 8785 rejects in JSON text, but not on
// invalid strings.
package canonjson

import "sync"

var pool = sync.Pool{New: func() any { return new(encoder) }}

// maxPooled bounds the buffers a pooled encoder keeps.
const maxPooled = 64 << 10

func get(dst []byte) *encoder {
	e := pool.Get().(*encoder)
	e.out, e.valid, e.depth, e.hops = dst, true, 0, 0
	return e
}

func put(e *encoder) {
	e.out = nil
	p := &e.text
	if cap(e.members) > 1024 || cap(e.scratch) > maxPooled || cap(p.lits) > maxPooled ||
		cap(p.strs) > maxPooled || cap(p.stack) > 1024 || cap(p.nodes) > 4096 {
		return
	}
	pool.Put(e)
}

// Append appends the RFC 8785 canonical form of v's encoding/json encoding
// to dst and returns the extended buffer. valid is false if a string in it
// was not Unicode (invalid UTF-8, or a lone surrogate in JSON text from a
// MarshalJSON method) and was written verbatim (see the package
// documentation). On error out is dst.
func Append(dst []byte, v any) (out []byte, valid bool, err error) {
	e := get(dst)
	defer put(e)
	if err := e.any(v); err != nil {
		return dst, false, err
	}
	return e.out, e.valid, nil
}

// AppendText appends the RFC 8785 canonical form of the JSON text to dst
// and returns the extended buffer. valid is false if a string in it was not
// valid UTF-8 or held a lone surrogate, and was written verbatim (see the
// package documentation). It fails on text that is not JSON, with duplicate
// member names, numbers out of range or nesting deeper than 10000; on error
// out is dst.
func AppendText(dst, text []byte) (out []byte, valid bool, err error) {
	e := get(dst)
	defer put(e)
	return e.text.canonical(dst, text, 0)
}

// Select returns the value that the chain of member names selects from the
// canonical text (as Append and AppendText write it): the value of member
// fields[0], then of its member fields[1], and so on; with no fields, all
// of it. It returns nil if a member is absent or a value on the way is not
// an object. The result is a subslice of canonical; on text that is not
// canonical JSON it is unspecified (but Select does not panic).
func Select(canonical []byte, fields []string) []byte {
	v := canonical
	var buf [64]byte
	for _, f := range fields {
		name, _ := appendString(buf[:0], f) // the member name as it is written
		v = member(v, name)
		if v == nil {
			return nil
		}
	}
	return v
}

// member returns the value of the member whose quoted name is name in the
// canonical object obj, or nil.
func member(obj, name []byte) []byte {
	if len(obj) < 2 || obj[0] != '{' {
		return nil
	}
	for i := 1; i < len(obj) && obj[i] == '"'; {
		k := i
		i = skip(obj, i)
		if i >= len(obj) || obj[i] != ':' {
			return nil
		}
		match := string(obj[k:i]) == string(name)
		i++
		end := skip(obj, i)
		if match {
			return obj[i:end:end]
		}
		if end >= len(obj) || obj[end] != ',' {
			return nil
		}
		i = end + 1
	}
	return nil
}

// skip returns the index after the canonical value (or member name) at
// b[i], or len(b) if it does not end.
func skip(b []byte, i int) int {
	depth := 0
	for ; i < len(b); i++ {
		switch b[i] {
		case '"':
			for i++; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
		case '{', '[':
			depth++
			continue
		case '}', ']':
			if depth == 0 {
				return i // the end of the object around the value
			}
			depth--
		case ',', ':':
			if depth == 0 {
				return i
			}
			continue
		default:
			continue
		}
		if depth == 0 {
			return min(i+1, len(b))
		}
	}
	return len(b)
}
