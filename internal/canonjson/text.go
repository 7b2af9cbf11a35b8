package canonjson

import (
	"fmt"
	"slices"
	"unicode/utf16"
	"unicode/utf8"
)

// JSON text is canonicalised in two passes: parse it into a tree whose
// objects are sorted, then write the tree. Writing as it parses would mean
// moving each object's members into order after parsing them, copying a
// nested member once for every object around it: quadratic in the depth.

// smallObject is the most members sorted by insertion, which costs a
// third of the time of the general sort on typical objects (its indirect
// calls are the difference).
const smallObject = 12

// maxDepth bounds the nesting of arrays and objects, as RFC 8785
// implementations commonly do (and encoding/json's decoder).
const maxDepth = 10000

// Node kinds.
const (
	nLiteral byte = iota // a literal or number: canonical text in lits[start:end]
	nString              // decoded in strs[start:end]
	nArray               // elements in nodes[start:end]
	nObject              // members in nodes[start:end], sorted
)

// node is a parsed value; for an object member, also its name.
type node struct {
	kind       byte
	esc        bool // nString: the string holds characters to escape
	nameEsc    bool // the name does
	start, end int
	ns, ne     int // the name, decoded in strs[ns:ne]
}

// parser parses JSON text; its buffers are reused between texts.
type parser struct {
	in    []byte
	pos   int
	depth int
	valid bool   // all strings so far are valid
	lits  []byte // canonical literals and numbers
	strs  []byte // decoded strings and names
	stack []node // the values of the open arrays and objects
	nodes []node // the values of the closed ones, in blocks
}

// canonical parses the JSON text in, nested depth deep, and appends its
// canonical form to out, reporting whether all its strings were valid.
func (p *parser) canonical(out, in []byte, depth int) ([]byte, bool, error) {
	p.in, p.pos, p.depth, p.valid = in, 0, depth, true
	p.lits, p.strs, p.stack, p.nodes = p.lits[:0], p.strs[:0], p.stack[:0], p.nodes[:0]
	defer func() { p.in = nil }()
	if err := p.value(); err != nil {
		return out, false, err
	}
	if p.skipSpace(); p.pos < len(p.in) {
		return out, false, p.syntaxError("after the top-level value")
	}
	return p.write(out, p.stack[0]), p.valid, nil
}

func (p *parser) syntaxError(context string) error {
	if p.pos >= len(p.in) {
		return fmt.Errorf("canonjson: invalid JSON: unexpected end of input")
	}
	return fmt.Errorf("canonjson: invalid JSON: unexpected %q at byte %d %s", p.in[p.pos], p.pos, context)
}

func (p *parser) skipSpace() {
	for p.pos < len(p.in) {
		switch p.in[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

// next skips white space and reports whether the next byte is c, consuming
// it if so.
func (p *parser) next(c byte) bool {
	p.skipSpace()
	if p.pos < len(p.in) && p.in[p.pos] == c {
		p.pos++
		return true
	}
	return false
}

// literals are the literals by their first byte.
var literals = [256]string{'t': "true", 'f': "false", 'n': "null"}

// value parses a value and pushes its node.
func (p *parser) value() error {
	p.skipSpace()
	if p.pos >= len(p.in) {
		return p.syntaxError("")
	}
	n := node{}
	switch c := p.in[p.pos]; c {
	case '{', '[':
		return p.container(c)
	case '"':
		p.pos++
		var err error
		n.kind = nString
		if n.start, n.end, n.esc, err = p.str(); err != nil {
			return err
		}
	default:
		n.start = len(p.lits)
		if lit := literals[c]; lit != "" && len(p.in)-p.pos >= len(lit) && string(p.in[p.pos:p.pos+len(lit)]) == lit {
			p.lits = append(p.lits, lit...)
			p.pos += len(lit)
		} else if end, intDigits := scanNumber(p.in, p.pos); end >= 0 {
			var err error
			if p.lits, err = appendNumberText(p.lits, p.in[p.pos:end], intDigits); err != nil {
				return err
			}
			p.pos = end
		} else {
			return p.syntaxError("looking for a value")
		}
		n.end = len(p.lits)
	}
	p.stack = append(p.stack, n)
	return nil
}

// container parses an array or an object (open is '[' or '{') and pushes
// its node.
func (p *parser) container(open byte) error {
	p.pos++
	if p.depth++; p.depth > maxDepth {
		return fmt.Errorf("canonjson: nesting deeper than %d", maxDepth)
	}
	close, kind := byte(']'), nArray
	if open == '{' {
		close, kind = '}', nObject
	}
	base := len(p.stack)
	if !p.next(close) {
		for {
			var name node
			if kind == nObject {
				if !p.next('"') {
					return p.syntaxError("looking for a member name")
				}
				var err error
				if name.ns, name.ne, name.nameEsc, err = p.str(); err != nil {
					return err
				}
				if !p.next(':') {
					return p.syntaxError("after a member name")
				}
			}
			if err := p.value(); err != nil {
				return err
			}
			if kind == nObject {
				m := &p.stack[len(p.stack)-1]
				m.ns, m.ne, m.nameEsc = name.ns, name.ne, name.nameEsc
			}
			if p.next(close) {
				break
			}
			if !p.next(',') {
				return p.syntaxError("after a value")
			}
		}
	}
	members := p.stack[base:]
	if kind == nObject {
		if len(members) <= smallObject {
			for i := 1; i < len(members); i++ {
				for j := i; j > 0 && p.compareMembers(members[j-1], members[j]) > 0; j-- {
					members[j-1], members[j] = members[j], members[j-1]
				}
			}
		} else {
			slices.SortFunc(members, p.compareMembers)
		}
		for i := 1; i < len(members); i++ {
			if p.compareMembers(members[i-1], members[i]) == 0 {
				m := members[i]
				return fmt.Errorf("canonjson: duplicate member name %q", p.strs[m.ns:m.ne])
			}
		}
	}
	start := len(p.nodes)
	p.nodes = append(p.nodes, members...)
	p.stack = append(p.stack[:base], node{kind: kind, start: start, end: len(p.nodes)})
	p.depth--
	return nil
}

func (p *parser) compareMembers(a, b node) int {
	return compareNames(p.strs[a.ns:a.ne], p.strs[b.ns:b.ne])
}

// str decodes the string after its opening quote into strs[start:end] and
// reports whether it holds characters that RFC 8785 escapes. Bytes that are
// not UTF-8 are kept as they are, and an escaped surrogate that is not half
// of a pair becomes the three bytes that would encode it in UTF-8 (WTF-8),
// which are not UTF-8 either; either clears p.valid.
func (p *parser) str() (start, end int, esc bool, err error) {
	start = len(p.strs)
	in := p.in
	for {
		i := skipPlain(in, p.pos)
		p.strs = append(p.strs, in[p.pos:i]...)
		p.pos = i
		if i >= len(in) {
			return 0, 0, false, p.syntaxError("")
		}
		switch c := in[i]; {
		case c == '"':
			p.pos++
			return start, len(p.strs), esc, nil
		case c == '\\':
			r, n := unescape(in[i:])
			if n == 0 {
				return 0, 0, false, p.syntaxError("in a string escape")
			}
			p.pos += n
			esc = esc || r < 0x20 || r == '"' || r == '\\'
			if utf16.IsSurrogate(r) {
				p.valid = false
				p.strs = append(p.strs, 0xE0|byte(r>>12), 0x80|byte(r>>6)&0x3F, 0x80|byte(r)&0x3F)
			} else {
				p.strs = utf8.AppendRune(p.strs, r)
			}
		case c < 0x20:
			return 0, 0, false, p.syntaxError("in a string")
		default:
			r, size := utf8.DecodeRune(in[i:])
			p.valid = p.valid && (r != utf8.RuneError || size > 1)
			p.strs = append(p.strs, in[i:i+size]...)
			p.pos += size
		}
	}
}

// unescape decodes the escape sequence b starts with (at its backslash)
// and returns the character and the length of the sequence, 0 if it is not
// one. An escaped high surrogate followed by an escaped low one is a
// character; any other escaped surrogate is returned as it is.
func unescape(b []byte) (rune, int) {
	if len(b) < 2 {
		return 0, 0
	}
	switch e := b[1]; e {
	case '"', '\\', '/':
		return rune(e), 2
	case 'b':
		return '\b', 2
	case 'f':
		return '\f', 2
	case 'n':
		return '\n', 2
	case 'r':
		return '\r', 2
	case 't':
		return '\t', 2
	case 'u':
		r := hex4(b[2:])
		if r < 0 {
			return 0, 0
		}
		if 0xD800 <= r && r < 0xDC00 && len(b) >= 12 && b[6] == '\\' && b[7] == 'u' {
			if lo := hex4(b[8:]); 0xDC00 <= lo && lo <= 0xDFFF {
				return utf16.DecodeRune(r, lo), 12
			}
		}
		return r, 6
	}
	return 0, 0
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

// write appends the canonical text of n.
func (p *parser) write(out []byte, n node) []byte {
	switch n.kind {
	case nLiteral:
		return append(out, p.lits[n.start:n.end]...)
	case nString:
		return p.writeString(out, n.start, n.end, n.esc)
	}
	open, close := byte('['), byte(']')
	if n.kind == nObject {
		open, close = '{', '}'
	}
	out = append(out, open)
	for i, m := range p.nodes[n.start:n.end] {
		if i > 0 {
			out = append(out, ',')
		}
		if n.kind == nObject {
			out = append(p.writeString(out, m.ns, m.ne, m.nameEsc), ':')
		}
		out = p.write(out, m)
	}
	return append(out, close)
}

// writeString appends the string strs[start:end], which holds characters
// to escape if esc.
func (p *parser) writeString(out []byte, start, end int, esc bool) []byte {
	if esc {
		out, _ = appendString(out, p.strs[start:end])
		return out
	}
	out = append(out, '"')
	out = append(out, p.strs[start:end]...)
	return append(out, '"')
}
