package guard

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/gowebpki/jcs"
)

// The encoder must agree with encoding/json (and jcs) whenever it answers:
// canonical mode gives jcs.Transform(json.Marshal(v)); exact mode gives text
// that decodes as json.Marshal(v) does; and where json.Marshal fails it
// does not answer.

type encLeaf struct {
	A string         `json:"a"`
	B *int           `json:"b,omitempty"`
	C []byte         `json:"c"`
	D map[int]string `json:"d,omitempty"`
	E [2]int8        `json:"e"`
}

type valueMarshaler struct{ N int }

func (v valueMarshaler) MarshalJSON() ([]byte, error) {
	return []byte(` { "z" : ` + strconv.Itoa(v.N) + `, "a": [1.50, 1e2, "\u00e9"] } `), nil
}

type pointerMarshaler struct{ N int }

func (p *pointerMarshaler) MarshalJSON() ([]byte, error) {
	if p == nil {
		return []byte(`"nil receiver"`), nil
	}
	return []byte(`{"ptr":` + strconv.Itoa(p.N) + `}`), nil
}

type failingMarshaler struct{}

func (failingMarshaler) MarshalJSON() ([]byte, error) { return nil, errors.New("no") }

type invalidMarshaler struct{}

func (invalidMarshaler) MarshalJSON() ([]byte, error) { return []byte(`{"a":}`), nil }

type valueText struct{ S string }

func (v valueText) MarshalText() ([]byte, error) { return []byte("text:" + v.S), nil }

type pointerText struct{ S string }

func (p *pointerText) MarshalText() ([]byte, error) { return []byte("ptext:" + p.S), nil }

type textKey int

func (k textKey) MarshalText() ([]byte, error) { return []byte("k" + strconv.Itoa(int(k))), nil }

type zeroer struct{ N int }

func (z zeroer) IsZero() bool { return z.N < 0 }

type ptrZeroer struct{ N int }

func (z *ptrZeroer) IsZero() bool { return z.N == 7 }

type meta map[string]any

type named string

type encAll struct {
	S        string             `json:"s"`
	I        int                `json:"i,omitempty"`
	I8       int8               `json:",omitempty"`
	I64      int64              `json:"i64"`
	U64      uint64             `json:"u64"`
	F32      float32            `json:"f32"`
	F64      float64            `json:"f64,omitempty"`
	Skip     bool               `json:"-"`
	Dash     int                `json:"-,"`
	P        *encLeaf           `json:"p"`
	L        []encLeaf          `json:"l"`
	LP       []*encLeaf         `json:"lp,omitempty"`
	M        map[string]any     `json:"m"`
	MU       map[uint8]float64  `json:"mu,omitempty"`
	MI       map[int64]*encLeaf `json:"mi,omitempty"`
	Meta     meta               `json:"meta,omitempty"`
	Any      any                `json:"any"`
	T        time.Time          `json:"t"`
	TZ       time.Time          `json:"tz,omitzero"`
	Raw      json.RawMessage    `json:"raw,omitempty"`
	VM       valueMarshaler     `json:"vm"`
	PM       pointerMarshaler   `json:"pm"`
	PMP      *pointerMarshaler  `json:"pmp"`
	PML      []pointerMarshaler `json:"pml,omitempty"`
	VT       valueText          `json:"vt"`
	PT       pointerText        `json:"pt"`
	Z        zeroer             `json:"z,omitzero"`
	PZ       ptrZeroer          `json:"pz,omitzero"`
	N        named              `json:"n,omitempty"`
	Accented string             `json:"wé,omitempty"`
	Amp      string             `json:"a&b,omitempty"`
	Bad      string             `json:"bad\\name,omitempty"` // an invalid tag name: the Go name is used
	Rec      *encAll            `json:"rec,omitempty"`
	private  int
}

type encEmbedded struct {
	encLeaf
	X int `json:"x"`
}

type encStringOpt struct {
	N int `json:"n,string"`
}

// encDup has two fields named "A": encoding/json drops the untagged one.
type encDup struct {
	A int
	B int `json:"A"`
}

func fullEncAll() encAll {
	n := 3
	return encAll{
		S: "héllo \"world\" <&> \u2028 \x01", I: -7, I8: -8, I64: 1<<62 + 1, U64: math.MaxUint64, F32: 0.1, F64: 1e21,
		P:  &encLeaf{A: "a", B: &n, C: []byte{0, 1, 2, 250}, D: map[int]string{10: "x", -2: "y", 3: "z"}, E: [2]int8{-1, 1}},
		L:  []encLeaf{{}, {A: "\U0001F600"}},
		LP: []*encLeaf{nil, {A: "p"}},
		M: map[string]any{"b": 1, "a": []any{1.5, "x", nil, true}, "\ue000": 1, "\U00010000": 2, "z": map[string]any{"y": nil},
			"t": textKey(3), "f": float32(0.3), "big": uint64(1) << 60},
		MU:   map[uint8]float64{2: 0.5, 10: 1, 1: -0.000001},
		MI:   map[int64]*encLeaf{-1: nil, 1: {A: "one"}},
		Meta: meta{"k": "v"},
		Any:  []int{1, 2},
		T:    time.Date(2026, 11, 22, 1, 2, 3, 4000, time.FixedZone("X", 3600)),
		Raw:  json.RawMessage(` [ {"b":1, "a":2} ] `),
		VM:   valueMarshaler{N: 1}, PM: pointerMarshaler{N: 2}, PMP: &pointerMarshaler{N: 3},
		PML: []pointerMarshaler{{N: 4}},
		VT:  valueText{S: "v"}, PT: pointerText{S: "p"}, Z: zeroer{N: -1}, PZ: ptrZeroer{N: 7},
		N: "named", Accented: "é", Amp: "&", Bad: "bad", Rec: &encAll{S: "inner"},
	}
}

// bigAnyMap has more members than smallMap, with keys whose UTF-16 and
// byte orders differ.
func bigAnyMap() map[string]any {
	m := map[string]any{"\ue000": 1, "\U00010000": 2, "\u00e9": "x", "": nil, "a\u0000": true}
	for i := range 40 {
		m["k"+strconv.Itoa(i)] = map[string]any{"n": i, "s": strconv.Itoa(i * 7)}
	}
	return m
}

// encodeCases are values of every supported shape and of the shapes left to
// encoding/json; fast lists which the encoder must answer itself.
func encodeCases() (values []any, fast []bool) {
	add := func(v any, f bool) { values = append(values, v); fast = append(fast, f) }
	n := 5
	for _, v := range []any{
		nil, true, 0, -1, 1 << 53, 1<<53 + 1, int64(-1 << 62), uint(7), uint64(1<<64 - 1), uintptr(9), int8(-3),
		0.0, math.Copysign(0, -1), 0.19, 1e-7, 1e21, 123456.789, 5e-324, math.MaxFloat64, float32(0.1), float32(1e-7), float32(16777217),
		"", "x", "é\n\"\\/<>&\u2028\u0000\u007f", []byte(nil), []byte{}, []byte("hi"), named("n"),
		[]any{}, map[string]any{}, []any{nil, 1.0, "a", []any{map[string]any{"b": 1.0, "a": 2.0}}},
		map[string]any{"\ue000": 1.0, "\U00010000": 2.0, "z": map[string]any{"y": nil, "x": []any{true}}},
		[]string{"b", "a"}, map[string]int{"b": 1, "a": 2}, map[int]bool{10: true, 9: false, -1: true}, map[uint16]string{},
		[3]string{"a"}, &n, (*int)(nil), []*int{nil, &n}, meta{"a": 1}, map[string]meta{"x": nil},
		encLeaf{}, &encLeaf{A: "x"}, encAll{}, fullEncAll(), &encAll{PZ: ptrZeroer{N: 6}}, []encAll{fullEncAll()},
		valueMarshaler{N: 9}, &valueMarshaler{N: 9}, pointerMarshaler{N: 1}, &pointerMarshaler{N: 1}, (*pointerMarshaler)(nil),
		[]pointerMarshaler{{N: 1}}, map[string]pointerMarshaler{"a": {N: 1}}, map[string]*pointerMarshaler{"a": nil},
		valueText{S: "x"}, pointerText{S: "y"}, &pointerText{S: "y"}, []pointerText{{S: "z"}},
		json.RawMessage(`{"b":[1,2.50],"a":null}`), time.Unix(0, 0).UTC(), []json.Marshaler{nil, valueMarshaler{}},
		bigAnyMap(), meta(bigAnyMap()), []any{bigAnyMap()},
		struct{ X any }{X: map[string]any{"a": []int{1}}},
	} {
		add(v, true)
	}
	for _, v := range []any{
		"\xff", map[string]any{"a\xff": 1.0}, math.NaN(), math.Inf(-1), []any{math.Inf(1)}, float32(math.Inf(1)),
		make(chan int), func() {}, complex(1, 2), map[bool]int{true: 1}, json.Number("1.50"), json.Number("x"),
		failingMarshaler{}, invalidMarshaler{}, encEmbedded{X: 1}, encStringOpt{N: 1}, encDup{A: 1},
		map[string]any{"x": make(chan int)}, valueText{S: "\xff"}, map[textKey]int{1: 1}, []any{json.Number("1.0")},
	} {
		add(v, false)
	}
	return values, fast
}

func TestEncodeMatchesMarshal(t *testing.T) {
	values, fast := encodeCases()
	for i, v := range values {
		if ok := checkEncode(t, v); ok != fast[i] {
			t.Errorf("encodeCanonical(%#v) answered %v, want %v", v, ok, fast[i])
		}
	}
}

// A recursive type, and a value nested beyond the encoder's depth, which
// encoding/json then decides.
func TestEncodeDeep(t *testing.T) {
	type node struct {
		Next *node `json:"next,omitempty"`
		N    int   `json:"n"`
	}
	var n *node
	for i := range 30 {
		n = &node{Next: n, N: i}
	}
	if !checkEncode(t, n) {
		t.Error("encoder gave up on a 30-deep list")
	}
	for i := range maxEncodeDepth {
		n = &node{Next: n, N: i}
	}
	if checkEncode(t, n) {
		t.Error("encoder answered beyond its depth")
	}
}

// checkEncode compares both modes with encoding/json on v and reports
// whether the canonical encoder answered.
func checkEncode(t *testing.T, v any) bool {
	t.Helper()
	want, merr := json.Marshal(v)
	if merr == nil {
		var err error
		if want, err = jcs.Transform(want); err != nil {
			merr = err
		}
	}
	c := getCanon()
	defer putCanon(c)
	ok := c.encodeCanonical(v)
	if ok && (merr != nil || !bytes.Equal(c.out, want)) {
		t.Errorf("encodeCanonical(%#v) = %s; json.Marshal and jcs: %s, %v", v, c.out, want, merr)
	}
	if c.encodeExact(v) {
		if merr != nil {
			t.Errorf("encodeExact(%#v) answered; json.Marshal failed: %v", v, merr)
		} else {
			checkSameDecoding(t, v, c.out)
		}
	}
	return ok
}

// checkSameDecoding fails t unless exact decodes, into v's type, as
// json.Marshal(v) does.
func checkSameDecoding(t *testing.T, v any, exact []byte) {
	t.Helper()
	if v == nil {
		if string(exact) != "null" {
			t.Errorf("encodeExact(nil) = %s", exact)
		}
		return
	}
	std, _ := json.Marshal(v)
	typ := reflect.TypeOf(v)
	want, got := reflect.New(typ), reflect.New(typ)
	werr := json.Unmarshal(std, want.Interface())
	gerr := json.Unmarshal(exact, got.Interface())
	if werr != nil {
		// Not decodable (a MarshalText without UnmarshalText, say): which
		// member fails first depends on member order, which may differ.
		if gerr == nil {
			t.Errorf("encodeExact(%#v) = %s decodes; json.Marshal's %s does not: %v", v, exact, std, werr)
		}
		return
	}
	if gerr != nil || !reflect.DeepEqual(want.Elem().Interface(), got.Elem().Interface()) {
		t.Errorf("encodeExact(%#v) = %s decodes to %#v, %v; json.Marshal's %s to %#v, %v", v, exact, got.Elem(), gerr, std, want.Elem(), werr)
	}
}

// FuzzEncodeMatchesMarshal: values decoded from arbitrary JSON into the
// test types encode as encoding/json and jcs would.
func FuzzEncodeMatchesMarshal(f *testing.F) {
	values, _ := encodeCases()
	for _, v := range values {
		if b, err := json.Marshal(v); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, typ := range []reflect.Type{
			reflect.TypeFor[encAll](), reflect.TypeFor[[]encLeaf](), reflect.TypeFor[map[string]any](),
			reflect.TypeFor[any](), reflect.TypeFor[map[int]float32](), reflect.TypeFor[[]*pointerMarshaler](),
		} {
			p := reflect.New(typ)
			_ = json.Unmarshal(b, p.Interface()) // partial values are fine
			checkEncode(t, p.Elem().Interface())
			checkEncode(t, p.Interface())
		}
	})
}

// appendES6Number (with its short-number path) writes what jcs does.
func TestES6NumberMatchesJCS(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	check := func(f float64) {
		t.Helper()
		want, err := jcs.NumberToJSON(f)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendES6Number(nil, f); string(got) != want {
			t.Fatalf("appendES6Number(%v) = %s, want %s", f, got, want)
		}
	}
	for _, f := range []float64{1e-6, 0.000001234, 0.19, 0.1 + 0.2, 1 << 50, 1<<50 - 0.5, 1<<49 + 0.25, 1e15, 99.99, 4503599627370495.5} {
		check(f)
		check(-f)
		check(math.Nextafter(f, 0))
		check(math.Nextafter(f, math.Inf(1)))
	}
	for range 300000 {
		var f float64
		switch rng.IntN(4) {
		case 0: // a price or rate: few digits, few decimals
			f = float64(rng.Int64N(1e9)) / pow10[rng.IntN(7)]
		case 1: // any double in the short range
			f = math.Float64frombits(rng.Uint64N(math.Float64bits(1 << 50)))
		case 2: // near the range's edges
			f = math.Nextafter(float64(rng.Int64N(1<<50)), 0) + float64(rng.IntN(3))
		default:
			f = math.Float64frombits(rng.Uint64())
			if math.IsNaN(f) || math.IsInf(f, 0) {
				continue
			}
		}
		check(f)
	}
}

func FuzzES6Number(f *testing.F) {
	for _, x := range []float64{0.19, 1e-6, 1 << 50, 123.456} {
		f.Add(x)
	}
	f.Fuzz(func(t *testing.T, x float64) {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return
		}
		want, err := jcs.NumberToJSON(x)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendES6Number(nil, x); string(got) != want {
			t.Fatalf("appendES6Number(%v) = %s, want %s", x, got, want)
		}
	})
}
