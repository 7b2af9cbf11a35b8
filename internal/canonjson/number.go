package canonjson

import (
	"errors"
	"math"
	"strconv"
)

// RFC 8785 numbers are IEEE-754 doubles written as ECMAScript's
// Number.prototype.toString writes them.

// maxExact is 2^53: integers up to it in magnitude are exact doubles.
const maxExact = 1 << 53

// appendNumber appends the finite f as ECMAScript writes it: the shortest
// decimal that reads back as f, in fixed notation from 1e-6 up to 1e21 and
// in exponent notation ("1e+21", "1.5e-7") outside; -0 is "0".
func appendNumber(out []byte, f float64) []byte {
	if f == 0 {
		return append(out, '0')
	}
	if a := math.Abs(f); a >= 1e-6 && a < 1e21 {
		return strconv.AppendFloat(out, f, 'f', -1, 64)
	}
	out = strconv.AppendFloat(out, f, 'e', -1, 64)
	// Go writes at least two exponent digits ("1e-07"), ECMAScript as few
	// as it can.
	if n := len(out); out[n-2] == '0' && out[n-4] == 'e' {
		out[n-2] = out[n-1]
		out = out[:n-1]
	}
	return out
}

func appendInt(out []byte, i int64) []byte {
	if -maxExact <= i && i <= maxExact {
		return strconv.AppendInt(out, i, 10)
	}
	return appendNumber(out, float64(i)) // rounded as a reader of the decimal would
}

func appendUint(out []byte, u uint64) []byte {
	if u <= maxExact {
		return strconv.AppendUint(out, u, 10)
	}
	return appendNumber(out, float64(u))
}

// appendFloat appends the canonical form of what encoding/json writes for
// f, a float of the given bit size: the shortest decimal of the float32 for
// 32, which is then read as a double.
func appendFloat(out []byte, f float64, bitSize int) []byte {
	if bitSize == 32 {
		var buf [32]byte
		f, _ = strconv.ParseFloat(string(strconv.AppendFloat(buf[:0], f, 'g', -1, 32)), 64)
	}
	return appendNumber(out, f)
}

// appendJSONFloat appends f as encoding/json writes it (for the ",string"
// option, where its text is kept): like ECMAScript, but with the cutoffs
// applied to the float32 for 32 bits.
func appendJSONFloat(out []byte, f float64, bitSize int) []byte {
	format := byte('f')
	if a := math.Abs(f); a != 0 && (bitSize == 64 && (a < 1e-6 || a >= 1e21) ||
		bitSize == 32 && (float32(a) < 1e-6 || float32(a) >= 1e21)) {
		format = 'e'
	}
	out = strconv.AppendFloat(out, f, format, -1, bitSize)
	if n := len(out); format == 'e' && out[n-4] == 'e' && out[n-3] == '-' && out[n-2] == '0' {
		out[n-2] = out[n-1]
		out = out[:n-1]
	}
	return out
}

// scanNumber returns the end of the RFC 8259 number at b[i:], and the
// number of digits before any fraction or exponent, or -1 if there is none
// (what follows the number is the caller's to check).
func scanNumber[T string | []byte](b T, i int) (end, intDigits int) {
	if i < len(b) && b[i] == '-' {
		i++
	}
	start := i
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && '1' <= b[i] && b[i] <= '9':
		i = skipDigits(b, i)
	default:
		return -1, 0
	}
	intDigits = i - start
	if i < len(b) && b[i] == '.' {
		if i++; i == len(b) || b[i] < '0' || b[i] > '9' {
			return -1, 0
		}
		i, intDigits = skipDigits(b, i), -1
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		if i++; i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i == len(b) || b[i] < '0' || b[i] > '9' {
			return -1, 0
		}
		i, intDigits = skipDigits(b, i), -1
	}
	return i, intDigits
}

func skipDigits[T string | []byte](b T, i int) int {
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		i++
	}
	return i
}

var errRange = errors.New("canonjson: number out of the range of a double")

// appendNumberText appends the canonical form of the number tok, which
// scanNumber accepted whole with intDigits.
func appendNumberText[T string | []byte](out []byte, tok T, intDigits int) ([]byte, error) {
	if intDigits >= 0 && intDigits <= 15 {
		// An integer of at most 15 digits is an exact double, written as is.
		if len(tok) == 2 && tok[0] == '-' && tok[1] == '0' {
			return append(out, '0'), nil
		}
		return append(out, tok...), nil
	}
	f, err := strconv.ParseFloat(string(tok), 64)
	if err != nil {
		return out, errRange // the syntax is checked: only the range can fail
	}
	return appendNumber(out, f), nil
}
