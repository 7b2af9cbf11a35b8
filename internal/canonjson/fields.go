package canonjson

import (
	"cmp"
	"reflect"
	"slices"
	"strings"
	"unicode"
)

// field is a struct field as encoding/json encodes it.
type field struct {
	name      string
	member    []byte // `,"name":`
	index     []int  // from the struct, through embedded structs
	tagged    bool
	omitEmpty bool
	omitZero  bool
	quoted    bool                     // the ",string" option
	isZero    func(reflect.Value) bool // for omitzero
	typ       reflect.Type
	plan      *plan
}

// isZeroer is the method omitzero uses when a type has it.
type isZeroer interface{ IsZero() bool }

var isZeroerType = reflect.TypeFor[isZeroer]()

// structFields returns the fields encoding/json encodes for the struct type
// t, in RFC 8785 order of their names. It follows encoding/json's rules:
// exported fields and the fields of embedded structs (also unexported ones,
// and through pointers), the "json" tag's name (if valid), "-" and the
// options omitempty, omitzero and string; of fields with the same name the
// shallowest wins, then a tagged one, and if that leaves two, neither is
// encoded.
func structFields(t reflect.Type) []field {
	type embedded struct {
		typ   reflect.Type
		index []int
	}
	var fields []field
	next := []embedded{{typ: t}}
	visited := map[reflect.Type]bool{}
	for len(next) > 0 {
		current := next
		next = nil
		count := map[reflect.Type]int{} // how often a type is embedded at this depth
		for _, e := range current {
			count[e.typ]++
		}
		for _, e := range current {
			if visited[e.typ] {
				continue
			}
			visited[e.typ] = true
			for i := range e.typ.NumField() {
				sf := e.typ.Field(i)
				ft := sf.Type
				if ft.Name() == "" && ft.Kind() == reflect.Pointer {
					ft = ft.Elem()
				}
				if sf.Anonymous && !sf.IsExported() && ft.Kind() != reflect.Struct ||
					!sf.Anonymous && !sf.IsExported() {
					continue
				}
				tag := sf.Tag.Get("json")
				if tag == "-" {
					continue
				}
				name, opts, _ := strings.Cut(tag, ",")
				if !validName(name) {
					name = ""
				}
				index := append(slices.Clip(e.index), i)
				if name == "" && sf.Anonymous && ft.Kind() == reflect.Struct {
					next = append(next, embedded{ft, index})
					continue
				}
				f := field{name: name, tagged: name != "", index: index, typ: sf.Type}
				if name == "" {
					f.name = sf.Name
				}
				for opts != "" {
					var o string
					o, opts, _ = strings.Cut(opts, ",")
					switch o {
					case "omitempty":
						f.omitEmpty = true
					case "omitzero":
						f.omitZero = true
						f.isZero = zeroTest(sf.Type)
					case "string":
						switch ft.Kind() {
						case reflect.Bool, reflect.String, reflect.Float32, reflect.Float64,
							reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
							reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
							f.quoted = true
						}
					}
				}
				fields = append(fields, f)
				if count[e.typ] > 1 {
					// Embedded twice at this depth: a duplicate, so that
					// the field is dropped below.
					fields = append(fields, f)
				}
			}
		}
	}
	// Of the fields with one name, the dominant one: the shallowest, then
	// a tagged one; none if two tie.
	slices.SortStableFunc(fields, func(a, b field) int {
		if c := strings.Compare(a.name, b.name); c != 0 {
			return c
		}
		if c := cmp.Compare(len(a.index), len(b.index)); c != 0 {
			return c
		}
		if a.tagged != b.tagged {
			if a.tagged {
				return -1
			}
			return 1
		}
		return 0
	})
	out := fields[:0]
	for i := 0; i < len(fields); {
		j := i + 1
		for j < len(fields) && fields[j].name == fields[i].name {
			j++
		}
		if j == i+1 || len(fields[i].index) < len(fields[i+1].index) || fields[i].tagged != fields[i+1].tagged {
			out = append(out, fields[i])
		}
		i = j
	}
	slices.SortFunc(out, func(a, b field) int { return compareNames(a.name, b.name) })
	for i := range out {
		out[i].member, _ = appendString([]byte{','}, out[i].name) // valid: see validName
		out[i].member = append(out[i].member, ':')
	}
	return slices.Clip(out)
}

// validName reports whether encoding/json uses a tag's name (else the
// field's Go name): letters, digits and punctuation other than quotes and
// backslash.
func validName(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		switch {
		case strings.ContainsRune("!#$%&()*+-./:;<=>?@[]^_{|}~ ", c):
		case !unicode.IsLetter(c) && !unicode.IsDigit(c):
			return false
		}
	}
	return true
}

// zeroTest is encoding/json's omitzero test for a field of type t: its
// IsZero method if it has one, else reflect's.
func zeroTest(t reflect.Type) func(reflect.Value) bool {
	switch {
	case t.Kind() == reflect.Interface && t.Implements(isZeroerType):
		return func(v reflect.Value) bool {
			return v.IsNil() || v.Elem().Kind() == reflect.Pointer && v.Elem().IsNil() || v.Interface().(isZeroer).IsZero()
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

// isEmpty is encoding/json's omitempty test.
func isEmpty(v reflect.Value) bool {
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
