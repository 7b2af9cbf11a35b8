package guard

import (
	"encoding"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"unicode"
)

// The guard's fast JSON paths (the canonical encoder that keys inputs, and
// the result encoder and decoder of the default codec) work from the same
// view of a struct type as encoding/json. They handle a common subset of Go
// types and report anything else as unsupported, so that encoding/json
// decides: whenever a fast path succeeds its answer must be exactly
// encoding/json's.

// jsonField is a struct field as encoding/json sees it.
type jsonField struct {
	name      string       // the JSON member name
	index     int          // the field's index in its struct
	typ       reflect.Type // the field's type
	omitEmpty bool
	omitZero  bool
}

// isZeroer is what encoding/json's omitzero calls when a type has it.
type isZeroer interface{ IsZero() bool }

var (
	marshalerType     = reflect.TypeFor[json.Marshaler]()
	unmarshalerType   = reflect.TypeFor[json.Unmarshaler]()
	textMarshalerType = reflect.TypeFor[encoding.TextMarshaler]()
	textUnmarshaler   = reflect.TypeFor[encoding.TextUnmarshaler]()
	isZeroerType      = reflect.TypeFor[isZeroer]()
	numberType        = reflect.TypeFor[json.Number]()
)

// jsonStructFields returns the fields encoding/json encodes and decodes for
// the struct type t, in their declaration order, or false when t is outside
// the supported subset: an embedded field (whose promotion rules the fast
// paths do not implement), the ",string" option, or two fields with the
// same JSON name.
func jsonStructFields(t reflect.Type) ([]jsonField, bool) {
	var fields []jsonField
	for i := range t.NumField() {
		sf := t.Field(i)
		if sf.Anonymous {
			return nil, false
		}
		if !sf.IsExported() {
			continue
		}
		tag := sf.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if !validTagName(name) {
			name = sf.Name
		}
		f := jsonField{name: name, index: i, typ: sf.Type}
		for opts != "" {
			var o string
			o, opts, _ = strings.Cut(opts, ",")
			switch o {
			case "omitempty":
				f.omitEmpty = true
			case "omitzero":
				f.omitZero = true
			case "string":
				return nil, false
			}
		}
		fields = append(fields, f)
	}
	for i := range fields {
		for j := range i {
			if fields[i].name == fields[j].name {
				return nil, false
			}
		}
	}
	return slices.Clip(fields), true
}

// validTagName is encoding/json's isValidTag: whether a tag's name is
// used (else the field's Go name is).
func validTagName(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		switch {
		case strings.ContainsRune("!#$%&()*+-./:;<=>?@[]^_{|}~ ", c):
			// Backslash and quote chars are reserved, but otherwise any
			// punctuation chars are allowed in a tag name.
		case !unicode.IsLetter(c) && !unicode.IsDigit(c):
			return false
		}
	}
	return true
}
