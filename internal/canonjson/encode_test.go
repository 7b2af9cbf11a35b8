package canonjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gowebpki/jcs"
)

// oracle is what Append must write for v when v's strings are valid UTF-8:
// RFC 8785 of json.Marshal(v), by the reference implementation.
func oracle(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return jcs.Transform(b)
}

// checkOracle fails t unless Append(v) agrees with the oracle: the same
// bytes, valid, or an error where it fails.
func checkOracle(t *testing.T, v any) {
	t.Helper()
	want, werr := oracle(v)
	got, valid, err := Append(nil, v)
	switch {
	case werr != nil && err == nil:
		t.Errorf("Append(%#v) = %s, %v; the oracle fails: %v", v, got, valid, werr)
	case werr == nil && (err != nil || !valid || !bytes.Equal(got, want)):
		t.Errorf("Append(%#v) = %s, %v, %v; want %s", v, got, valid, err, want)
	}
}

// Defect: encoding/json accepts maps keyed by any string or integer kind,
// or by a type with MarshalText; the old encoder panicked on named string
// keys.
type (
	strKey     string
	intKey     int8
	uintKey    uint16
	textKey    struct{ A, B int } // MarshalText: "A-B"
	lossyKey   struct{ A, B int } // MarshalText: "A", so keys can collide
	textIntKey int                // MarshalText wins over the integer kind
	textStrKey string             // the string kind wins over MarshalText
	ptrTextKey int                // MarshalText on the pointer: not used for keys
	failKey    int                // MarshalText fails
)

func (k textKey) MarshalText() ([]byte, error)     { return fmt.Appendf(nil, "%d-%d", k.A, k.B), nil }
func (k lossyKey) MarshalText() ([]byte, error)    { return fmt.Appendf(nil, "%d", k.A), nil }
func (k textIntKey) MarshalText() ([]byte, error)  { return fmt.Appendf(nil, "k%d", int(k)), nil }
func (k textStrKey) MarshalText() ([]byte, error)  { return []byte("never"), nil }
func (k *ptrTextKey) MarshalText() ([]byte, error) { return []byte("never"), nil }
func (k failKey) MarshalText() ([]byte, error)     { return nil, errors.New("no") }

func TestMapKeys(t *testing.T) {
	tk := &textKey{1, 2}
	for _, v := range []any{
		map[strKey]any{"b": 1, "a": map[strKey]string{"y": "z"}, "": nil},
		map[strKey]int{"\u00e9": 1, "e": 2, "\U0001F600": 3, "\uFB33": 4},
		struct{ M map[strKey]any }{map[strKey]any{"k": []any{1}}},
		map[intKey]string{-128: "a", 0: "b", 127: "c", 5: "d"},
		map[uintKey]bool{65535: true, 0: false, 10: true, 9: false},
		map[int64]int{math.MaxInt64: 1, math.MinInt64: 2}, // names, not numbers: kept exactly
		map[uint64]int{math.MaxUint64: 1},
		map[textKey]int{{1, 2}: 1, {-1, 0}: 2, {10, 2}: 3},
		map[textIntKey]int{1: 1, 2: 2},
		map[ptrTextKey]int{3: 1},
		map[*textKey]int{tk: 1, nil: 2},
		map[lossyKey]int{{1, 2}: 1, {1, 3}: 2}, // both named "1": an error
		map[failKey]int{1: 1},
		map[strKey]any(nil), map[intKey]string{},
	} {
		checkOracle(t, v)
	}
	got, _, err := Append(nil, map[strKey]any{"b": 1, "a": 2})
	if err != nil || string(got) != `{"a":2,"b":1}` {
		t.Errorf("Append(map[strKey]any) = %s, %v", got, err)
	}
}

// badTags has tag names that encoding/json's classic rules ignore: with a
// backslash, with a quote.
type badTags struct {
	Bad   int `json:"a\\b"`
	Quote int `json:"q\"x"`
}

// The output follows encoding/json's classic rules in every build, also
// where GOEXPERIMENT=jsonv2 changes encoding/json (see classic_test.go), so
// that a key does not change with the build: a map key of a string kind is
// named by the string even if its type has MarshalText, a tag name with a
// quote or backslash is ignored, and map keys of other kinds than strings,
// integers and MarshalText are unsupported.
func TestClassicRules(t *testing.T) {
	for _, tc := range []struct {
		v    any
		want string
	}{
		{map[textStrKey]int{"s": 1}, `{"s":1}`},
		{badTags{1, 2}, `{"Bad":1,"Quote":2}`},
		{map[float64]int{1: 1}, ""}, {map[[2]int]int{}, ""}, {map[bool]int(nil), ""},
	} {
		got, _, err := Append(nil, tc.v)
		if string(got) != tc.want || (err == nil) != (tc.want != "") {
			t.Errorf("Append(%#v) = %s, %v; want %s", tc.v, got, err, tc.want)
		}
	}
}

// Defect: invalid UTF-8 and lone surrogates made different inputs
// canonicalise alike. Each pair differs only in such a string.
type (
	textOf   string // MarshalText returns the string
	jsonOf   string // MarshalJSON returns it as the string in {"s": ...}
	quotedOf struct {
		S string `json:"s,string"`
	}
)

func (s textOf) MarshalText() ([]byte, error) { return []byte(s), nil }
func (s jsonOf) MarshalJSON() ([]byte, error) { return []byte(`{"s":"` + string(s) + `"}`), nil }

func TestInvalidStringsStayApart(t *testing.T) {
	const a, b = "\x8a\x01\x02", "\x9b\x01\x02"
	for _, tc := range []struct {
		name string
		x, y any
	}{
		{"string", a, b},
		{"member value", map[string]any{"id": a}, map[string]any{"id": b}},
		{"member name", map[string]int{a: 1}, map[string]int{b: 1}},
		{"named key", map[strKey]int{a: 1}, map[strKey]int{b: 1}},
		{"struct field", struct{ ID string }{a}, struct{ ID string }{b}},
		{"MarshalText", textOf(a), textOf(b)},
		{"text map key", map[textIntKey]textOf{1: a}, map[textIntKey]textOf{1: b}},
		{"MarshalJSON", jsonOf("\xff"), jsonOf("\xfe")},
		{"RawMessage", json.RawMessage("{\"id\":\"\xff\"}"), json.RawMessage("{\"id\":\"\xfe\"}")},
		{"RawMessage name", json.RawMessage("{\"\xff\":1}"), json.RawMessage("{\"\xfe\":1}")},
		{"RawMessage surrogate", json.RawMessage(`"\ud800"`), json.RawMessage(`"\ud801"`)},
		{"RawMessage surrogate vs U+FFFD", json.RawMessage(`"\udc00"`), json.RawMessage(`"\ufffd"`)},
		{"MarshalJSON surrogate", jsonOf(`\udbff`), jsonOf(`\udfff`)},
		{",string", quotedOf{a}, quotedOf{b}},
		{"invalid vs U+FFFD", "\xff", "\ufffd"},
		{"truncated", "\xe2\x82", "\xe2\x83"},
		{"encoded surrogate", "\xed\xa0\x80", "\xed\xa0\x81"},
	} {
		x, xok, xerr := Append(nil, tc.x)
		y, yok, yerr := Append(nil, tc.y)
		if xerr != nil || yerr != nil {
			t.Errorf("%s: errors %v, %v", tc.name, xerr, yerr)
			continue
		}
		if bytes.Equal(x, y) {
			t.Errorf("%s: %#v and %#v both canonicalise to %q", tc.name, tc.x, tc.y, x)
		}
		for _, r := range []struct {
			out   []byte
			valid bool
			v     any
		}{{x, xok, tc.x}, {y, yok, tc.y}} {
			if utf8.Valid(r.out) != r.valid {
				t.Errorf("%s: Append(%#v) = %q, valid %v", tc.name, r.v, r.out, r.valid)
			}
			// The text form agrees.
			if t2, ok2, err := AppendText(nil, r.out); err != nil || ok2 != r.valid || !bytes.Equal(t2, r.out) {
				t.Errorf("%s: AppendText(%q) = %q, %v, %v; want it unchanged", tc.name, r.out, t2, ok2, err)
			}
		}
	}
	// What the old code did: encoding/json merges them.
	if x, _ := oracle(map[string]any{"id": a}); true {
		if y, _ := oracle(map[string]any{"id": b}); !bytes.Equal(x, y) {
			t.Errorf("json.Marshal no longer merges invalid bytes: %q, %q", x, y)
		}
	}
	// Lone surrogates in text, as values and names, also when the pair
	// is broken or reversed.
	for _, in := range []string{`"\ud800"`, `"\udc00"`, `{"\ud800":1}`, `["\ud800\u0041"]`, `"\udc00\ud800"`, `"\ud800\ud800"`, "\"\xff\"", "{\"a\xc3\":1}"} {
		out, valid, err := AppendText(nil, []byte(in))
		if err != nil || valid || utf8.Valid(out) {
			t.Errorf("AppendText(%q) = %q, %v, %v; want invalid output, valid false", in, out, valid, err)
		}
	}
	// A string stands for its bytes: the escaped lone surrogate is its
	// WTF-8 encoding; a pair is one character.
	for _, tc := range []struct{ in, want string }{
		{`"\ud800"`, "\"\xed\xa0\x80\""},
		{"\"\xed\xa0\x80\"", "\"\xed\xa0\x80\""},
		{`"\udbff\udfff"`, "\"\U0010FFFF\""},
		{`{"\ud800":1,"a":2,"\u00e9":3,"\uffff":4}`, "{\"a\":2,\"\u00e9\":3,\"\xed\xa0\x80\":1,\"\uffff\":4}"}, // by bytes, EF after ED
	} {
		if out, _, err := AppendText(nil, []byte(tc.in)); err != nil || string(out) != tc.want {
			t.Errorf("AppendText(%q) = %q, %v; want %q", tc.in, out, err, tc.want)
		}
	}
}

// The valid parts of an input with invalid strings can still be selected.
func TestSelectValidPart(t *testing.T) {
	doc, valid, err := Append(nil, map[string]any{"order": map[string]any{"id": "o-1", "n": 2}, "note": "\xff", "\xfe": 1})
	if err != nil || valid {
		t.Fatalf("Append = %q, %v, %v", doc, valid, err)
	}
	if sel := Select(doc, []string{"order"}); string(sel) != `{"id":"o-1","n":2}` || !utf8.Valid(sel) {
		t.Errorf("Select(order) = %q", sel)
	}
	if sel := Select(doc, []string{"note"}); utf8.Valid(sel) {
		t.Errorf("Select(note) = %q: valid UTF-8", sel)
	}
}

// Types for encoding/json's corner cases.
type (
	valJSON    struct{ N int }
	ptrJSON    struct{ N int }
	valText    struct{ N int }
	ptrText    struct{ N int }
	bothPtr    struct{ N int } // (*T).MarshalJSON and T.MarshalText
	failJSON   struct{}
	badJSON    string // MarshalJSON returns the string as it is
	byteText   byte   // MarshalText: []byteText is an array of strings
	bytePtr    byte   // (*T).MarshalJSON
	namedBytes []byte
	bytesJSON  []byte         // MarshalJSON
	ptrSlice   []int          // (*T).MarshalJSON: a nil one is null unless addressable
	ptrMap     map[string]int // (*T).MarshalText
	zeroer     struct{ N int }
	ptrZero    struct{ N int }
	ifaceZ     interface{ IsZero() bool }
)

func (v valJSON) MarshalJSON() ([]byte, error) {
	return fmt.Appendf(nil, `{"v": %d, "a": [ 1.50 ]}`, v.N), nil
}
func (v *ptrJSON) MarshalJSON() ([]byte, error)  { return fmt.Appendf(nil, `"p%d"`, v.N), nil }
func (v valText) MarshalText() ([]byte, error)   { return fmt.Appendf(nil, "t<%d>", v.N), nil }
func (v *ptrText) MarshalText() ([]byte, error)  { return fmt.Appendf(nil, "pt%d", v.N), nil }
func (v *bothPtr) MarshalJSON() ([]byte, error)  { return []byte(`"json"`), nil }
func (v bothPtr) MarshalText() ([]byte, error)   { return []byte("text"), nil }
func (failJSON) MarshalJSON() ([]byte, error)    { return nil, errors.New("fails") }
func (s badJSON) MarshalJSON() ([]byte, error)   { return []byte(s), nil }
func (b byteText) MarshalText() ([]byte, error)  { return fmt.Appendf(nil, "b%d", b), nil }
func (b *bytePtr) MarshalJSON() ([]byte, error)  { return fmt.Appendf(nil, "%d0", *b), nil }
func (b bytesJSON) MarshalJSON() ([]byte, error) { return []byte(`"own"`), nil }
func (s *ptrSlice) MarshalJSON() ([]byte, error) { return fmt.Appendf(nil, "%d", len(*s)), nil }
func (m *ptrMap) MarshalText() ([]byte, error)   { return fmt.Appendf(nil, "%d", len(*m)), nil }
func (z zeroer) IsZero() bool                    { return z.N < 0 }
func (z *ptrZero) IsZero() bool                  { return z == nil || z.N < 0 }

type (
	Base struct {
		ID   string `json:"id"`
		Name string
		Deep string `json:"deep"`
	}
	Other struct {
		Name  string // conflicts with Base.Name at the same depth: dropped
		Tag   string `json:"tag"`
		Extra int
	}
	Tagger struct {
		Extra int `json:"Extra"` // tagged: wins over Other.Extra
	}
	deeper struct{ Base } // Base's fields one level deeper
	hidden struct {
		Visible string // exported field of an unexported embedded struct
		secret  string
	}
	Twice  struct{ T string }
	Twice2 struct{ Twice }
	Embeds struct {
		Base
		Other
		Tagger
		*deeper           // its Base fields lose to the shallower ones
		hidden            // promoted, though the type is unexported
		*hiddenPtr        // through a nil pointer: skipped
		Twice             // T at depth 2
		Twice2            // T at depth 3: loses
		ID         string `json:"deep"` // tagged at depth 1: wins over Base.Deep
		Named      Base   `json:"named"`
		Tagged     Base   `json:"Base2"` // a named field, not promoted
		Anonymous  struct{ X int }
	}
	hiddenPtr struct{ P int }
	Leaf      struct{ L, M int }
	Left      struct{ Leaf }
	Right     struct {
		Leaf
		M int // shallower than Leaf.M
	}
	Diamond struct { // Leaf twice at depth 2: its L is ambiguous
		Left
		Right
	}
	Tie1 struct{ X int }
	Tie2 struct{ X int }
	Ties struct {
		Tie1
		Tie2 // both X at depth 2, untagged: neither encoded
		Y    int
	}
	Options struct {
		Dash       string         `json:"-"`
		DashName   string         `json:"-,"`
		Empty      string         `json:",omitempty"`
		Zero       int            `json:",omitzero"`
		ZeroT      zeroer         `json:",omitzero"`
		ZeroP      ptrZero        `json:",omitzero"` // IsZero on the pointer
		ZeroPP     *ptrZero       `json:",omitzero"`
		ZeroI      ifaceZ         `json:",omitzero"`
		ZeroTime   time.Time      `json:",omitzero"`
		EmptyS     []int          `json:",omitempty"`
		EmptyM     map[string]int `json:",omitempty"`
		EmptyP     *int           `json:",omitempty"`
		EmptyA     [0]int         `json:",omitempty"`
		EmptyStr   struct{}       `json:",omitempty"` // structs are never empty
		Both       int            `json:",omitempty,omitzero"`
		Punct      int            `json:"!#$%&()*+-./:;<=>?@[]^_{|}~ "`
		Unicode    int            `json:"ünï"`
		unexported int
	}
	Quoted struct {
		S    string      `json:"s,string"`
		I    int64       `json:"i,string"`
		U    uint8       `json:"u,string"`
		F    float64     `json:"f,string"`
		F32  float32     `json:"f32,string"`
		B    bool        `json:"b,string"`
		P    *int        `json:"p,string"`
		PS   *string     `json:"ps,string"`
		N    json.Number `json:"n,string"`
		Big  int64       `json:"big,string"`
		T    valText     `json:"t,string"` // methods ignore the option
		A    any         `json:"a,string"` // not applicable
		SL   []int       `json:"sl,string"`
		PP   **int       `json:"pp,string"`
		Tiny float64     `json:"tiny,string"`
		Huge float32     `json:"huge,string"`
	}
	Methods struct {
		V   valJSON
		PV  *valJSON
		P   ptrJSON // addressable when the struct is
		PP  *ptrJSON
		T   valText
		PT  ptrText
		B   bothPtr
		NP  *ptrJSON // nil
		NT  *valText // nil
		IM  json.Marshaler
		IT  fmt.Stringer
		Ps  []ptrJSON          // slice elements are addressable
		Pa  [1]ptrJSON         // array elements are when the array is
		Pm  map[string]ptrJSON // map values never are
		Ti  time.Time
		Raw json.RawMessage
		Num json.Number
		PS  ptrSlice
		PM  ptrMap
	}
	Bytes struct {
		B   []byte
		Nil []byte
		E   []byte
		NB  namedBytes
		BT  []byteText // an array of strings
		BP  []bytePtr  // an array: (*bytePtr).MarshalJSON on each
		Arr [3]byte    // an array of numbers
		Own bytesJSON
		PB  *[]byte
	}
)

func TestMatchesEncodingJSON(t *testing.T) {
	one, s := 1, "x<y"
	pone := &one
	methods := Methods{
		V: valJSON{1}, PV: &valJSON{2}, P: ptrJSON{3}, PP: &ptrJSON{4}, T: valText{5}, PT: ptrText{6},
		IM: valJSON{7}, IT: time.Duration(5), Ps: []ptrJSON{{8}}, Pa: [1]ptrJSON{{9}}, Pm: map[string]ptrJSON{"k": {10}},
		Ti: time.Date(2026, 11, 21, 12, 0, 0, 5, time.FixedZone("x", 3600)), Raw: json.RawMessage(` { "b" : 1 , "a" : 2 } `), Num: "1.50",
	}
	for _, v := range []any{
		nil, true, 0, -1, int8(-128), uint64(1 << 60), 1.5, float32(0.1), float32(16777217), float32(1e-7), float32(3.4e38),
		"", "x", "\u00e9\n\"\\/<>&\u2028\u2029\u0000\u001f\u007f\U0001F600", []string{"b", "a"}, []any{}, [0]int{}, [2]bool{true},
		map[string]any{}, map[string]int{"b": 1, "a": 2}, map[string]any{"z": []any{map[string]any{"y": nil}}},
		(*int)(nil), pone, &pone, []*int{nil, pone}, []any{nil, 1, "a", 1.5, true, []int{1}},
		Embeds{Base: Base{"i", "n", "d"}, Other: Other{"on", "t", 1}, Tagger: Tagger{2}, deeper: &deeper{Base{"x", "y", "z"}},
			hidden: hidden{"v", "s"}, Twice: Twice{"t1"}, Twice2: Twice2{Twice{"t2"}}, ID: "top", Named: Base{ID: "nm"}},
		Embeds{}, &Embeds{}, Ties{Tie1{1}, Tie2{2}, 3}, Diamond{Left{Leaf{1, 2}}, Right{Leaf{3, 4}, 5}},
		Options{Dash: "d", DashName: "dn", ZeroT: zeroer{-1}, ZeroP: ptrZero{-1}, ZeroPP: &ptrZero{-1}, ZeroI: zeroer{-1}, Both: 0},
		Options{Empty: "e", Zero: 1, ZeroT: zeroer{0}, ZeroP: ptrZero{1}, ZeroPP: &ptrZero{1}, ZeroI: zeroer{1},
			ZeroTime: time.Unix(0, 0).UTC(), EmptyS: []int{}, EmptyM: map[string]int{}, EmptyP: &one, Both: 2},
		&Options{ZeroP: ptrZero{-1}}, Options{ZeroI: (*ptrZero)(nil)}, Options{ZeroI: &ptrZero{-1}},
		Quoted{S: s, I: -5, U: 7, F: 1e21, F32: 1e-7, B: true, P: &one, PS: &s, N: "12.50", Big: math.MaxInt64,
			T: valText{1}, A: 1.5, SL: []int{1}, PP: &pone, Tiny: 1e-7, Huge: 1e21},
		Quoted{S: "\u2028\x00\t\"\\"}, Quoted{N: ""}, Quoted{N: "1e400"},
		methods, &methods, []Methods{methods}, map[string]Methods{"m": methods},
		Bytes{B: []byte("hello\xff"), E: []byte{}, NB: namedBytes("nb"), BT: []byteText{1, 2}, BP: []bytePtr{3},
			Arr: [3]byte{1, 2, 3}, Own: bytesJSON("x"), PB: &[]byte{0xfb, 0xff}},
		[]byteText{1}, []bytePtr{1}, // addressable as slice elements
		ptrSlice(nil), ptrSlice{1}, ptrMap(nil), ptrMap{"a": 1}, []ptrSlice{nil, {1}}, []ptrMap{nil},
		json.Number("0"), json.Number("-1.5e-7"), json.Number(""), json.Number("1e5000"), json.Number("01"), json.Number("x"),
		json.RawMessage(nil), json.RawMessage("null"), json.RawMessage(" \n[ 1e2 ]\t"), json.RawMessage("{"), json.RawMessage(""),
		json.RawMessage(`{"a":1,"a":2}`), badJSON(`{"b":2,"a":1}`), badJSON(""), badJSON("1 2"), badJSON(`"\u00e9\u2028<"`),
		failJSON{}, []any{failJSON{}}, valText{1}, &ptrText{2}, ptrText{3},
		time.Time{}, time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2020, 1, 1, 0, 0, 0, 0, time.FixedZone("s", 30)),
		make(chan int), func() {}, complex(1, 2), []any{make(chan int)}, map[string]any{"f": func() {}},
		[]chan int{}, map[string]func(){}, (*chan int)(nil), struct{ C chan int }{}, struct {
			C chan int `json:",omitzero"`
		}{}, struct {
			F func() `json:",omitempty"`
		}{},
		math.NaN(), []float32{float32(math.Inf(1))}, map[string]any{"x": math.Inf(-1)},
		struct{ A, B any }{A: struct{}{}, B: &struct{ X []any }{}},
	} {
		checkOracle(t, v)
	}
}

func TestCycles(t *testing.T) {
	type node struct {
		Next *node
		Any  any
	}
	n := &node{}
	n.Next = n
	var self any
	self = &self
	m := map[string]any{}
	m["m"] = m
	s := []any{nil}
	s[0] = s
	a := &node{}
	a.Any = a
	for _, v := range []any{n, self, m, s, a, &self} {
		if got, _, err := Append(nil, v); err == nil {
			t.Errorf("Append(cyclic %T) = %.40s..., want an error", v, got)
		}
	}
}

// Errors say what failed.
func TestErrors(t *testing.T) {
	for _, tc := range []struct {
		v    any
		want string
	}{
		{make(chan int), "unsupported type"},
		{math.Inf(1), "unsupported value"},
		{failJSON{}, "fails"},
		{badJSON("{"), "MarshalJSON"},
		{map[failKey]int{1: 1}, "MarshalText"},
		{map[lossyKey]int{{1, 2}: 1, {1, 3}: 2}, "duplicate"},
		{json.Number("1e999"), "range"},
		{json.Number("x"), "invalid number"},
	} {
		_, _, err := Append(nil, tc.v)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Append(%#v) error %v, want one mentioning %q", tc.v, err, tc.want)
		}
	}
	var ute *json.UnsupportedTypeError
	if _, _, err := Append(nil, []any{func() {}}); !errors.As(err, &ute) || ute.Type != reflect.TypeFor[func()]() {
		t.Errorf("Append(func) error %v, want a *json.UnsupportedTypeError", err)
	}
	var me *json.MarshalerError
	if _, _, err := Append(nil, failJSON{}); !errors.As(err, &me) {
		t.Errorf("Append(failJSON) error %v, want a *json.MarshalerError", err)
	}
}

// Plans are made once per type, also by goroutines racing for them.
func TestConcurrentPlans(t *testing.T) {
	type R struct {
		Self []R
		M    map[strKey]R
		N    int
	}
	v := R{Self: []R{{N: 1}}, M: map[strKey]R{"k": {N: 2}}}
	want, _ := oracle(v)
	done := make(chan error)
	for range 4 {
		go func() {
			got, _, err := Append(nil, v)
			if err == nil && !bytes.Equal(got, want) {
				err = fmt.Errorf("got %s, want %s", got, want)
			}
			done <- err
		}()
	}
	for range 4 {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}
