package canonjson

import (
	"math/bits"
	"unicode/utf8"
)

// plain marks the bytes an RFC 8785 string copies unchanged wherever they
// are: printable ASCII other than '"' and '\'.
var plain = func() (t [256]bool) {
	for b := 0x20; b < utf8.RuneSelf; b++ {
		t[b] = b != '"' && b != '\\'
	}
	return t
}()

// skipPlain returns the index of the first byte of s at or after i that is
// not plain, or len(s). It tests eight bytes at a time: strings are most of
// a key's bytes.
func skipPlain[T string | []byte](s T, i int) int {
	const ones, tops = 0x0101010101010101, 0x8080808080808080
	for ; i+8 <= len(s); i += 8 {
		t := s[i : i+8] // one bounds check; the compiler makes this one load
		x := uint64(t[0]) | uint64(t[1])<<8 | uint64(t[2])<<16 | uint64(t[3])<<24 |
			uint64(t[4])<<32 | uint64(t[5])<<40 | uint64(t[6])<<48 | uint64(t[7])<<56
		q, b := x^(ones*'"'), x^(ones*'\\')
		// The top bit of each byte that is < 0x20, '"', '\' or >= 0x80; the
		// lowest one set is exact.
		if m := ((x-ones*0x20)&^x | (q-ones)&^q | (b-ones)&^b | x) & tops; m != 0 {
			return i + bits.TrailingZeros64(m)/8
		}
	}
	for i < len(s) && plain[s[i]] {
		i++
	}
	return i
}

const hexDigits = "0123456789abcdef"

// appendEscape appends the escape of the ASCII byte b, which is not plain,
// as RFC 8785 and encoding/json write it.
func appendEscape(out []byte, b byte) []byte {
	switch b {
	case '"', '\\':
		return append(out, '\\', b)
	case '\b':
		return append(out, '\\', 'b')
	case '\f':
		return append(out, '\\', 'f')
	case '\n':
		return append(out, '\\', 'n')
	case '\r':
		return append(out, '\\', 'r')
	case '\t':
		return append(out, '\\', 't')
	}
	return append(out, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
}

// appendString appends s as an RFC 8785 string and reports whether s is
// valid UTF-8. Bytes that are not are copied as they are, so that different
// strings stay different (see the package documentation).
func appendString[T string | []byte](out []byte, s T) ([]byte, bool) {
	return appendQuoted(out, s, false)
}

// appendQuoted appends s as a JSON string, as RFC 8785 writes it or, with
// html, as encoding/json does by default: '<', '>', '&', U+2028 and U+2029
// escaped too. It reports whether s is valid UTF-8; invalid bytes are
// copied as they are (encoding/json writes U+FFFD instead).
func appendQuoted[T string | []byte](out []byte, s T, html bool) ([]byte, bool) {
	valid := true
	out = append(out, '"')
	for i := 0; ; {
		j := skipPlain(s, i)
		if html {
			for k := i; k < j; k++ {
				if c := s[k]; c == '<' || c == '>' || c == '&' {
					j = k
					break
				}
			}
		}
		out = append(out, s[i:j]...)
		if j == len(s) {
			return append(out, '"'), valid
		}
		c := s[j]
		if c < utf8.RuneSelf {
			if html && (c == '<' || c == '>' || c == '&') {
				out = append(out, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			} else {
				out = appendEscape(out, c)
			}
			i = j + 1
			continue
		}
		var buf [utf8.UTFMax]byte
		r, size := utf8.DecodeRune(buf[:copy(buf[:], s[j:])])
		switch {
		case r == utf8.RuneError && size == 1:
			valid = false
		case html && (r == '\u2028' || r == '\u2029'):
			out = append(out, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i = j + size
			continue
		}
		out = append(out, s[j:j+size]...)
		i = j + size
	}
}

// compareNames orders member names as RFC 8785 sorts them: by their UTF-16
// code units. Names that are not valid UTF-8 (ok false), which RFC 8785
// cannot sort, come after the others, in byte order. The order is total:
// only equal names compare equal.
func compareNames[T string | []byte](a T, aok bool, b T, bok bool) int {
	switch {
	case aok && bok:
		return compareUTF16(a, b)
	case aok != bok:
		if aok {
			return -1
		}
		return 1
	}
	return compareBytes(a, b)
}

func compareBytes[T string | []byte](a, b T) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return int(a[i]) - int(b[i])
		}
	}
	return len(a) - len(b)
}

// compareUTF16 orders valid UTF-8 strings by their UTF-16 code units.
func compareUTF16[T string | []byte](a, b T) int {
	n := min(len(a), len(b))
	i := 0
	for i < n && a[i] == b[i] {
		i++
	}
	if i == n {
		return len(a) - len(b)
	}
	if a[i] < utf8.RuneSelf || b[i] < utf8.RuneSelf {
		return int(a[i]) - int(b[i])
	}
	// Two different non-ASCII characters with a common prefix: byte order
	// is code point order, which is UTF-16 order except that U+E000..U+FFFF
	// sort after the surrogate pairs of U+10000 and above.
	s := i
	for s > 0 && a[s]&0xC0 == 0x80 {
		s--
	}
	var ra, rb [utf8.UTFMax]byte
	x, _ := utf8.DecodeRune(ra[:copy(ra[:], a[s:])])
	y, _ := utf8.DecodeRune(rb[:copy(rb[:], b[s:])])
	return int(utf16Order(x)) - int(utf16Order(y))
}

func utf16Order(r rune) rune {
	if r >= 0xE000 && r <= 0xFFFF {
		return r + 0x200000
	}
	return r
}
