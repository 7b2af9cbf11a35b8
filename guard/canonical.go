package guard

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"math/bits"
	"slices"
	"strconv"
	"sync"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/gowebpki/jcs"
)

// RFC 8785 canonicalisation, on the key-derivation hot path.
//
// github.com/gowebpki/jcs is the reference: it builds a tree of strings for
// every document and allocates for every token. canon is a single-pass
// canonicaliser that writes into reusable buffers. It handles the documents
// key derivation sees; on anything else it gives up, and jcs.Transform
// decides, so that the output, and whether there is an error at all, are
// always jcs's. canon therefore only has to be right when it succeeds: it
// may never accept a document jcs rejects, nor produce different bytes
// (key_internal_test.go checks both against jcs, also by fuzzing).

// maxCanonDepth is jcs's nesting limit.
const maxCanonDepth = 10000

// canon is a reusable canonicaliser. Get one with getCanon and return it
// with putCanon; what it returns is valid until then.
type canon struct {
	in      []byte
	pos     int
	depth   int
	out     []byte   // the canonical text
	doc     []byte   // a canonical text kept while out is reused (see inputForms)
	keys    []byte   // decoded object keys that contained escapes
	members []member // object members awaiting sorting, a stack across nesting levels
	tmp     []byte   // scratch for reordering members
	moved   int      // bytes copied reordering members; bounded by budget
	budget  int      // above it, reordering gives up (jcs is linear)
	// canonicalMode: the encoder (jsonenc.go) writes RFC 8785 rather than
	// exact JSON.
	canonicalMode bool
	enc           bytes.Buffer
	encoder       *json.Encoder // writes to enc
}

// member is one object member written to out[start:end] as "key":value.
// Its decoded key is in[ks:ke], or keys[ks:ke] if it had escapes. (No
// pointers: appending members needs no write barriers.)
type member struct {
	ks, ke, start, end int
	pre                uint64 // the key's first eight bytes, big-endian, zero-padded; set by sortMembers
	inKeys             bool
}

// keyPrefix is member.pre for key k.
func keyPrefix[T string | []byte](k T) uint64 {
	if len(k) >= 8 {
		t := k[:8] // one bounds check, and one load
		return uint64(t[0])<<56 | uint64(t[1])<<48 | uint64(t[2])<<40 | uint64(t[3])<<32 |
			uint64(t[4])<<24 | uint64(t[5])<<16 | uint64(t[6])<<8 | uint64(t[7])
	}
	var p uint64
	for i := range len(k) {
		p |= uint64(k[i]) << (56 - 8*i)
	}
	return p
}

// compareMembers orders members as compareUTF16 orders their keys, mostly
// from their prefixes: where those differ first in an ASCII byte (or in
// padding, which sorts as the end of the key), that byte decides.
func (c *canon) compareMembers(a, b *member) int {
	if x := a.pre ^ b.pre; x != 0 {
		shift := 56 - bits.LeadingZeros64(x)&^7
		ba, bb := byte(a.pre>>shift), byte(b.pre>>shift)
		if ba < utf8.RuneSelf && bb < utf8.RuneSelf {
			return int(ba) - int(bb)
		}
	}
	return compareUTF16(c.key(a), c.key(b))
}

func (c *canon) key(m *member) []byte {
	if m.inKeys {
		return c.keys[m.ks:m.ke]
	}
	return c.in[m.ks:m.ke]
}

var canonPool = sync.Pool{New: func() any {
	c := &canon{}
	c.encoder = json.NewEncoder(&c.enc)
	// Escaping <, > and & changes nothing after canonicalisation.
	c.encoder.SetEscapeHTML(false)
	return c
}}

func getCanon() *canon { return canonPool.Get().(*canon) }

// maxPooledBuffer bounds the buffers a pooled canon keeps.
const maxPooledBuffer = 64 << 10

func putCanon(c *canon) {
	if cap(c.out) > maxPooledBuffer || cap(c.doc) > maxPooledBuffer || cap(c.keys) > maxPooledBuffer || cap(c.tmp) > maxPooledBuffer ||
		c.enc.Cap() > maxPooledBuffer || cap(c.members) > 1024 {
		return
	}
	c.in = nil
	canonPool.Put(c)
}

// marshal is json.Marshal(v), into c's buffer.
func (c *canon) marshal(v any) ([]byte, error) {
	c.enc.Reset()
	if err := c.encoder.Encode(v); err != nil {
		return nil, err
	}
	b := c.enc.Bytes()
	return b[:len(b)-1], nil // without Encode's newline
}

// canonical returns the RFC 8785 form of the JSON text b, exactly as
// jcs.Transform does.
func (c *canon) canonical(b []byte) ([]byte, error) {
	if c.transform(b) {
		return c.out, nil
	}
	return jcs.Transform(b)
}

// canonicalValue returns the RFC 8785 form of v's JSON encoding.
func (c *canon) canonicalValue(v any) ([]byte, error) {
	if c.encodeCanonical(v) {
		return c.out, nil
	}
	// Not c.marshal: c.enc may hold the input (see inputForms).
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return c.canonical(b)
}

func (c *canon) reset(in []byte) {
	c.in, c.pos, c.depth = in, 0, 0
	c.out, c.keys, c.members = c.out[:0], c.keys[:0], c.members[:0]
	c.moved, c.budget = 0, 8*len(in)+4096
}

// transform canonicalises b into c.out, reporting false if it cannot.
func (c *canon) transform(b []byte) bool {
	c.reset(b)
	if !c.value() {
		return false
	}
	c.skipSpace()
	return c.pos == len(c.in)
}

func (c *canon) skipSpace() {
	for c.pos < len(c.in) {
		switch c.in[c.pos] {
		case ' ', '\n', '\r', '\t':
			c.pos++
		default:
			return
		}
	}
}

func (c *canon) value() bool {
	c.skipSpace()
	if c.pos >= len(c.in) {
		return false
	}
	switch c.in[c.pos] {
	case '{':
		c.pos++
		return c.object()
	case '[':
		c.pos++
		return c.array()
	case '"':
		c.pos++
		_, _, _, ok := c.str(false)
		return ok
	}
	return c.scalar()
}

func (c *canon) array() bool {
	if c.depth++; c.depth > maxCanonDepth {
		return false
	}
	c.out = append(c.out, '[')
	c.skipSpace()
	if c.pos < len(c.in) && c.in[c.pos] == ']' {
		c.pos++
	} else {
		for {
			if !c.value() {
				return false
			}
			c.skipSpace()
			if c.pos >= len(c.in) {
				return false
			}
			b := c.in[c.pos]
			c.pos++
			if b == ']' {
				break
			}
			if b != ',' {
				return false
			}
			c.out = append(c.out, ',')
		}
	}
	c.out = append(c.out, ']')
	c.depth--
	return true
}

func (c *canon) object() bool {
	if c.depth++; c.depth > maxCanonDepth {
		return false
	}
	open := len(c.out)
	c.out = append(c.out, '{')
	base := len(c.members)
	c.skipSpace()
	if c.pos < len(c.in) && c.in[c.pos] == '}' {
		c.pos++
	} else {
		for {
			c.skipSpace()
			if c.pos >= len(c.in) || c.in[c.pos] != '"' {
				return false
			}
			c.pos++
			if len(c.members) > base {
				c.out = append(c.out, ',')
			}
			m := member{start: len(c.out)}
			var ok bool
			if m.ks, m.ke, m.inKeys, ok = c.str(true); !ok {
				return false
			}
			c.skipSpace()
			if c.pos >= len(c.in) || c.in[c.pos] != ':' {
				return false
			}
			c.pos++
			c.out = append(c.out, ':')
			if !c.value() {
				return false
			}
			m.end = len(c.out)
			c.members = append(c.members, m)
			c.skipSpace()
			if c.pos >= len(c.in) {
				return false
			}
			b := c.in[c.pos]
			c.pos++
			if b == '}' {
				break
			}
			if b != ',' {
				return false
			}
		}
		if !c.sortMembers(open, c.members[base:]) {
			return false
		}
		c.members = c.members[:base]
	}
	c.out = append(c.out, '}')
	c.depth--
	return true
}

// sortMembers puts the members of the object opened at out[open] in
// UTF-16 order of their keys, reporting false on a duplicate key.
func (c *canon) sortMembers(open int, ms []member) bool {
	// Members in order (as encoding/json writes maps) cost one comparison
	// each.
	sorted := true
	for i := 1; i < len(ms) && sorted; i++ {
		d := compareUTF16(c.key(&ms[i-1]), c.key(&ms[i]))
		if d == 0 {
			return false
		}
		sorted = d < 0
	}
	if sorted {
		return true
	}
	for i := range ms {
		ms[i].pre = keyPrefix(c.key(&ms[i]))
	}
	moved := false
	if len(ms) <= 12 {
		// Insertion sort, which also finds a duplicate: it is the last
		// member compared with.
		for i := 1; i < len(ms); i++ {
			m := ms[i]
			j := i
			d := c.compareMembers(&ms[j-1], &m)
			for ; d > 0; d = c.compareMembers(&ms[j-1], &m) {
				ms[j] = ms[j-1]
				if j--; j == 0 {
					break
				}
			}
			if d == 0 {
				return false
			}
			if j != i {
				ms[j] = m
				moved = true
			}
		}
	} else {
		moved = !slices.IsSortedFunc(ms, func(a, b member) int { return c.compareMembers(&a, &b) })
		if moved {
			slices.SortFunc(ms, func(a, b member) int { return c.compareMembers(&a, &b) })
		}
		for i := 1; i < len(ms); i++ {
			if c.compareMembers(&ms[i-1], &ms[i]) == 0 {
				return false
			}
		}
	}
	if !moved {
		return true
	}
	body := open + 1
	if c.moved += len(c.out) - body; c.moved > c.budget {
		return false
	}
	c.tmp = append(c.tmp[:0], c.out[body:]...)
	c.out = c.out[:body]
	for i, m := range ms {
		if i > 0 {
			c.out = append(c.out, ',')
		}
		c.out = append(c.out, c.tmp[m.start-body:m.end-body]...)
	}
	return true
}

// compareUTF16 orders decoded strings (valid UTF-8) by their UTF-16 code
// units, as RFC 8785 sorts object keys.
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
	// Inside or at the start of two different non-ASCII characters with a
	// common prefix: byte order is code point order, which is UTF-16 order
	// except that U+E000..U+FFFF sort after the surrogate pairs.
	s := i
	for s > 0 && a[s]&0xC0 == 0x80 {
		s--
	}
	var ra, rb [utf8.UTFMax]byte
	copy(ra[:], a[s:])
	copy(rb[:], b[s:])
	x, _ := utf8.DecodeRune(ra[:])
	y, _ := utf8.DecodeRune(rb[:])
	return int(utf16Order(x)) - int(utf16Order(y))
}

func utf16Order(r rune) rune {
	if r >= 0xE000 && r <= 0xFFFF {
		return r + 0x200000
	}
	return r
}

// plain marks the bytes a string copies unchanged: printable ASCII other
// than '"' and '\'.
var plain = func() (t [256]bool) {
	for b := 0x20; b < 0x80; b++ {
		t[b] = b != '"' && b != '\\'
	}
	return t
}()

// specialBytes marks (with its top bit) each byte of x, eight bytes of a
// string, that is not plain; the lowest mark is exact.
func specialBytes(x uint64) uint64 {
	const ones, tops = 0x0101010101010101, 0x8080808080808080
	q := x ^ (ones * '"')
	b := x ^ (ones * '\\')
	return ((x-ones*0x20) & ^x | (q-ones) & ^q | (b-ones) & ^b | x) & tops
}

// str reads a string after its opening quote and writes its canonical
// form. For a key it also returns where the decoded string is: in[ks:ke],
// or keys[ks:ke] if inKeys.
func (c *canon) str(key bool) (ks, ke int, inKeys, ok bool) {
	in := c.in
	c.out = append(c.out, '"')
	start := c.pos
	escaped := false // key: the decoded form is in c.keys[kstart:]
	kstart := len(c.keys)
	for {
		i := c.pos
		for i+8 <= len(in) { // eight bytes at a time
			if m := specialBytes(binary.LittleEndian.Uint64(in[i:])); m != 0 {
				i += bits.TrailingZeros64(m) / 8
				break
			}
			i += 8
		}
		for i < len(in) && plain[in[i]] {
			i++
		}
		c.out = append(c.out, in[c.pos:i]...)
		if escaped {
			c.keys = append(c.keys, in[c.pos:i]...)
		}
		c.pos = i
		if i >= len(in) {
			return 0, 0, false, false
		}
		switch b := in[i]; {
		case b == '"':
			c.pos++
			c.out = append(c.out, '"')
			if escaped {
				return kstart, len(c.keys), true, true
			}
			return start, i, false, true
		case b == '\\':
			if key && !escaped {
				escaped = true
				c.keys = append(c.keys, in[start:i]...)
			}
			r, n, ok := unescape(in[c.pos:])
			if !ok {
				return 0, 0, false, false
			}
			c.pos += n
			c.out = appendCanonicalRune(c.out, r)
			if escaped {
				c.keys = utf8.AppendRune(c.keys, r)
			}
		case b < 0x20:
			return 0, 0, false, false
		default: // non-ASCII: copied if it is valid UTF-8
			r, size := utf8.DecodeRune(in[i:])
			if r == utf8.RuneError && size <= 1 {
				return 0, 0, false, false
			}
			c.out = append(c.out, in[i:i+size]...)
			if escaped {
				c.keys = append(c.keys, in[i:i+size]...)
			}
			c.pos += size
		}
	}
}

// unescape decodes the escape sequence b starts with (at its backslash)
// and returns the character and the sequence's length. An escaped surrogate
// must be a high one followed by an escaped low one; encoding/json would
// replace anything else with U+FFFD, which jcs and the fast decoder leave
// to encoding/json.
func unescape(b []byte) (rune, int, bool) {
	if len(b) < 2 || b[0] != '\\' {
		return 0, 0, false
	}
	switch e := b[1]; e {
	case '"', '\\', '/':
		return rune(e), 2, true
	case 'b':
		return '\b', 2, true
	case 'f':
		return '\f', 2, true
	case 'n':
		return '\n', 2, true
	case 'r':
		return '\r', 2, true
	case 't':
		return '\t', 2, true
	case 'u':
		r := hex4(b[2:])
		if r < 0 {
			return 0, 0, false
		}
		if !utf16.IsSurrogate(r) {
			return r, 6, true
		}
		if r > 0xDBFF || len(b) < 12 || b[6] != '\\' || b[7] != 'u' {
			return 0, 0, false
		}
		lo := hex4(b[8:])
		if lo < 0xDC00 || lo > 0xDFFF {
			return 0, 0, false
		}
		return utf16.DecodeRune(r, lo), 12, true
	}
	return 0, 0, false
}

// hex4 returns the value of the four hex digits b starts with, or -1.
func hex4(b []byte) rune {
	if len(b) < 4 {
		return -1
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return -1
		}
		r = r<<4 | rune(c)
	}
	return r
}

// appendCanonicalRune appends r as RFC 8785 writes it inside a string.
func appendCanonicalRune(out []byte, r rune) []byte {
	switch r {
	case '"':
		return append(out, '\\', '"')
	case '\\':
		return append(out, '\\', '\\')
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
	if r < 0x20 {
		const hexDigits = "0123456789abcdef"
		return append(out, '\\', 'u', '0', '0', hexDigits[r>>4], hexDigits[r&0xF])
	}
	return utf8.AppendRune(out, r)
}

// appendCanonicalString appends s as an RFC 8785 string, reporting false
// if s is not valid UTF-8.
func appendCanonicalString[T string | []byte](out []byte, s T) ([]byte, bool) {
	out = append(out, '"')
	for i := 0; i < len(s); {
		j := i
		for j+8 <= len(s) { // eight bytes at a time
			t := s[j : j+8] // one bounds check, and one load
			x := uint64(t[0]) | uint64(t[1])<<8 | uint64(t[2])<<16 | uint64(t[3])<<24 |
				uint64(t[4])<<32 | uint64(t[5])<<40 | uint64(t[6])<<48 | uint64(t[7])<<56
			if m := specialBytes(x); m != 0 {
				j += bits.TrailingZeros64(m) / 8
				break
			}
			j += 8
		}
		for j < len(s) && plain[s[j]] {
			j++
		}
		out = append(out, s[i:j]...)
		if j == len(s) {
			break
		}
		if b := s[j]; b < utf8.RuneSelf {
			out = appendCanonicalRune(out, rune(b))
			i = j + 1
			continue
		}
		r, size := utf8.DecodeRune([]byte(s[j:min(j+utf8.UTFMax, len(s))]))
		if r == utf8.RuneError && size <= 1 {
			return out, false
		}
		out = append(out, s[j:j+size]...)
		i = j + size
	}
	return append(out, '"'), true
}

// scalar reads a literal or a number: the characters up to the next ',',
// ']', '}' or white space, as jcs delimits them.
func (c *canon) scalar() bool {
	start := c.pos
	i := start
scan:
	for ; i < len(c.in); i++ {
		switch c.in[i] {
		case ',', ']', '}', ' ', '\n', '\r', '\t':
			break scan
		}
	}
	tok := c.in[start:i]
	c.pos = i
	switch string(tok) {
	case "true", "false", "null":
		c.out = append(c.out, tok...)
		return true
	}
	switch numberToken(tok) {
	case notNumber:
		return false
	case smallInteger:
		// At most 15 digits: exact, and written as is.
		if string(tok) == "-0" {
			tok = tok[1:]
		}
		c.out = append(c.out, tok...)
		return true
	case shortDecimal:
		if out, ok := appendShortDecimal(c.out, tok); ok {
			c.out = out
			return true
		}
	}
	f, err := strconv.ParseFloat(string(tok), 64)
	if err != nil {
		return false
	}
	c.out = appendES6Number(c.out, f)
	return true
}

// Kinds of number tokens.
const (
	notNumber    = iota // not an RFC 8259 number
	smallInteger        // an integer of at most 15 digits
	shortDecimal        // digits with a fraction and no exponent
	otherNumber
)

// numberToken classifies t.
func numberToken(t []byte) int {
	end, digits, frac, exp, ok := scanNumber(t, 0)
	switch {
	case !ok || end != len(t):
		return notNumber
	case exp:
		return otherNumber
	case frac:
		return shortDecimal
	case digits <= 15:
		return smallInteger
	}
	return otherNumber
}

// scanNumber reads the RFC 8259 number b[i:] starts with and returns its
// end, the digits of its integer part, and whether it has a fraction and an
// exponent. What follows it is the caller's to check.
func scanNumber(b []byte, i int) (end, digits int, frac, exp, ok bool) {
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
		return 0, 0, false, false, false
	}
	digits = i - start
	if i < len(b) && b[i] == '.' {
		frac = true
		if i++; i == len(b) || b[i] < '0' || b[i] > '9' {
			return 0, 0, false, false, false
		}
		i = skipDigits(b, i)
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		exp = true
		if i++; i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i == len(b) || b[i] < '0' || b[i] > '9' {
			return 0, 0, false, false, false
		}
		i = skipDigits(b, i)
	}
	return i, digits, frac, exp, true
}

func skipDigits(b []byte, i int) int {
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		i++
	}
	return i
}

// appendShortDecimal appends the canonical form of the decimal t ("-"?
// digits "." digits, valid) if it has at most 15 significant digits and is
// 0 or at least 1e-6 in magnitude. Such a decimal is the shortest text that
// reads back as its double (any two decimals of at most 15 digits read as
// different doubles), so ECMAScript writes its digits unchanged, in fixed
// notation, without trailing zeros.
func appendShortDecimal(out, t []byte) ([]byte, bool) {
	neg := t[0] == '-'
	if neg {
		t = t[1:]
	}
	dot := bytes.IndexByte(t, '.')
	ip, fp := t[:dot], t[dot+1:]
	for len(fp) > 0 && fp[len(fp)-1] == '0' {
		fp = fp[:len(fp)-1]
	}
	if string(ip) == "0" {
		if len(fp) == 0 {
			return append(out, '0'), true
		}
		zeros := 0
		for fp[zeros] == '0' {
			zeros++
		}
		if zeros > 5 || len(fp)-zeros > 15 {
			return out, false
		}
	} else if len(ip)+len(fp) > 15 {
		return out, false
	}
	if neg {
		out = append(out, '-')
	}
	out = append(out, ip...)
	if len(fp) > 0 {
		out = append(out, '.')
		out = append(out, fp...)
	}
	return out, true
}

var pow10 = [...]float64{1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6}

// appendShortNumber appends f (1e-6 <= f < 2^50) in fixed notation if it
// is an integer, or a decimal of at most six fractional digits, and reports
// whether it did. For such an f this is ECMAScript's text: the fewest
// fractional digits k whose decimal reads back as f are the fewest
// significant digits (f < 2^53), and with f*10^k < 2^50 the product's
// rounding error (under 1/16) and the spread of decimals that read back as f
// (under 1/8) leave round(f*10^k) the only candidate, exactly checked by
// one correctly rounded division. It spares strconv's shortest-float search
// for the prices and rates a key usually holds.
func appendShortNumber(out []byte, f float64) ([]byte, bool) {
	for k, p := range pow10 {
		x := f * p
		if x >= 1<<50 {
			break
		}
		m := math.Round(x)
		if m/p != f {
			continue
		}
		start := len(out)
		out = strconv.AppendInt(out, int64(m), 10)
		if k == 0 {
			return out, true
		}
		n := len(out) - start // digits; the last k are the fraction
		if n <= k {
			// 0.000ddd: "0." and k-n zeros before the digits.
			out = append(out, "0.000000"[:2+k-n]...)
			copy(out[start+2+k-n:], out[start:start+n])
			copy(out[start:], "0.000000"[:2+k-n])
			return out, true
		}
		out = append(out, 0)
		copy(out[start+n-k+1:], out[start+n-k:start+n])
		out[start+n-k] = '.'
		return out, true
	}
	return out, false
}

// appendES6Number appends f (finite) as ECMAScript's Number.prototype.toString
// writes it, which is RFC 8785's number format; it is jcs.NumberToJSON.
func appendES6Number(out []byte, f float64) []byte {
	if f == 0 {
		return append(out, '0')
	}
	if f < 0 {
		out = append(out, '-')
		f = -f
	}
	if f >= 1e-6 && f < 1<<50 {
		if out, ok := appendShortNumber(out, f); ok {
			return out
		}
	}
	format := byte('e')
	if f < 1e21 && f >= 1e-6 {
		format = 'f'
	}
	start := len(out)
	out = strconv.AppendFloat(out, f, format, -1, 64)
	if format == 'e' {
		// Go writes "1e+09" where ECMAScript writes "1e+9".
		if e := bytes.IndexByte(out[start:], 'e'); e > 0 && out[start+e+2] == '0' {
			out = append(out[:start+e+2], out[start+e+3:]...)
		}
	}
	return out
}

// missingCanonical reports whether canonical JSON text b is a selection
// that identifies nothing (see missing): null, "", or an array or object
// that is empty or holds only nulls.
func missingCanonical(b []byte) bool {
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

var nullText = []byte("null")[:4:4]

// selectFields returns the value that the field chain selects from the
// canonical text doc, as JMESPath would: null where a field is absent or a
// value is not an object.
func selectFields(doc []byte, fields []string) []byte {
	v := doc
	for _, f := range fields {
		if v[0] != '{' {
			return nullText
		}
		if v = memberValue(v, f); v == nil {
			return nullText
		}
	}
	return v
}

// memberValue returns the value of the member named name (which needs no
// escaping) of the canonical object obj, or nil.
func memberValue(obj []byte, name string) []byte {
	for i := 1; obj[i] == '"'; {
		k := i + 1
		i = skipString(obj, i)
		match := string(obj[k:i-1]) == name
		i++ // ':'
		end := skipValue(obj, i)
		if match {
			return obj[i:end:end]
		}
		if obj[end] != ',' {
			break
		}
		i = end + 1
	}
	return nil
}

// skipString returns the index after the canonical string at b[i].
func skipString(b []byte, i int) int {
	for i++; b[i] != '"'; i++ {
		if b[i] == '\\' {
			i++
		}
	}
	return i + 1
}

// skipValue returns the index after the canonical value at b[i].
func skipValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for {
			switch b[i] {
			case '"':
				i = skipString(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
			i++
		}
	}
	for i < len(b) && b[i] != ',' && b[i] != '}' && b[i] != ']' {
		i++
	}
	return i
}
