package guard

import (
	"bytes"
	"encoding"
	"encoding/base64"
	"encoding/json"
	"math"
	"reflect"
	"slices"
	"strconv"
	"sync"
)

// A reflection-based JSON encoder with two modes:
//
//   - canonical: the RFC 8785 form of the value's encoding/json encoding,
//     that is jcs.Transform(json.Marshal(v)), written in one pass (keys the
//     input without marshalling and then re-parsing it);
//   - exact: JSON that encoding/json decodes to exactly what it would decode
//     from json.Marshal(v) (the default codec's stored results).
//
// It covers the common subset of Go types (see jsonStructFields) and calls
// MarshalJSON and MarshalText as encoding/json does, in the same cases.
// Outside the subset it reports false and the caller falls back to
// encoding/json, which then decides the output or the error.

// maxEncodeDepth bounds nesting; deeper values go to encoding/json, which
// also detects cycles.
const maxEncodeDepth = 100

type encKind uint8

const (
	encUnsupported encKind = iota
	encBool
	encInt
	encUint
	encFloat32
	encFloat64
	encString
	encBytes
	encStruct
	encMap
	encSlice
	encArray
	encPointer
	encInterface
	encMarshaler     // T implements json.Marshaler
	encAddrMarshaler // *T does; T's own encoding when not addressable
	encText          // T implements encoding.TextMarshaler
	encAddrText      // *T does
)

// encoder is the plan for encoding one type.
type encoder struct {
	kind   encKind
	elem   *encoder // pointer, slice and array elements, map values; the plain encoding for encAddr*
	fields []encField
	// stringKeys: the map's keys are of a string kind (else an integer kind).
	stringKeys bool
	anyMap     bool // map[string]any
}

// encField is a struct field: its member name written as `,"name":` (the
// comma for all but the first member written).
type encField struct {
	jsonField
	member []byte
	enc    *encoder
	isZero func(reflect.Value) bool // for omitzero
}

var (
	encoders  sync.Map // reflect.Type -> *encoder
	encoderMu sync.Mutex
	anyType   = reflect.TypeFor[any]()
)

// encoderFor returns the plan for t, building it (and the plans of the
// types it contains) on first use.
func encoderFor(t reflect.Type) *encoder {
	if e, ok := encoders.Load(t); ok {
		return e.(*encoder)
	}
	encoderMu.Lock()
	defer encoderMu.Unlock()
	building := map[reflect.Type]*encoder{}
	e := buildEncoder(t, building)
	// Publish only complete plans.
	for t, e := range building {
		encoders.Store(t, e)
	}
	return e
}

func buildEncoder(t reflect.Type, building map[reflect.Type]*encoder) *encoder {
	if e, ok := encoders.Load(t); ok {
		return e.(*encoder)
	}
	if e, ok := building[t]; ok {
		return e // a recursive type: filled in below, before anyone runs it
	}
	e := &encoder{}
	building[t] = e
	*e = *buildMethods(t, building, true)
	return e
}

// buildMethods is the plan for t following encoding/json's precedence
// (newTypeEncoder): MarshalJSON, through the address when allowed and
// addressable, then MarshalText, then t's kind.
func buildMethods(t reflect.Type, building map[reflect.Type]*encoder, allowAddr bool) *encoder {
	byAddr := allowAddr && t.Kind() != reflect.Pointer
	switch {
	case byAddr && reflect.PointerTo(t).Implements(marshalerType):
		return &encoder{kind: encAddrMarshaler, elem: buildMethods(t, building, false)}
	case t.Implements(marshalerType):
		return &encoder{kind: encMarshaler}
	case byAddr && reflect.PointerTo(t).Implements(textMarshalerType):
		return &encoder{kind: encAddrText, elem: buildMethods(t, building, false)}
	case t.Implements(textMarshalerType):
		return &encoder{kind: encText}
	}
	return buildPlain(t, building)
}

// buildPlain is the plan for t's own kind, ignoring its methods.
func buildPlain(t reflect.Type, building map[reflect.Type]*encoder) *encoder {
	e := &encoder{}
	if t == numberType {
		return e // json.Number: left to encoding/json
	}
	switch t.Kind() {
	case reflect.Bool:
		e.kind = encBool
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		e.kind = encInt
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		e.kind = encUint
	case reflect.Float32:
		e.kind = encFloat32
	case reflect.Float64:
		e.kind = encFloat64
	case reflect.String:
		e.kind = encString
	case reflect.Interface:
		e.kind = encInterface
	case reflect.Pointer:
		e.kind, e.elem = encPointer, buildEncoder(t.Elem(), building)
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			p := reflect.PointerTo(t.Elem())
			if p.Implements(marshalerType) || p.Implements(textMarshalerType) {
				return e // encoding/json encodes these as arrays; rare
			}
			e.kind = encBytes
			return e
		}
		e.kind, e.elem = encSlice, buildEncoder(t.Elem(), building)
	case reflect.Array:
		e.kind, e.elem = encArray, buildEncoder(t.Elem(), building)
	case reflect.Map:
		k := t.Key()
		switch k.Kind() {
		case reflect.String:
			e.stringKeys = true
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
			if k.Implements(textMarshalerType) {
				return e // encoding/json uses MarshalText for these keys
			}
		default:
			return e
		}
		e.kind, e.elem = encMap, buildEncoder(t.Elem(), building)
		e.anyMap = e.stringKeys && t.Elem() == anyType
	case reflect.Struct:
		fields, ok := jsonStructFields(t)
		if !ok {
			return e
		}
		// Canonical member order, fixed for the type: UTF-16 order of the
		// names (all distinct, see jsonStructFields).
		slices.SortFunc(fields, func(a, b jsonField) int { return compareUTF16(a.name, b.name) })
		e.kind = encStruct
		e.fields = make([]encField, len(fields))
		for i, f := range fields {
			member, _ := appendCanonicalString([]byte{','}, f.name) // valid: see validTagName
			e.fields[i] = encField{jsonField: f, member: append(member, ':'), enc: buildEncoder(f.typ, building)}
			if f.omitZero {
				e.fields[i].isZero = zeroTest(f.typ)
			}
		}
	}
	return e
}

// zeroTest is encoding/json's test for omitzero on a field of type t.
func zeroTest(t reflect.Type) func(reflect.Value) bool {
	switch {
	case t.Kind() == reflect.Interface && t.Implements(isZeroerType):
		return func(v reflect.Value) bool {
			return v.IsNil() || (v.Elem().Kind() == reflect.Pointer && v.Elem().IsNil()) || v.Interface().(isZeroer).IsZero()
		}
	case t.Kind() == reflect.Pointer && t.Implements(isZeroerType):
		return func(v reflect.Value) bool { return v.IsNil() || v.Interface().(isZeroer).IsZero() }
	case t.Implements(isZeroerType):
		return func(v reflect.Value) bool { return v.Interface().(isZeroer).IsZero() }
	case reflect.PointerTo(t).Implements(isZeroerType):
		return func(v reflect.Value) bool {
			if !v.CanAddr() {
				v2 := reflect.New(v.Type()).Elem()
				v2.Set(v)
				v = v2
			}
			return v.Addr().Interface().(isZeroer).IsZero()
		}
	}
	return reflect.Value.IsZero
}

// emptyValue is encoding/json's test for omitempty.
func emptyValue(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Array, reflect.Map, reflect.Slice, reflect.String:
		return v.Len() == 0
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Interface, reflect.Pointer:
		return v.IsZero()
	}
	return false
}

// encodeCanonical writes the canonical form of v's JSON encoding to c.out,
// reporting false when encoding/json must decide.
func (c *canon) encodeCanonical(v any) bool {
	c.resetEncode(true)
	return c.encodeAny(v)
}

// encodeExact writes JSON that decodes as json.Marshal(v) does to c.out,
// reporting false when encoding/json must decide.
func (c *canon) encodeExact(v any) bool {
	c.resetEncode(false)
	return c.encodeAny(v)
}

func (c *canon) resetEncode(canonical bool) {
	c.reset(nil)
	c.canonicalMode = canonical
	c.budget = math.MaxInt // nesting is bounded by maxEncodeDepth
}

// encodeAny encodes a dynamic value, with shortcuts for the types JSON
// decodes to.
func (c *canon) encodeAny(v any) bool {
	switch v := v.(type) {
	case nil:
		c.out = append(c.out, "null"...)
		return true
	case string:
		return c.encodeString(v)
	case float64:
		return c.encodeFloat(v, 64)
	case bool:
		c.out = strconv.AppendBool(c.out, v)
		return true
	case int:
		c.encodeInt(int64(v))
		return true
	case map[string]any:
		if v == nil {
			c.out = append(c.out, "null"...)
			return true
		}
		return c.encodeAnyMap(v)
	case []any:
		if v == nil {
			c.out = append(c.out, "null"...)
			return true
		}
		if c.depth++; c.depth > maxEncodeDepth {
			return false
		}
		c.out = append(c.out, '[')
		for i, e := range v {
			if i > 0 {
				c.out = append(c.out, ',')
			}
			if !c.encodeAny(e) {
				return false
			}
		}
		c.out = append(c.out, ']')
		c.depth--
		return true
	}
	rv := reflect.ValueOf(v)
	return c.encode(rv, encoderFor(rv.Type()))
}

// encodeString reports false for invalid UTF-8, which encoding/json
// replaces; rare.
func (c *canon) encodeString(s string) bool {
	var ok bool
	c.out, ok = appendCanonicalString(c.out, s)
	return ok
}

func (c *canon) encodeInt(i int64) {
	if c.canonicalMode && (i > 1e15 || i < -1e15) {
		// RFC 8785 numbers are doubles: large integers are rounded, as
		// jcs parses them.
		c.out = appendES6Number(c.out, float64(i))
		return
	}
	c.out = strconv.AppendInt(c.out, i, 10)
}

func (c *canon) encodeUint(u uint64) {
	if c.canonicalMode && u > 1e15 {
		c.out = appendES6Number(c.out, float64(u))
		return
	}
	c.out = strconv.AppendUint(c.out, u, 10)
}

func (c *canon) encodeFloat(f float64, bits int) bool {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return false // encoding/json's error
	}
	if !c.canonicalMode {
		// 'g' with the shortest precision reads back as the same value.
		c.out = strconv.AppendFloat(c.out, f, 'g', -1, bits)
		return true
	}
	if bits == 32 {
		// encoding/json writes the shortest text of the float32, which
		// jcs reads as a double.
		var buf [32]byte
		f, _ = strconv.ParseFloat(string(strconv.AppendFloat(buf[:0], f, 'g', -1, 32)), 64)
	}
	c.out = appendES6Number(c.out, f)
	return true
}

// smallMap is the most members of a map[string]any sorted by key before
// they are written (rather than written, then reordered).
const smallMap = 16

// encodeAnyMap encodes a map[string]any.
func (c *canon) encodeAnyMap(m map[string]any) bool {
	if c.depth++; c.depth > maxEncodeDepth {
		return false
	}
	if !c.canonicalMode || len(m) <= smallMap {
		var names [smallMap]string
		keys := names[:0]
		if c.canonicalMode {
			for k := range m {
				keys = append(keys, k)
			}
			// Insertion sort: no duplicates, and few keys.
			for i := 1; i < len(keys); i++ {
				for j := i; j > 0 && compareUTF16(keys[j-1], keys[j]) > 0; j-- {
					keys[j-1], keys[j] = keys[j], keys[j-1]
				}
			}
		}
		c.out = append(c.out, '{')
		first := true
		write := func(k string, e any) bool {
			if !first {
				c.out = append(c.out, ',')
			}
			first = false
			var ok bool
			if c.out, ok = appendCanonicalString(c.out, k); !ok {
				return false
			}
			c.out = append(c.out, ':')
			return c.encodeAny(e)
		}
		if c.canonicalMode {
			for _, k := range keys {
				if !write(k, m[k]) {
					return false
				}
			}
		} else {
			for k, e := range m {
				if !write(k, e) {
					return false
				}
			}
		}
		c.out = append(c.out, '}')
		c.depth--
		return true
	}
	open, base, kbase := len(c.out), len(c.members), len(c.keys)
	c.out = append(c.out, '{')
	for k, e := range m {
		if !c.beginMember(base, k) {
			return false
		}
		if !c.encodeAny(e) {
			return false
		}
		c.endMember()
	}
	return c.endObject(open, base, kbase)
}

// beginMember starts an object member named k; its value follows.
func (c *canon) beginMember(base int, k string) bool {
	if len(c.members) > base {
		c.out = append(c.out, ',')
	}
	m := member{start: len(c.out), inKeys: true, ks: len(c.keys)}
	if c.canonicalMode {
		c.keys = append(c.keys, k...)
	}
	m.ke = len(c.keys)
	c.members = append(c.members, m)
	var ok bool
	if c.out, ok = appendCanonicalString(c.out, k); !ok {
		return false
	}
	c.out = append(c.out, ':')
	return true
}

func (c *canon) endMember() { c.members[len(c.members)-1].end = len(c.out) }

// endObject closes the object opened at out[open] whose members start at
// members[base] and keys at keys[kbase], sorting them in canonical mode.
func (c *canon) endObject(open, base, kbase int) bool {
	if c.canonicalMode && !c.sortMembers(open, c.members[base:]) {
		return false
	}
	c.members, c.keys = c.members[:base], c.keys[:kbase]
	c.out = append(c.out, '}')
	c.depth--
	return true
}

func (c *canon) encode(v reflect.Value, e *encoder) bool {
	switch e.kind {
	case encBool:
		c.out = strconv.AppendBool(c.out, v.Bool())
	case encInt:
		c.encodeInt(v.Int())
	case encUint:
		c.encodeUint(v.Uint())
	case encFloat32:
		return c.encodeFloat(v.Float(), 32)
	case encFloat64:
		return c.encodeFloat(v.Float(), 64)
	case encString:
		return c.encodeString(v.String())
	case encBytes:
		if v.IsNil() {
			c.out = append(c.out, "null"...)
			return true
		}
		c.out = append(c.out, '"')
		c.out = base64.StdEncoding.AppendEncode(c.out, v.Bytes())
		c.out = append(c.out, '"')
	case encStruct:
		return c.encodeStruct(v, e)
	case encMap:
		return c.encodeMap(v, e)
	case encSlice:
		if v.IsNil() {
			c.out = append(c.out, "null"...)
			return true
		}
		return c.encodeArray(v, e.elem)
	case encArray:
		return c.encodeArray(v, e.elem)
	case encPointer:
		if v.IsNil() {
			c.out = append(c.out, "null"...)
			return true
		}
		if c.depth++; c.depth > maxEncodeDepth {
			return false
		}
		ok := c.encode(v.Elem(), e.elem)
		c.depth--
		return ok
	case encInterface:
		if v.IsNil() {
			c.out = append(c.out, "null"...)
			return true
		}
		return c.encodeAny(v.Interface())
	case encMarshaler, encText:
		if v.Kind() == reflect.Pointer && v.IsNil() {
			c.out = append(c.out, "null"...)
			return true
		}
		return c.encodeMethod(v.Interface(), e.kind == encMarshaler)
	case encAddrMarshaler, encAddrText:
		if !v.CanAddr() {
			return c.encode(v, e.elem)
		}
		return c.encodeMethod(v.Addr().Interface(), e.kind == encAddrMarshaler)
	default:
		return false
	}
	return true
}

// encodeMethod encodes x with its MarshalJSON (asJSON) or MarshalText
// method; x is nil (a nil interface) when it has neither, and is null.
func (c *canon) encodeMethod(x any, asJSON bool) bool {
	if m, ok := x.(json.Marshaler); ok && asJSON {
		return c.encodeMarshaler(m)
	}
	if m, ok := x.(encoding.TextMarshaler); ok && !asJSON {
		return c.encodeText(m)
	}
	c.out = append(c.out, "null"...)
	return true
}

// encodeMarshaler writes what m.MarshalJSON returns, canonicalised or
// checked as encoding/json checks it.
func (c *canon) encodeMarshaler(m json.Marshaler) bool {
	b, err := m.MarshalJSON()
	if err != nil {
		return false
	}
	if !c.canonicalMode {
		if !json.Valid(b) {
			return false
		}
		c.out = append(c.out, b...)
		return true
	}
	sub := getCanon()
	defer putCanon(sub)
	if !sub.transform(b) {
		return false
	}
	c.out = append(c.out, sub.out...)
	return true
}

func (c *canon) encodeText(m encoding.TextMarshaler) bool {
	b, err := m.MarshalText()
	if err != nil {
		return false
	}
	var ok bool
	c.out, ok = appendCanonicalString(c.out, b)
	return ok
}

func (c *canon) encodeStruct(v reflect.Value, e *encoder) bool {
	if c.depth++; c.depth > maxEncodeDepth {
		return false
	}
	c.out = append(c.out, '{')
	first := len(c.out) // where the first member goes, without its comma
	for i := range e.fields {
		f := &e.fields[i]
		fv := v.Field(f.index)
		if f.omitEmpty && emptyValue(fv) || f.omitZero && f.isZero(fv) {
			continue
		}
		member := f.member
		if len(c.out) == first {
			member = member[1:]
		}
		c.out = append(c.out, member...)
		// The common kinds here, the rest through encode.
		switch f.enc.kind {
		case encString:
			if !c.encodeString(fv.String()) {
				return false
			}
		case encInt:
			c.encodeInt(fv.Int())
		default:
			if !c.encode(fv, f.enc) {
				return false
			}
		}
	}
	c.out = append(c.out, '}')
	c.depth--
	return true
}

func (c *canon) encodeArray(v reflect.Value, elem *encoder) bool {
	if c.depth++; c.depth > maxEncodeDepth {
		return false
	}
	c.out = append(c.out, '[')
	for i := range v.Len() {
		if i > 0 {
			c.out = append(c.out, ',')
		}
		if !c.encode(v.Index(i), elem) {
			return false
		}
	}
	c.out = append(c.out, ']')
	c.depth--
	return true
}

func (c *canon) encodeMap(v reflect.Value, e *encoder) bool {
	if v.IsNil() {
		c.out = append(c.out, "null"...)
		return true
	}
	if e.anyMap {
		return c.encodeAnyMap(v.Convert(anyMapType).Interface().(map[string]any))
	}
	if c.depth++; c.depth > maxEncodeDepth {
		return false
	}
	open, base, kbase := len(c.out), len(c.members), len(c.keys)
	c.out = append(c.out, '{')
	var num [24]byte
	it := v.MapRange()
	for it.Next() {
		k := it.Key()
		var name string
		switch {
		case e.stringKeys:
			name = k.String()
		case k.CanInt():
			name = string(strconv.AppendInt(num[:0], k.Int(), 10))
		default:
			name = string(strconv.AppendUint(num[:0], k.Uint(), 10))
		}
		if !c.beginMember(base, name) {
			return false
		}
		// Map values are not addressable, as in encoding/json.
		if !c.encode(it.Value(), e.elem) {
			return false
		}
		c.endMember()
	}
	return c.endObject(open, base, kbase)
}

var anyMapType = reflect.TypeFor[map[string]any]()

// encodeJSON is json.Marshal(v) for the default codec: the encoder's exact
// mode where it answers, which encoding/json decodes to the same value.
func encodeJSON(v any) ([]byte, error) {
	c := getCanon()
	defer putCanon(c)
	if c.encodeExact(v) {
		return bytes.Clone(c.out), nil
	}
	return json.Marshal(v)
}
