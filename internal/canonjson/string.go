package canonjson

import "unicode/utf8"

// plain marks the bytes an RFC 8785 string copies unchanged wherever they
// are: printable ASCII other than '"' and '\'.
var plain = func() (t [256]bool) {
	for b := 0x20; b < utf8.RuneSelf; b++ {
		t[b] = b != '"' && b != '\\'
	}
	return t
}()

// skipPlain returns the index of the first byte of s at or after i that is
// not plain, or len(s).
func skipPlain[T string | []byte](s T, i int) int {
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

// compareNames orders member names as RFC 8785 sorts them, by their
// UTF-16 code units. For valid UTF-8 that is the order of the bytes, except
// that the lead bytes EE and EF (of U+E000..U+FFFF) come after F0..F4 (of
// the characters above U+FFFF, which UTF-16 writes as surrogates,
// D800..DFFF). Compared byte by byte with that one change, names that are
// not valid UTF-8 have a place in the order too: only equal names compare
// equal.
func compareNames[T string | []byte](a, b T) int {
	n := min(len(a), len(b))
	i := 0
	for i < n && a[i] == b[i] {
		i++
	}
	if i == n {
		return len(a) - len(b)
	}
	return utf16Weight(a[i]) - utf16Weight(b[i])
}

func utf16Weight(b byte) int {
	if b == 0xEE || b == 0xEF {
		return int(b) + 0x100
	}
	return int(b)
}
