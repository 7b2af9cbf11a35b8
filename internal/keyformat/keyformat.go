// Package keyformat is the format of idempotency keys: what a selection is,
// how an input's canonical form is read, and how a key is written. Package
// guard derives each call's key with it (binding a scope, choosing what to
// select, the payload hash, steps' keys, previous secrets); this package
// holds the format those derivations share:
//
//  1. select: a JMESPath expression over the input's JSON form ([Compile],
//     with the AWS Powertools functions), or the whole input;
//  2. canonicalise: RFC 8785 JSON Canonicalization Scheme (package
//     canonjson), so that the same data gives the same bytes whatever the
//     field order or number spelling; a selection holding a string that is
//     not valid UTF-8 is refused ([ErrInvalidUTF8]), never merged with
//     another;
//  3. hash: SHA-256, or HMAC-SHA-256 under a secret, lowercase hex ([Hash]);
//  4. name: "<scope>#<hash>" ([Key]).
package keyformat

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"

	"github.com/idemguard/idemguard/internal/canonjson"
)

// HashLen is the length of a key's hash part: SHA-256, lowercase hex.
const HashLen = 2 * sha256.Size

// ErrInvalidUTF8 is the error of a selection holding a string that is not
// valid UTF-8.
var ErrInvalidUTF8 = errors.New("it holds a string that is not valid UTF-8 (or a lone UTF-16 surrogate), which RFC 8785 cannot represent")

// InputError is an input that cannot be keyed: What names the part of it
// (or the step) that failed.
type InputError struct {
	What string
	Err  error
}

func (e *InputError) Error() string { return e.What + ": " + e.Err.Error() }

// Unwrap returns the cause.
func (e *InputError) Unwrap() error { return e.Err }

// Canonical returns the RFC 8785 form of v's JSON encoding; what names v
// in errors. Strings that are not valid UTF-8 are an error.
func Canonical(v any, what string) ([]byte, error) {
	b, valid, err := canonjson.Append(nil, v)
	switch {
	case err != nil:
		return nil, &InputError{"canonicalising " + what, err}
	case !valid:
		return nil, &InputError{what, ErrInvalidUTF8}
	}
	return b, nil
}

// Key returns "<scope>#<hash of sel>" under secret (nil: plain SHA-256), in
// one allocation.
func Key(secret []byte, scope string, sel []byte) string {
	var hx [HashLen]byte
	var b strings.Builder
	b.Grow(len(scope) + 1 + len(hx))
	b.WriteString(scope)
	b.WriteByte('#')
	b.Write(hash(&hx, secret, sel))
	return b.String()
}

// Hash returns the hash of b under secret (nil: plain SHA-256).
func Hash(secret, b []byte) string {
	var hx [HashLen]byte
	return string(hash(&hx, secret, b))
}

// hash writes into hx and returns the lowercase hex SHA-256 of b, or its
// HMAC-SHA-256 under secret if there is one.
func hash(hx *[HashLen]byte, secret, b []byte) []byte {
	var sum [sha256.Size]byte
	if secret == nil {
		sum = sha256.Sum256(b)
	} else {
		sum = hmacSum(secret, b)
	}
	hex.Encode(hx[:], sum[:])
	return hx[:]
}

// hmacSum returns the HMAC-SHA-256 of b under secret. It is a function of
// its own so that hash's plain path keeps its sum on the stack.
func hmacSum(secret, b []byte) (sum [sha256.Size]byte) {
	m := hmac.New(sha256.New, secret)
	m.Write(b)
	m.Sum(sum[:0])
	return sum
}

// Missing reports whether a selection identifies nothing: null, an empty
// string, or an object or array that is empty or holds only nulls. Numbers
// and booleans, including 0 and false, are never missing.
func Missing(v any) bool {
	switch v := v.(type) {
	case nil:
		return true
	case string:
		return v == ""
	case []any:
		for _, e := range v {
			if e != nil {
				return false
			}
		}
		return true
	case map[string]any:
		for _, e := range v {
			if e != nil {
				return false
			}
		}
		return true
	}
	return false
}

// MissingCanonical reports whether canonical JSON text b is a selection
// that identifies nothing (see [Missing]): null, "", or an array or object
// that is empty or holds only nulls.
func MissingCanonical(b []byte) bool {
	switch string(b) {
	case "null", `""`, "{}", "[]":
		return true
	}
	switch b[0] {
	case '[':
		// [null,null,...]
		for i := 1; ; i += 5 {
			if i+5 > len(b) || string(b[i:i+4]) != "null" {
				return false
			}
			if b[i+4] == ']' {
				return i+5 == len(b)
			}
			if b[i+4] != ',' {
				return false
			}
		}
	case '{':
		// {"k":null,...}: skip each key, stop at the first other value.
		for i := 1; i < len(b); {
			if b[i] != '"' {
				return false
			}
			for i++; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
			i++
			if i+6 > len(b) || string(b[i:i+5]) != ":null" {
				return false
			}
			i += 5
			if b[i] == '}' {
				return i+1 == len(b)
			}
			if b[i] != ',' {
				return false
			}
			i++
		}
	}
	return false
}
