package guard

import (
	"encoding/base64"
	"encoding/json"
	"reflect"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"
)

// The default codec decodes every replayed result, and encoding/json spends
// most of the replay budget doing it: it validates the input in one pass,
// then decodes it in a second, through reflection at every step. The fast
// path below decodes in one pass with a plan compiled once per type. It
// handles the types results are usually made of and gives up on anything
// else, or on any input it has the least doubt about, leaving encoding/json
// to decide: when the fast path succeeds, its result is exactly what
// json.Unmarshal makes of the same input, and json.Unmarshal would have
// succeeded too.

// decodeJSON is json.Unmarshal(data, v), with a fast path for a pointer to
// a zero value of a supported type (see compileDecodePlan): what the
// default codec's Unmarshal does when it replays a result into a fresh T.
func decodeJSON(data []byte, v any) error {
	if decodeFast(data, v) {
		return nil
	}
	return json.Unmarshal(data, v)
}

// decodeFast decodes data into v and reports whether it did. When it did
// not, v is as it was, and json.Unmarshal must decide.
//
// It needs v's pointee to be zero because encoding/json merges JSON into
// what a value holds (it keeps a map's entries, decodes into the value an
// interface holds, and so on), which the fast path does not imitate. The
// pointer type must be unnamed: encoding/json does not look for the
// pointee's UnmarshalJSON method through a named pointer type.
func decodeFast(data []byte, v any) bool {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return false
	}
	p := decodePlanFor(rv.Type())
	if p == nil {
		return false
	}
	e := rv.Elem()
	if !e.IsZero() {
		return false
	}
	d := decoder{data: data}
	if i, ok := d.value(p, e, d.space(0), 0); ok && d.space(i) == len(data) {
		return true
	}
	e.SetZero()
	return false
}

// fastDecodeOn reports whether json.Unmarshal is the decoder the fast path
// imitates, encoding/json's own. Built with GOEXPERIMENT=jsonv2 it is
// encoding/json/v2 in a compatibility mode whose corner cases differ (it
// folds names and reports errors differently, for one); that version's
// UnmarshalTypeError has an Err field, which tells the two apart.
var fastDecodeOn = func() bool {
	_, v2 := reflect.TypeFor[json.UnmarshalTypeError]().FieldByName("Err")
	return !v2
}()

// maxDecodeDepth is how deeply the fast path nests before it gives up; well
// below encoding/json's limit (10000), so that it never accepts what
// encoding/json rejects as too deep.
const maxDecodeDepth = 1000

type decodeKind uint8

const (
	decodeBool decodeKind = iota
	decodeInt
	decodeUint
	decodeFloat
	decodeString
	decodeBytes // []byte: base64 from a string, or numbers from an array
	decodeStruct
	decodeSlice
	decodeArray
	decodeMap // string-kind keys
	decodePointer
	decodeAny  // an interface with no methods
	decodeTime // time.Time, through its UnmarshalJSON method
)

// A decodePlan says how the fast path decodes JSON into one Go type. Plans
// are immutable once compiled, and shared.
type decodePlan struct {
	kind   decodeKind
	typ    reflect.Type
	bits   int         // decodeFloat: 32 or 64
	elem   *decodePlan // pointer, slice, array and map elements
	length int         // decodeArray

	// decodeStruct
	fields []decodeField
	byLen  [][]int // fields by the length of their names
	byFold [][]int // fields by the length of their folded names
}

type decodeField struct {
	name   string // the JSON member name
	folded string // name folded as encoding/json folds names
	index  int
	plan   *decodePlan
}

var (
	timeType            = reflect.TypeFor[time.Time]()
	mapStringAnyType    = reflect.TypeFor[map[string]any]()
	mapStringStringType = reflect.TypeFor[map[string]string]()
)

// The plans for the pointer types decodeFast has been given, compiled
// once, in a sync.Map, and a direct-mapped cache in front of it: a replay
// finds its plan with one atomic load rather than a walk of the map,
// which cost a sixth of a small result's decoding.
var (
	decodePlans     sync.Map // pointer type → *decodePlanEntry
	decodePlanCache [64]atomic.Pointer[decodePlanEntry]
)

type decodePlanEntry struct {
	ptr  reflect.Type
	plan *decodePlan // for ptr's element; nil if unsupported
}

// decodePlanFor returns the plan for the element of the pointer type pt,
// or nil when the fast path does not decode through pt: pt is named, or
// its element, or a type the element contains, is outside the subset.
func decodePlanFor(pt reflect.Type) *decodePlan {
	slot := &decodePlanCache[reflect.ValueOf(pt).Pointer()/64%64] // by the type's address
	if e := slot.Load(); e != nil && e.ptr == pt {
		return e.plan
	}
	e, ok := decodePlans.Load(pt)
	if !ok {
		var p *decodePlan
		if pt.Name() == "" && fastDecodeOn {
			if p, ok = compileDecodePlan(pt.Elem(), map[reflect.Type]*decodePlan{}); !ok {
				p = nil
			}
		}
		e, _ = decodePlans.LoadOrStore(pt, &decodePlanEntry{ptr: pt, plan: p})
	}
	slot.Store(e.(*decodePlanEntry))
	return e.(*decodePlanEntry).plan
}

// compileDecodePlan compiles the plan for t. building holds the plans
// compiled or being compiled for this top-level type, which ends the
// recursion of recursive types; a plan found there may not be complete
// yet, but it is by the time the top-level compilation succeeds, and
// nothing is kept when it fails.
//
// The subset: booleans, numbers, strings, structs without embedded fields
// or ",string" options, slices, arrays, maps with string-kind keys,
// unnamed pointers, empty interfaces, and time.Time. Types with their own
// UnmarshalJSON or UnmarshalText methods (bar time.Time) and json.Number
// are not in it: encoding/json hands them their input, which the fast path
// leaves to it.
func compileDecodePlan(t reflect.Type, building map[reflect.Type]*decodePlan) (*decodePlan, bool) {
	if p, ok := building[t]; ok {
		return p, true
	}
	p := &decodePlan{typ: t}
	building[t] = p
	if t == timeType {
		p.kind = decodeTime
		return p, true
	}
	// encoding/json finds methods on the pointer to an addressable value,
	// and every value the fast path decodes into is addressable. A pointer
	// type's own methods are its element's, checked with the element.
	if t.Kind() != reflect.Pointer && hasUnmarshalMethod(t) {
		return nil, false
	}
	var ok bool
	switch t.Kind() {
	case reflect.Bool:
		p.kind = decodeBool
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		p.kind = decodeInt
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		p.kind = decodeUint
	case reflect.Float32, reflect.Float64:
		p.kind, p.bits = decodeFloat, t.Bits()
	case reflect.String:
		if t == numberType {
			return nil, false
		}
		p.kind = decodeString
	case reflect.Interface:
		if t.NumMethod() != 0 {
			return nil, false
		}
		p.kind = decodeAny
	case reflect.Pointer:
		// Through a named pointer type encoding/json does not look for
		// the element's methods.
		if t.Name() != "" {
			return nil, false
		}
		p.kind = decodePointer
		p.elem, ok = compileDecodePlan(t.Elem(), building)
		if !ok {
			return nil, false
		}
	case reflect.Slice:
		p.kind = decodeSlice
		if t.Elem().Kind() == reflect.Uint8 {
			p.kind = decodeBytes
		}
		p.elem, ok = compileDecodePlan(t.Elem(), building)
		if !ok {
			return nil, false
		}
	case reflect.Array:
		p.kind, p.length = decodeArray, t.Len()
		p.elem, ok = compileDecodePlan(t.Elem(), building)
		if !ok {
			return nil, false
		}
	case reflect.Map:
		// Other key kinds are parsed from the member name, and a key type
		// with UnmarshalText decodes through it.
		if t.Key().Kind() != reflect.String || hasUnmarshalMethod(t.Key()) {
			return nil, false
		}
		p.kind = decodeMap
		p.elem, ok = compileDecodePlan(t.Elem(), building)
		if !ok {
			return nil, false
		}
	case reflect.Struct:
		fields, ok := jsonStructFields(t)
		if !ok {
			return nil, false
		}
		p.kind = decodeStruct
		p.fields = make([]decodeField, len(fields))
		for i, f := range fields {
			fp, ok := compileDecodePlan(f.typ, building)
			if !ok {
				return nil, false
			}
			p.fields[i] = decodeField{name: f.name, folded: string(foldJSONName(nil, []byte(f.name))), index: f.index, plan: fp}
		}
		for i, f := range p.fields {
			p.byLen = addByLen(p.byLen, len(f.name), i)
			p.byFold = addByLen(p.byFold, len(f.folded), i)
		}
	default: // complex numbers, channels, functions, unsafe pointers
		return nil, false
	}
	return p, true
}

// hasUnmarshalMethod reports whether encoding/json decodes an addressable
// value of type t through UnmarshalJSON or UnmarshalText.
func hasUnmarshalMethod(t reflect.Type) bool {
	pt := reflect.PointerTo(t)
	return pt.Implements(unmarshalerType) || pt.Implements(textUnmarshaler)
}

// foldJSONName appends name folded as encoding/json folds member names
// (its appendFoldedName): two names match case-insensitively when their
// folded forms are equal.
func foldJSONName(dst, name []byte) []byte {
	for i := 0; i < len(name); {
		if c := name[i]; c < utf8.RuneSelf {
			if 'a' <= c && c <= 'z' {
				c -= 'a' - 'A'
			}
			dst = append(dst, c)
			i++
			continue
		}
		r, n := utf8.DecodeRune(name[i:])
		dst = utf8.AppendRune(dst, foldRune(r))
		i += n
	}
	return dst
}

// foldRune returns the smallest rune in r's case-folding orbit.
func foldRune(r rune) rune {
	for {
		r2 := unicode.SimpleFold(r)
		if r2 <= r {
			return r2
		}
		r = r2
	}
}

// A field lookup that is neither a field index nor -1 (an unknown member,
// which is skipped) gives up: the name matches a field only
// case-insensitively, which encoding/json resolves by rules the fast path
// does not repeat.
const (
	unknownMember = -1
	foldedMember  = -2
)

// addByLen adds i to the list at index n of byLen.
func addByLen(byLen [][]int, n, i int) [][]int {
	for len(byLen) <= n {
		byLen = append(byLen, nil)
	}
	byLen[n] = append(byLen[n], i)
	return byLen
}

// field returns the index in p.fields of the field named key exactly, or
// unknownMember or foldedMember. Names are told apart by length first,
// which leaves few to compare: no hashing, which took a tenth of a 1 KB
// result's decoding.
func (p *decodePlan) field(key []byte) int {
	if len(key) < len(p.byLen) {
		for _, i := range p.byLen[len(key)] {
			if string(key) == p.fields[i].name {
				return i
			}
		}
	}
	for _, c := range key {
		if c >= utf8.RuneSelf {
			return foldedMember // Unicode folding: leave it to encoding/json
		}
	}
	if len(key) < len(p.byFold) {
		for _, i := range p.byFold[len(key)] {
			if asciiFoldEqual(key, p.fields[i].folded) {
				return foldedMember
			}
		}
	}
	return unknownMember
}

// asciiFoldEqual reports whether the ASCII name key folds to folded.
func asciiFoldEqual(key []byte, folded string) bool {
	if len(key) != len(folded) {
		return false
	}
	for i, c := range key {
		if 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		}
		if c != folded[i] {
			return false
		}
	}
	return true
}

// A decoder is the state of one fast decoding. Its methods take the
// offset of a value's first byte and return the offset after its last and
// whether they succeeded; when they did not, the caller gives up.
type decoder struct {
	data []byte
	buf  []byte // unescaped strings, reused
}

// space returns the offset of the first non-space byte from i on.
func (d *decoder) space(i int) int {
	for i < len(d.data) {
		switch d.data[i] {
		case ' ', '\t', '\r', '\n':
			i++
		default:
			return i
		}
	}
	return i
}

// literal reports whether the JSON literal lit starts at i.
func (d *decoder) literal(i int, lit string) bool {
	return len(d.data)-i >= len(lit) && string(d.data[i:i+len(lit)]) == lit
}

// value decodes the JSON value at i into v, a zero value of p's type.
// Every value the fast path decodes into is zero: it gives up on a
// repeated struct member, whose value encoding/json would decode into the
// first one's.
func (d *decoder) value(p *decodePlan, v reflect.Value, i, depth int) (int, bool) {
	if i >= len(d.data) {
		return 0, false
	}
	c := d.data[i]
	if c == 'n' {
		// null leaves a zero value as it is (for time.Time, UnmarshalJSON
		// does nothing with it).
		return i + 4, d.literal(i, "null")
	}
	switch p.kind {
	case decodeBool:
		switch {
		case c == 't' && d.literal(i, "true"):
			v.SetBool(true)
			return i + 4, true
		case c == 'f' && d.literal(i, "false"):
			return i + 5, true
		}
	case decodeInt:
		end, isInt, ok := d.number(i)
		if !ok {
			return 0, false
		}
		var n int64
		if isInt && end-i <= 18 {
			if c == '-' {
				n = -int64(parseDigits(d.data[i+1 : end]))
			} else {
				n = int64(parseDigits(d.data[i:end]))
			}
		} else {
			var err error
			if n, err = strconv.ParseInt(string(d.data[i:end]), 10, 64); err != nil {
				return 0, false
			}
		}
		if v.OverflowInt(n) {
			return 0, false
		}
		v.SetInt(n)
		return end, true
	case decodeUint:
		end, isInt, ok := d.number(i)
		if !ok {
			return 0, false
		}
		var n uint64
		if isInt && c != '-' && end-i <= 19 {
			n = parseDigits(d.data[i:end])
		} else {
			var err error
			if n, err = strconv.ParseUint(string(d.data[i:end]), 10, 64); err != nil {
				return 0, false
			}
		}
		if v.OverflowUint(n) {
			return 0, false
		}
		v.SetUint(n)
		return end, true
	case decodeFloat:
		end, _, ok := d.number(i)
		if !ok {
			return 0, false
		}
		f, err := strconv.ParseFloat(string(d.data[i:end]), p.bits)
		if err != nil || v.OverflowFloat(f) {
			return 0, false
		}
		v.SetFloat(f)
		return end, true
	case decodeString:
		if c == '"' {
			s, end, ok := d.str(i)
			if ok {
				v.SetString(string(s))
			}
			return end, ok
		}
	case decodeBytes:
		switch c {
		case '"':
			s, end, ok := d.str(i)
			if !ok {
				return 0, false
			}
			b := make([]byte, base64.StdEncoding.DecodedLen(len(s)))
			n, err := base64.StdEncoding.Decode(b, s)
			if err != nil {
				return 0, false
			}
			v.SetBytes(b[:n])
			return end, true
		case '[':
			return d.slice(p, v, i, depth)
		}
	case decodeStruct:
		if c == '{' {
			return d.object(p, v, i, depth)
		}
	case decodeSlice:
		if c == '[' {
			return d.slice(p, v, i, depth)
		}
	case decodeArray:
		if c == '[' {
			return d.array(p, v, i, depth)
		}
	case decodeMap:
		if c == '{' {
			switch p.typ {
			case mapStringAnyType: // as encoding/json decodes into an interface
				x, end, ok := d.anyValue(i, depth)
				if ok {
					v.Set(reflect.ValueOf(x))
				}
				return end, ok
			case mapStringStringType:
				return d.stringMap(v, i, depth)
			}
			return d.mapObject(p, v, i, depth)
		}
	case decodePointer:
		e := reflect.New(p.elem.typ)
		end, ok := d.value(p.elem, e.Elem(), i, depth)
		if ok {
			v.Set(e)
		}
		return end, ok
	case decodeAny:
		x, end, ok := d.anyValue(i, depth)
		if ok {
			v.Set(reflect.ValueOf(x))
		}
		return end, ok
	case decodeTime:
		// encoding/json hands UnmarshalJSON the value's bytes, which for
		// anything but a string it rejects.
		if c == '"' {
			end, ok := d.skipString(i)
			if !ok {
				return 0, false
			}
			t, _ := reflect.TypeAssert[*time.Time](v.Addr())
			return end, t.UnmarshalJSON(d.data[i:end]) == nil
		}
	}
	return 0, false
}

// object decodes the object at i into the struct v.
func (d *decoder) object(p *decodePlan, v reflect.Value, i, depth int) (int, bool) {
	if depth++; depth > maxDecodeDepth {
		return 0, false
	}
	data := d.data
	i = d.space(i + 1)
	if i < len(data) && data[i] == '}' {
		return i + 1, true
	}
	var seen uint64 // fields decoded so far, if there are at most 64
	var seenMore []bool
	if len(p.fields) > 64 {
		seenMore = make([]bool, len(p.fields))
	}
	for {
		if i >= len(data) || data[i] != '"' {
			return 0, false
		}
		key, end, ok := d.str(i)
		if !ok {
			return 0, false
		}
		f := p.field(key)
		if f == foldedMember {
			return 0, false
		}
		if i = d.space(end); i >= len(data) || data[i] != ':' {
			return 0, false
		}
		i = d.space(i + 1)
		if f == unknownMember {
			i, ok = d.skip(i, depth)
		} else {
			if seenMore != nil {
				if seenMore[f] {
					return 0, false
				}
				seenMore[f] = true
			} else {
				if seen&(1<<f) != 0 {
					return 0, false
				}
				seen |= 1 << f
			}
			fd := &p.fields[f]
			i, ok = d.value(fd.plan, v.Field(fd.index), i, depth)
		}
		if !ok {
			return 0, false
		}
		var more bool
		if i, more, ok = d.next(i, '}'); !ok {
			return 0, false
		}
		if !more {
			return i, true
		}
	}
}

// mapObject decodes the object at i into the nil map v. As in
// encoding/json, each member's value is decoded into a fresh zero value,
// and the last of repeated members wins.
func (d *decoder) mapObject(p *decodePlan, v reflect.Value, i, depth int) (int, bool) {
	if depth++; depth > maxDecodeDepth {
		return 0, false
	}
	data := d.data
	m := reflect.MakeMap(p.typ)
	i = d.space(i + 1)
	if i < len(data) && data[i] == '}' {
		v.Set(m)
		return i + 1, true
	}
	kv := reflect.New(p.typ.Key()).Elem()
	ev := reflect.New(p.elem.typ).Elem()
	for first := true; ; first = false {
		if i >= len(data) || data[i] != '"' {
			return 0, false
		}
		key, end, ok := d.str(i)
		if !ok {
			return 0, false
		}
		kv.SetString(string(key))
		if i = d.space(end); i >= len(data) || data[i] != ':' {
			return 0, false
		}
		if !first {
			ev.SetZero()
		}
		if i, ok = d.value(p.elem, ev, d.space(i+1), depth); !ok {
			return 0, false
		}
		m.SetMapIndex(kv, ev)
		var more bool
		if i, more, ok = d.next(i, '}'); !ok {
			return 0, false
		}
		if !more {
			v.Set(m)
			return i, true
		}
	}
}

// stringMap is mapObject for a map[string]string, without reflection.
func (d *decoder) stringMap(v reflect.Value, i, depth int) (int, bool) {
	if depth++; depth > maxDecodeDepth {
		return 0, false
	}
	data := d.data
	m := make(map[string]string)
	i = d.space(i + 1)
	if i < len(data) && data[i] == '}' {
		v.Set(reflect.ValueOf(m))
		return i + 1, true
	}
	for {
		if i >= len(data) || data[i] != '"' {
			return 0, false
		}
		key, end, ok := d.str(i)
		if !ok {
			return 0, false
		}
		k := string(key)
		if i = d.space(end); i >= len(data) || data[i] != ':' {
			return 0, false
		}
		var e string // null leaves the fresh value zero
		if i = d.space(i + 1); i < len(data) && data[i] == '"' {
			if key, i, ok = d.str(i); !ok {
				return 0, false
			}
			e = string(key)
		} else if !d.literal(i, "null") {
			return 0, false
		} else {
			i += 4
		}
		m[k] = e
		var more bool
		if i, more, ok = d.next(i, '}'); !ok {
			return 0, false
		}
		if !more {
			v.Set(reflect.ValueOf(m))
			return i, true
		}
	}
}

// slice decodes the array at i into the nil slice v; an empty array makes
// an empty slice, not a nil one.
func (d *decoder) slice(p *decodePlan, v reflect.Value, i, depth int) (int, bool) {
	if depth++; depth > maxDecodeDepth {
		return 0, false
	}
	data := d.data
	i = d.space(i + 1)
	if i < len(data) && data[i] == ']' {
		v.Set(reflect.MakeSlice(p.typ, 0, 0))
		return i + 1, true
	}
	for n := 0; ; n++ {
		if n >= v.Cap() {
			// Start at 4 elements rather than 1, 2, 4 as encoding/json
			// does; the capacity is not part of the result.
			v.Grow(max(n, 4))
		}
		v.SetLen(n + 1)
		var ok bool
		if i, ok = d.value(p.elem, v.Index(n), i, depth); !ok {
			return 0, false
		}
		var more bool
		if i, more, ok = d.next(i, ']'); !ok {
			return 0, false
		}
		if !more {
			return i, true
		}
	}
}

// array decodes the array at i into the zero Go array v: elements past
// v's length are checked and dropped, and those the JSON lacks stay zero.
func (d *decoder) array(p *decodePlan, v reflect.Value, i, depth int) (int, bool) {
	if depth++; depth > maxDecodeDepth {
		return 0, false
	}
	data := d.data
	i = d.space(i + 1)
	if i < len(data) && data[i] == ']' {
		return i + 1, true
	}
	for n := 0; ; n++ {
		var ok bool
		if n < p.length {
			i, ok = d.value(p.elem, v.Index(n), i, depth)
		} else {
			i, ok = d.skip(i, depth)
		}
		if !ok {
			return 0, false
		}
		var more bool
		if i, more, ok = d.next(i, ']'); !ok {
			return 0, false
		}
		if !more {
			return i, true
		}
	}
}

// anyValue decodes the value at i as encoding/json does into an empty
// interface: map[string]any, []any, float64, string, bool or nil.
func (d *decoder) anyValue(i, depth int) (any, int, bool) {
	data := d.data
	if i >= len(data) {
		return nil, 0, false
	}
	switch c := data[i]; c {
	case '{':
		if depth++; depth > maxDecodeDepth {
			return nil, 0, false
		}
		m := make(map[string]any)
		i = d.space(i + 1)
		if i < len(data) && data[i] == '}' {
			return m, i + 1, true
		}
		for {
			if i >= len(data) || data[i] != '"' {
				return nil, 0, false
			}
			key, end, ok := d.str(i)
			if !ok {
				return nil, 0, false
			}
			k := string(key)
			if i = d.space(end); i >= len(data) || data[i] != ':' {
				return nil, 0, false
			}
			var x any
			if x, i, ok = d.anyValue(d.space(i+1), depth); !ok {
				return nil, 0, false
			}
			m[k] = x
			var more bool
			if i, more, ok = d.next(i, '}'); !ok {
				return nil, 0, false
			}
			if !more {
				return m, i, true
			}
		}
	case '[':
		if depth++; depth > maxDecodeDepth {
			return nil, 0, false
		}
		a := make([]any, 0)
		i = d.space(i + 1)
		if i < len(data) && data[i] == ']' {
			return a, i + 1, true
		}
		for {
			x, end, ok := d.anyValue(i, depth)
			if !ok {
				return nil, 0, false
			}
			a = append(a, x)
			var more bool
			if i, more, ok = d.next(end, ']'); !ok {
				return nil, 0, false
			}
			if !more {
				return a, i, true
			}
		}
	case '"':
		s, end, ok := d.str(i)
		if !ok {
			return nil, 0, false
		}
		return string(s), end, true
	case 't':
		return true, i + 4, d.literal(i, "true")
	case 'f':
		return false, i + 5, d.literal(i, "false")
	case 'n':
		return nil, i + 4, d.literal(i, "null")
	default:
		end, _, ok := d.number(i)
		if !ok {
			return nil, 0, false
		}
		f, err := strconv.ParseFloat(string(data[i:end]), 64)
		if err != nil {
			return nil, 0, false
		}
		return f, end, true
	}
}

// next reads what follows a value inside the array or object that close
// ends: a comma (more: i is then where the next value or member starts) or
// close (i is then just after it).
func (d *decoder) next(i int, close byte) (_ int, more, ok bool) {
	if i = d.space(i); i < len(d.data) {
		switch d.data[i] {
		case ',':
			return d.space(i + 1), true, true
		case close:
			return i + 1, false, true
		}
	}
	return 0, false, false
}

// skip checks the value at i, which is not decoded, as strictly as
// encoding/json's syntax check does.
func (d *decoder) skip(i, depth int) (int, bool) {
	data := d.data
	if i >= len(data) {
		return 0, false
	}
	switch data[i] {
	case '{':
		if depth++; depth > maxDecodeDepth {
			return 0, false
		}
		i = d.space(i + 1)
		if i < len(data) && data[i] == '}' {
			return i + 1, true
		}
		for {
			if i >= len(data) || data[i] != '"' {
				return 0, false
			}
			end, ok := d.skipString(i)
			if !ok {
				return 0, false
			}
			if i = d.space(end); i >= len(data) || data[i] != ':' {
				return 0, false
			}
			if i, ok = d.skip(d.space(i+1), depth); !ok {
				return 0, false
			}
			var more bool
			if i, more, ok = d.next(i, '}'); !ok {
				return 0, false
			}
			if !more {
				return i, true
			}
		}
	case '[':
		if depth++; depth > maxDecodeDepth {
			return 0, false
		}
		i = d.space(i + 1)
		if i < len(data) && data[i] == ']' {
			return i + 1, true
		}
		for {
			end, ok := d.skip(i, depth)
			if !ok {
				return 0, false
			}
			var more bool
			if i, more, ok = d.next(end, ']'); !ok {
				return 0, false
			}
			if !more {
				return i, true
			}
		}
	case '"':
		return d.skipString(i)
	case 't':
		return i + 4, d.literal(i, "true")
	case 'f':
		return i + 5, d.literal(i, "false")
	case 'n':
		return i + 4, d.literal(i, "null")
	default:
		end, _, ok := d.number(i)
		return end, ok
	}
}

// number checks the RFC 8259 number at i and returns its end, and whether
// it is an integer (no fraction or exponent). What follows it is the
// caller's to check.
func (d *decoder) number(i int) (end int, isInt, ok bool) {
	end, _, frac, exp, ok := scanNumber(d.data, i)
	return end, ok && !frac && !exp, ok
}

// parseDigits returns the value of at most 19 decimal digits, which cannot
// overflow a uint64 (or, up to 18, an int64).
func parseDigits(b []byte) uint64 {
	var n uint64
	for _, c := range b {
		n = n*10 + uint64(c-'0')
	}
	return n
}

// str returns the contents of the string at i, unescaped, and its end.
// The contents may alias the input or d.buf: they are good until the next
// call. It gives up on invalid UTF-8 and on escaped surrogates that do not
// pair, which encoding/json replaces with U+FFFD.
func (d *decoder) str(i int) ([]byte, int, bool) {
	data := d.data
	for j := i + 1; j < len(data); {
		if plain[data[j]] {
			j++
			continue
		}
		switch c := data[j]; {
		case c == '"':
			return data[i+1 : j], j + 1, true
		case c == '\\':
			return d.strEscaped(i, j)
		case c < utf8.RuneSelf:
			return nil, 0, false // a control character
		default:
			r, n := utf8.DecodeRune(data[j:])
			if r == utf8.RuneError && n == 1 {
				return nil, 0, false
			}
			j += n
		}
	}
	return nil, 0, false
}

// strEscaped is str for a string with an escape at j.
func (d *decoder) strEscaped(i, j int) ([]byte, int, bool) {
	data := d.data
	b := append(d.buf[:0], data[i+1:j]...)
	defer func() { d.buf = b[:0] }()
	for j < len(data) {
		switch c := data[j]; {
		case c == '"':
			return b, j + 1, true
		case c == '\\':
			r, n, ok := unescape(data[j:])
			if !ok {
				return nil, 0, false
			}
			b = utf8.AppendRune(b, r)
			j += n
		case c < ' ':
			return nil, 0, false
		case c < utf8.RuneSelf:
			b = append(b, c)
			j++
		default:
			r, n := utf8.DecodeRune(data[j:])
			if r == utf8.RuneError && n == 1 {
				return nil, 0, false
			}
			b = append(b, data[j:j+n]...)
			j += n
		}
	}
	return nil, 0, false
}

// skipString checks the string at i as encoding/json's syntax check does
// (which lets invalid UTF-8 through) and returns its end.
func (d *decoder) skipString(i int) (int, bool) {
	data := d.data
	for j := i + 1; j < len(data); {
		switch c := data[j]; {
		case c == '"':
			return j + 1, true
		case c == '\\':
			if j+1 >= len(data) {
				return 0, false
			}
			switch data[j+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				j += 2
			case 'u':
				if hex4(data[j+2:]) < 0 {
					return 0, false
				}
				j += 6
			default:
				return 0, false
			}
		case c < ' ':
			return 0, false
		default:
			j++
		}
	}
	return 0, false
}
