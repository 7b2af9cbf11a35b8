package canonjson

import (
	"encoding"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"sync"
)

// The encoder writes the canonical form of a Go value's encoding/json
// encoding in one pass, following a plan made once per type. Struct members
// have a fixed canonical order; map members are sorted by name before their
// values are written.

type kind uint8

const (
	kUnsupported kind = iota
	kBool
	kInt
	kUint
	kFloat32
	kFloat64
	kString
	kNumber // json.Number
	kRaw    // json.RawMessage
	kBytes  // a []byte, as base64
	kArray  // an array, or a slice (nil is null)
	kMap
	kStruct
	kPointer
	kInterface
	kMarshalJSON // the type's MarshalJSON
	kMarshalText // the type's MarshalText
	kAddrJSON    // (*T).MarshalJSON if the value is addressable, else elem
	kAddrText    // (*T).MarshalText if the value is addressable, else elem
)

// plan is how to encode a type.
type plan struct {
	kind   kind
	null   bool  // a nil value is null
	key    kind  // kMap: how names come from keys: kString, kInt, kUint or kMarshalText
	elem   *plan // kArray, kMap, kPointer: the elements; kAddr*: the plan without the method
	fields []field
}

var (
	plans      sync.Map // reflect.Type -> *plan
	plansMu    sync.Mutex
	marshaler  = reflect.TypeFor[json.Marshaler]()
	texter     = reflect.TypeFor[encoding.TextMarshaler]()
	rawType    = reflect.TypeFor[json.RawMessage]()
	numberType = reflect.TypeFor[json.Number]()
)

// planFor returns the plan for t, making it (and the plans of the types in
// it) on first use.
func planFor(t reflect.Type) *plan {
	if p, ok := plans.Load(t); ok {
		return p.(*plan)
	}
	plansMu.Lock()
	defer plansMu.Unlock()
	making := map[reflect.Type]*plan{}
	p := makePlan(t, making)
	for t, p := range making { // only complete plans are published
		plans.Store(t, p)
	}
	return p
}

func makePlan(t reflect.Type, making map[reflect.Type]*plan) *plan {
	if p, ok := plans.Load(t); ok {
		return p.(*plan)
	}
	if p, ok := making[t]; ok {
		return p // a recursive type: filled in below before anyone uses it
	}
	p := &plan{}
	making[t] = p
	*p = *methodPlan(t, true, making)
	return p
}

// methodPlan follows encoding/json's precedence: MarshalJSON, through the
// value's address if addr allows and it is addressable, then MarshalText
// likewise, then t's kind.
func methodPlan(t reflect.Type, addr bool, making map[reflect.Type]*plan) *plan {
	addr = addr && t.Kind() != reflect.Pointer
	var p *plan
	switch {
	case t == rawType:
		p = &plan{kind: kRaw} // its MarshalJSON, without an allocation
	case addr && reflect.PointerTo(t).Implements(marshaler):
		p = &plan{kind: kAddrJSON, elem: methodPlan(t, false, making)}
	case t.Implements(marshaler):
		p = &plan{kind: kMarshalJSON}
	case addr && reflect.PointerTo(t).Implements(texter):
		p = &plan{kind: kAddrText, elem: methodPlan(t, false, making)}
	case t.Implements(texter):
		p = &plan{kind: kMarshalText}
	default:
		p = kindPlan(t, making)
	}
	switch t.Kind() {
	case reflect.Pointer, reflect.Interface:
		p.null = true
	case reflect.Slice, reflect.Map: // unless a method encodes nil
		p.null = p.kind == kArray || p.kind == kBytes || p.kind == kMap || p.kind == kRaw
	}
	return p
}

// kindPlan is the plan for t's kind, ignoring its methods.
func kindPlan(t reflect.Type, making map[reflect.Type]*plan) *plan {
	p := &plan{kind: kindOf(t)}
	switch p.kind {
	case kString:
		if t == numberType {
			p.kind = kNumber
		}
	case kArray:
		e := t.Elem()
		if pe := reflect.PointerTo(e); t.Kind() == reflect.Slice && e.Kind() == reflect.Uint8 && !pe.Implements(marshaler) && !pe.Implements(texter) {
			p.kind = kBytes
			break
		}
		p.elem = makePlan(e, making)
	case kPointer:
		p.elem = makePlan(t.Elem(), making)
	case kMap:
		k := t.Key()
		switch p.key = kindOf(k); {
		case p.key == kString:
		case k.Implements(texter):
			p.key = kMarshalText
		case p.key != kInt && p.key != kUint:
			return &plan{kind: kUnsupported}
		}
		p.elem = makePlan(t.Elem(), making)
	case kStruct:
		p.fields = structFields(t)
		for i := range p.fields {
			p.fields[i].plan = makePlan(p.fields[i].typ, making)
		}
	}
	return p
}

// kindOf is the plan kind of t's kind, ignoring its methods.
func kindOf(t reflect.Type) kind {
	switch t.Kind() {
	case reflect.Bool:
		return kBool
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return kInt
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return kUint
	case reflect.Float32:
		return kFloat32
	case reflect.Float64:
		return kFloat64
	case reflect.String:
		return kString
	case reflect.Array, reflect.Slice:
		return kArray
	case reflect.Map:
		return kMap
	case reflect.Struct:
		return kStruct
	case reflect.Pointer:
		return kPointer
	case reflect.Interface:
		return kInterface
	}
	return kUnsupported // chan, func, complex, unsafe.Pointer
}

// maxHops bounds the pointers and interfaces on the way to a value; it
// stops cycles that add no nesting, such as a pointer to itself.
const maxHops = maxDepth

// encoder is the state of one encoding; it is reused (see state).
type encoder struct {
	out     []byte
	valid   bool
	depth   int     // arrays and objects around the value
	hops    int     // pointers and interfaces on the way to it
	members []entry // map members being sorted, a stack across nesting levels
	scratch []byte
	text    parser
}

// entry is a map member: its name, and its value unless the map is a
// map[string]any.
type entry struct {
	name string
	val  reflect.Value
}

func (e *encoder) str(s string) {
	var ok bool
	e.out, ok = appendString(e.out, s)
	e.valid = e.valid && ok
}

func (e *encoder) open(c byte) error {
	if e.depth++; e.depth > maxDepth {
		return fmt.Errorf("canonjson: nesting deeper than %d (a cycle?)", maxDepth)
	}
	e.out = append(e.out, c)
	return nil
}

func (e *encoder) close(c byte) {
	e.out = append(e.out, c)
	e.depth--
}

// jsonText appends the canonical form of JSON text b from a MarshalJSON
// method of t.
func (e *encoder) jsonText(b []byte, t reflect.Type) error {
	out, ok, err := e.text.canonical(e.out, b, e.depth)
	if err != nil {
		return fmt.Errorf("canonjson: calling MarshalJSON for type %v: %w", t, err)
	}
	e.out, e.valid = out, e.valid && ok
	return nil
}

// any encodes x; strings, the most common values, without reflection.
func (e *encoder) any(x any) error {
	switch x := x.(type) {
	case nil:
		e.out = append(e.out, "null"...)
		return nil
	case string:
		e.str(x)
		return nil
	}
	v := reflect.ValueOf(x)
	return e.value(v, planFor(v.Type()), false)
}

// object writes the map members from members[base:], sorted, with val
// writing a member's value, and pops them.
func (e *encoder) object(base int, val func(*entry) error) error {
	defer e.drop(base)
	if err := e.open('{'); err != nil {
		return err
	}
	ms := e.members[base:]
	if len(ms) <= smallObject {
		for i := 1; i < len(ms); i++ {
			for j := i; j > 0 && compareNames(ms[j-1].name, ms[j].name) > 0; j-- {
				ms[j-1], ms[j] = ms[j], ms[j-1]
			}
		}
	} else {
		slices.SortFunc(ms, func(a, b entry) int { return compareNames(a.name, b.name) })
	}
	for i := range ms {
		if i > 0 {
			if ms[i].name == ms[i-1].name {
				return fmt.Errorf("canonjson: duplicate member name %q", ms[i].name)
			}
			e.out = append(e.out, ',')
		}
		e.str(ms[i].name)
		e.out = append(e.out, ':')
		if err := val(&ms[i]); err != nil {
			return err
		}
	}
	e.close('}')
	return nil
}

// drop pops the map members from members[base:].
func (e *encoder) drop(base int) {
	clear(e.members[base:]) // let the pool not keep them
	e.members = e.members[:base]
}

// value encodes v as encoding/json would with plan p; quoted is the
// ",string" option of the field v is.
func (e *encoder) value(v reflect.Value, p *plan, quoted bool) error {
	if p.null && v.IsNil() {
		e.out = append(e.out, "null"...)
		return nil
	}
	switch p.kind {
	case kBool:
		e.quote(quoted)
		e.out = strconv.AppendBool(e.out, v.Bool())
		e.quote(quoted)
	case kInt:
		if quoted {
			e.out = append(strconv.AppendInt(append(e.out, '"'), v.Int(), 10), '"')
		} else {
			e.out = appendInt(e.out, v.Int())
		}
	case kUint:
		if quoted {
			e.out = append(strconv.AppendUint(append(e.out, '"'), v.Uint(), 10), '"')
		} else {
			e.out = appendUint(e.out, v.Uint())
		}
	case kFloat32, kFloat64:
		bits := 64
		if p.kind == kFloat32 {
			bits = 32
		}
		f := v.Float()
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return &json.UnsupportedValueError{Value: v, Str: strconv.FormatFloat(f, 'g', -1, bits)}
		}
		if quoted {
			e.out = append(appendJSONFloat(append(e.out, '"'), f, bits), '"')
		} else {
			e.out = appendFloat(e.out, f, bits)
		}
	case kString:
		if !quoted {
			e.str(v.String())
			break
		}
		// The string's encoding/json text, as a string.
		var ok bool
		e.scratch, ok = appendQuoted(e.scratch[:0], v.String(), true)
		e.valid = e.valid && ok
		e.out, _ = appendString(e.out, e.scratch)
	case kNumber:
		s := v.String()
		if s == "" {
			s = "0"
		}
		end, intDigits := scanNumber(s, 0)
		if end != len(s) {
			return fmt.Errorf("canonjson: invalid number literal %q", s)
		}
		if quoted {
			e.out = append(append(append(e.out, '"'), s...), '"')
			break
		}
		var err error
		e.out, err = appendNumberText(e.out, s, intDigits)
		return err
	case kRaw:
		return e.jsonText(v.Bytes(), v.Type())
	case kBytes:
		e.out = append(base64.StdEncoding.AppendEncode(append(e.out, '"'), v.Bytes()), '"')
	case kArray:
		if err := e.open('['); err != nil {
			return err
		}
		for i := range v.Len() {
			if i > 0 {
				e.out = append(e.out, ',')
			}
			if err := e.value(v.Index(i), p.elem, false); err != nil {
				return err
			}
		}
		e.close(']')
	case kMap:
		return e.mapValue(v, p)
	case kStruct:
		return e.structValue(v, p)
	case kPointer, kInterface:
		if e.hops++; e.hops > maxHops {
			return &json.UnsupportedValueError{Value: v, Str: fmt.Sprintf("more than %d pointers and interfaces deep (a cycle?)", maxHops)}
		}
		var err error
		if p.kind == kPointer {
			err = e.value(v.Elem(), p.elem, quoted)
		} else if v.CanInterface() {
			err = e.any(v.Interface())
		} else {
			err = e.value(v.Elem(), planFor(v.Elem().Type()), false)
		}
		e.hops--
		return err
	case kMarshalJSON, kMarshalText:
		return e.method(v, p.kind == kMarshalJSON)
	case kAddrJSON, kAddrText:
		if !v.CanAddr() {
			return e.value(v, p.elem, quoted)
		}
		return e.method(v.Addr(), p.kind == kAddrJSON)
	default:
		return &json.UnsupportedTypeError{Type: v.Type()}
	}
	return nil
}

func (e *encoder) quote(quoted bool) {
	if quoted {
		e.out = append(e.out, '"')
	}
}

// method encodes v with its MarshalJSON or MarshalText method; a nil
// interface is null.
func (e *encoder) method(v reflect.Value, isJSON bool) error {
	if isJSON {
		m, ok := reflect.TypeAssert[json.Marshaler](v)
		if !ok {
			e.out = append(e.out, "null"...)
			return nil
		}
		b, err := m.MarshalJSON()
		if err != nil {
			return &json.MarshalerError{Type: v.Type(), Err: err}
		}
		return e.jsonText(b, v.Type())
	}
	m, ok := reflect.TypeAssert[encoding.TextMarshaler](v)
	if !ok {
		e.out = append(e.out, "null"...)
		return nil
	}
	b, err := m.MarshalText()
	if err != nil {
		return fmt.Errorf("canonjson: calling MarshalText for type %v: %w", v.Type(), err)
	}
	var valid bool
	e.out, valid = appendString(e.out, b)
	e.valid = e.valid && valid
	return nil
}

func (e *encoder) structValue(v reflect.Value, p *plan) error {
	if err := e.open('{'); err != nil {
		return err
	}
	first := len(e.out) // where the first member goes, without its comma
	for i := range p.fields {
		f := &p.fields[i]
		fv := v.Field(f.index[0])
		if len(f.index) > 1 {
			var ok bool
			if fv, ok = promoted(fv, f.index[1:]); !ok {
				continue
			}
		}
		if f.omitEmpty && isEmpty(fv) || f.omitZero && f.isZero(fv) {
			continue
		}
		member := f.member
		if len(e.out) == first {
			member = member[1:]
		}
		e.out = append(e.out, member...)
		if err := e.value(fv, f.plan, f.quoted); err != nil {
			return err
		}
	}
	e.close('}')
	return nil
}

// promoted returns the field of the embedded struct v that index leads
// to, or false if it is behind a nil pointer.
func promoted(v reflect.Value, index []int) (reflect.Value, bool) {
	for _, i := range index {
		if v.Kind() == reflect.Pointer {
			if v.IsNil() {
				return v, false
			}
			v = v.Elem()
		}
		v = v.Field(i)
	}
	return v, true
}

func (e *encoder) mapValue(v reflect.Value, p *plan) error {
	base := len(e.members)
	if m, ok := reflect.TypeAssert[map[string]any](v); ok { // without reflect
		for k := range m {
			e.members = append(e.members, entry{name: k})
		}
		return e.object(base, func(me *entry) error { return e.any(m[me.name]) })
	}
	for it := v.MapRange(); it.Next(); {
		k := it.Key()
		var name string
		switch p.key {
		case kString:
			name = k.String()
		case kInt:
			name = strconv.FormatInt(k.Int(), 10)
		case kUint:
			name = strconv.FormatUint(k.Uint(), 10)
		default:
			if (k.Kind() == reflect.Pointer || k.Kind() == reflect.Interface) && k.IsNil() {
				break // named ""
			}
			m, _ := reflect.TypeAssert[encoding.TextMarshaler](k)
			b, err := m.MarshalText()
			if err != nil {
				e.drop(base)
				return fmt.Errorf("canonjson: calling MarshalText for map key of type %v: %w", k.Type(), err)
			}
			name = string(b)
		}
		e.members = append(e.members, entry{name: name, val: it.Value()})
	}
	return e.object(base, func(me *entry) error { return e.value(me.val, p.elem, false) })
}
