package guard

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

// Target types for the decoder tests: what results are usually made of,
// and some of what the fast path leaves to encoding/json.

type decCharge struct {
	ChargeID string `json:"charge_id"`
	Amount   int    `json:"amount"`
}

type decName string

type decItem struct {
	SKU   string   `json:"sku"`
	Qty   uint16   `json:"qty"`
	Price float64  `json:"price"`
	Tags  []string `json:"tags,omitempty"`
}

type decCustomer struct {
	ID      string            `json:"id"`
	Name    string            `json:"name"`
	Email   *string           `json:"email"`
	Address map[string]string `json:"address"`
	VIP     bool              `json:"vip"`
}

type decOrder struct {
	ID       string          `json:"id"`
	Customer *decCustomer    `json:"customer"`
	Items    []decItem       `json:"items"`
	Meta     map[string]any  `json:"meta"`
	Extra    any             `json:"extra"`
	Created  time.Time       `json:"created"`
	Shipped  *time.Time      `json:"shipped"`
	Total    float32         `json:"total"`
	Flags    [3]bool         `json:"flags"`
	Blob     []byte          `json:"blob"`
	Small    int8            `json:"small"`
	Tiny     uint8           // no tag: matched by its Go name
	Next     *decOrder       `json:"next"`
	Ptr      **int64         `json:"ptr"`
	Skipped  string          `json:"-"`
	Dash     string          `json:"-,"`
	Named    decName         `json:"named"`
	Counts   map[decName]int `json:"counts"`
	Grid     [][2]int        `json:"grid"`
	Big      uint64          `json:"big"`
	Neg      int64           `json:"neg"`
	Ptrs     []*decItem      `json:"ptrs"`
	Unicode  string          `json:"ünïcode"`
	hidden   int
}

// More than manyFields fields, so names are looked up in maps.
type decWide struct {
	A, B, C, D, E, F, G, H, I, J int
	Kelvin                       string `json:"K"` // U+212A KELVIN SIGN folds to K
	Long                         string `json:"ſ"` // U+017F LATIN SMALL LETTER LONG S folds to S
}

// Fields only case apart.
type decCase struct {
	ID string `json:"ID"`
	Id string
	X  int `json:"x"`
}

type decKelvin struct {
	Kelvin string `json:"K"`
}

// Named types and unnamed structs.
type (
	decMap      map[string]any
	decSlice    []decItem
	decAnyNamed any
	decBytes    []byte
	decMisc     struct {
		P     *any `json:"p"`
		Inner struct {
			A int `json:"a"`
			B []string
		} `json:"inner"`
		M decMap      `json:"m"`
		S decSlice    `json:"s"`
		N decAnyNamed `json:"n"`
		B decBytes    `json:"b"`
	}
)

// Outside the subset: each makes the fast path give up.
type (
	decEmbedded struct {
		decCharge
		X int
	}
	decStringOpt struct {
		N int `json:",string"`
	}
	decUnmarshaler struct{ S string }
	decText        struct{ S string }
	decWithNumber  struct {
		N json.Number `json:"n"`
	}
	decWithRaw struct {
		R json.RawMessage `json:"r"`
	}
	decWithChan struct {
		C chan int `json:"c"`
	}
	decKeyText          string
	decValueUnmarshaler struct{ S string }
	decTimePtr          *time.Time
	decWithNamedPtr     struct {
		T decTimePtr `json:"t"`
	}
)

func (u *decUnmarshaler) UnmarshalJSON(b []byte) error { u.S = "json:" + string(b); return nil }
func (u *decText) UnmarshalText(b []byte) error        { u.S = "text:" + string(b); return nil }
func (k *decKeyText) UnmarshalText(b []byte) error     { *k = decKeyText("key:" + string(b)); return nil }
func (decValueUnmarshaler) UnmarshalJSON([]byte) error { return nil }

// decWide70 has more than 64 fields, so repeated members are tracked in a
// slice.
var decWide70 = func() reflect.Type {
	var fs []reflect.StructField
	for i := range 70 {
		fs = append(fs, reflect.StructField{
			Name: fmt.Sprintf("F%d", i),
			Type: reflect.TypeFor[int](),
			Tag:  reflect.StructTag(fmt.Sprintf(`json:"f%d"`, i)),
		})
	}
	return reflect.StructOf(fs)
}()

type decTarget struct {
	name string
	new  func() any
}

func newOf[T any]() func() any { return func() any { return new(T) } }

var decTargets = []decTarget{
	{"charge", newOf[decCharge]()},
	{"order", newOf[decOrder]()},
	{"*order", newOf[*decOrder]()},
	{"wide", newOf[decWide]()},
	{"wide70", func() any { return reflect.New(decWide70).Interface() }},
	{"case", newOf[decCase]()},
	{"kelvin", newOf[decKelvin]()},
	{"any", newOf[any]()},
	{"map", newOf[map[string]any]()},
	{"map-items", newOf[map[string]*decItem]()},
	{"map-named", newOf[map[decName][]int]()},
	{"[]any", newOf[[]any]()},
	{"[]int", newOf[[]int]()},
	{"[]string", newOf[[]string]()},
	{"[2]uint8", newOf[[2]uint8]()},
	{"[0]int", newOf[[0]int]()},
	{"[]byte", newOf[[]byte]()},
	{"string", newOf[string]()},
	{"bool", newOf[bool]()},
	{"int", newOf[int]()},
	{"int8", newOf[int8]()},
	{"uint16", newOf[uint16]()},
	{"uintptr", newOf[uintptr]()},
	{"uint64", newOf[uint64]()},
	{"float32", newOf[float32]()},
	{"float64", newOf[float64]()},
	{"**int", newOf[**int]()},
	{"time", newOf[time.Time]()},
	{"*time", newOf[*time.Time]()},
	{"[]time", newOf[[]time.Time]()},
	{"misc", newOf[decMisc]()},
	// Outside the subset.
	{"embedded", newOf[decEmbedded]()},
	{"stringopt", newOf[decStringOpt]()},
	{"unmarshaler", newOf[decUnmarshaler]()},
	{"text", newOf[decText]()},
	{"number", newOf[decWithNumber]()},
	{"raw", newOf[decWithRaw]()},
	{"chan", newOf[decWithChan]()},
	{"named-ptr-field", newOf[decWithNamedPtr]()},
	{"map-int", newOf[map[int]string]()},
	{"map-text-key", newOf[map[decKeyText]int]()},
	{"value-unmarshaler", newOf[decValueUnmarshaler]()},
	{"stringer", newOf[fmt.Stringer]()},
	{"complex", newOf[complex128]()},
}

// decInputs are decoded into every target: valid and invalid JSON, and
// valid JSON that fits some targets and not others.
var decInputs = []string{
	// The replayed result and its variations.
	`{"amount":100,"charge_id":"ch_123"}`,
	` {"charge_id" : "ch_123" , "amount" : -7 } `,
	`{"charge_id":"ch_\u00e9\ud83d\ude00\n\t\"\\\/","amount":0}`,
	`{"charge_id":"ch_1","amount":1,"unknown":{"a":[1,2,{"b":null}],"c":"\u0000"}}`,
	`{"charge_id":"ch_1","charge_id":"ch_2"}`,
	`{"amount":1,"amount":null}`,
	`{"CHARGE_ID":"x"}`,
	`{"Amount":1}`,
	`{"charge_id":null,"amount":null}`,
	`{"charge_id":1}`,
	`{"amount":"1"}`,
	`{"amount":1.0}`,
	`{"amount":1e2}`,
	`{"amount":-0}`,
	`{"amount":9223372036854775807}`,
	`{"amount":9223372036854775808}`,
	`{"amount":-9223372036854775808}`,
	`{"amount":-9223372036854775809}`,
	`{"amount":01}`,
	`{"amount":1,}`,
	`{"amount":1}}`,
	`{"amount":1} x`,
	`{"amount":1`,
	`{"amount" 1}`,
	`{amount:1}`,
	`{"charge_id":"ch_\x01"}`,
	"{\"charge_id\":\"\xff\"}",
	`{"charge_id":"\ud800"}`,
	`{"charge_id":"\udc00\ud800"}`,
	`{"charge_id":"\ud83d\u0041"}`,
	`{"charge_id":"\'"}`,
	`{"charge_id":"\x"}`,
	`{"charge_id":"\u12"}`,
	`{"chargé":1}`,
	"{\"\xff\":1}",
	`{"\u0061mount":5}`,
	// A full order.
	`{"id":"o-1","customer":{"id":"c-1","name":"Ann","email":"a@example.com","address":{"city":"Oslo","zip":"0150"},"vip":true},
	  "items":[{"sku":"A","qty":2,"price":9.99,"tags":["x","y"]},{"sku":"B","qty":65535,"price":-1e-3}],
	  "meta":{"k":[1,"two",true,null,{"n":1.5}],"e":{}},"extra":[{}],
	  "created":"2024-05-06T07:08:09.123456789Z","shipped":"2024-05-07T00:00:00+02:00","total":12.5,
	  "flags":[true,false,true,true],"blob":"aGVsbG8=","small":-128,"Tiny":255,
	  "next":{"id":"o-2","next":null,"items":[]},"ptr":42,"-":"dash","named":"n","counts":{"a":1,"b":2},
	  "grid":[[1,2],[3],[4,5,6]],"big":18446744073709551615,"neg":-9223372036854775808,
	  "ptrs":[null,{"sku":"C"}],"ünïcode":"ok"}`,
	`{"id":"o-1","items":null,"meta":null,"extra":null,"created":null,"shipped":null,"flags":null,"blob":null,"next":null,"ptr":null,"counts":null,"grid":null,"customer":null}`,
	`{"items":[],"meta":{},"grid":[],"ptrs":[],"blob":""}`,
	`{"blob":[1,2,255]}`,
	`{"blob":[256]}`,
	`{"blob":"aGVsbG8"}`,
	`{"blob":"aGVs\nbG8="}`,
	`{"blob":"aGVs\r\nbG8="}`,
	`{"blob":"!!!!"}`,
	`{"created":"2024-13-01T00:00:00Z"}`,
	`{"created":"2024-01-01T00:00:00\u005a"}`,
	`{"created":1}`,
	`{"created":{}}`,
	`{"shipped":"2024-01-01T00:00:00Z"}`,
	`{"small":128}`,
	`{"small":-129}`,
	`{"Tiny":-1}`,
	`{"Tiny":256}`,
	`{"big":18446744073709551616}`,
	`{"big":-0}`,
	`{"big":1e1}`,
	`{"total":3.4028235e38}`,
	`{"total":3.5e38}`,
	`{"total":1e-50}`,
	`{"total":-0.0}`,
	`{"flags":[true]}`,
	`{"flags":[1]}`,
	`{"flags":[true,false,true,"extra",{"x":[]}]}`,
	`{"flags":[true,false,true,tru]}`,
	`{"grid":[[1,2,3,4]]}`,
	`{"next":{"next":{"next":{"id":"deep"}}}}`,
	`{"id":"a","ID":"b"}`,
	`{"ID":"b"}`,
	`{"tiny":1}`,
	`{"ÜNÏCODE":"x"}`,
	`{"ünïcode":"x","ünïcode":"y"}`,
	`{"counts":{"a":1,"a":2}}`,
	// Repeated members: encoding/json decodes the last into what the
	// first made.
	`{"customer":{"id":"a"},"customer":{"name":"b"}}`,
	`{"meta":{"a":1},"meta":{"b":2}}`,
	`{"counts":{"a":1},"counts":{"b":2}}`,
	`{"flags":[true,true,true],"flags":[false]}`,
	`{"items":[{"sku":"a"},{"sku":"b"}],"items":[{"qty":1}]}`,
	`{"extra":{"a":1},"extra":{"b":2}}`,
	`{"inner":{"a":1},"inner":{"B":["x"]}}`,
	`{"p":{"a":1},"p":{"b":2}}`,
	`{"counts":{"a":1.5}}`,
	`{"meta":{"a":1,"a":{"b":2}}}`,
	`{"extra":1e400}`,
	`{"extra":-1e-400}`,
	`{"customer":{"email":null}}`,
	`{"customer":[]}`,
	`{"ptrs":[{"sku":"a","SKU":"b"}]}`,
	// For the wide and case targets.
	`{"A":1,"B":2,"J":10,"K":"kelvin","ſ":"long s"}`,
	`{"k":"x"}`,
	`{"s":"x"}`,
	`{"a":1}`,
	`{"Z":1,"zz":2}`,
	`{"K":"x"}`,
	`{"K":"x"}`,
	`{"ID":"1","Id":"2","x":3}`,
	`{"id":"1"}`,
	`{"iD":"1"}`,
	`{"X":3}`,
	`{"f0":1,"f69":2,"f35":3}`,
	`{"f0":1,"f69":2,"f69":3}`,
	`{"F1":1}`,
	// For misc.
	`{"p":1,"inner":{"a":1,"B":["x"]},"m":{"a":[1]},"s":[{"sku":"a"}],"n":{"x":null},"b":"AAE="}`,
	`{"p":null,"inner":null,"m":null,"s":null,"n":null,"b":null}`,
	`{"p":{"q":[]},"inner":{"b":[]}}`,
	// Maps and slices.
	`{"a":{"sku":"x","qty":1},"b":null,"c":{}}`,
	`{"a":{"sku":"x","qty":-1}}`,
	`{"a":[1,2],"b":[],"c":null}`,
	`{"":1}`,
	`[1,2,3]`,
	`[1,"2"]`,
	`[[],[[]],{}]`,
	`["a","b\u0000c",""]`,
	`[1.5]`,
	`[1,2,]`,
	`[,1]`,
	`[1 2]`,
	`[`,
	`]`,
	`[-]`,
	`[-01]`,
	`[1.]`,
	`[.5]`,
	`[1e]`,
	`[1e+]`,
	`[1E-2, 1e+2, -0.0e0]`,
	`["2024-05-06T07:08:09Z", null]`,
	// Scalars.
	`"ch_123"`,
	`"aGVsbG8="`,
	`"2024-05-06T07:08:09Z"`,
	`"\u00e9\u20ac\ud83d\ude00 \b\f\n\r\t"`,
	`""`,
	`0`,
	`-0`,
	`1`,
	`-1`,
	`255`,
	`256`,
	`65535`,
	`65536`,
	`12345678901234567890`,
	`123456789012345678`,
	`-123456789012345678`,
	`1234567890123456789`,
	`-1234567890123456789`,
	`1e308`,
	`1e309`,
	`4.9e-324`,
	`1e-400`,
	`3.4028235e38`,
	`3.4028236e38`,
	`0.1`,
	`true`,
	`false`,
	`null`,
	` null `,
	`nul`,
	`nulll`,
	`truee`,
	`True`,
	`+1`,
	`0x10`,
	`1_000`,
	`Infinity`,
	`NaN`,
	``,
	` `,
	`{}`,
	`[]`,
	`{} {}`,
	"\t\r\n{}\t\r\n",
	"\v{}",
	"\u00a0{}",
	`{"a":1}` + "\x00",
	strings.Repeat("[", 1100) + strings.Repeat("]", 1100),
	strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
	`{"next":` + strings.Repeat(`{"next":`, 1100) + `null` + strings.Repeat("}", 1101),
	`{"r":{"a":1},"n":12,"c":null,"t":null,"S":"x","N":"1","X":2}`,
	`{"n":"12"}`,
	`{"t":"2024-05-06T07:08:09Z"}`,
	`{"t":null}`,
}

// checkDecode decodes data into a fresh target with encoding/json, with
// the fast path alone, and with decodeJSON, and fails t unless they agree.
// It reports whether the fast path succeeded.
func checkDecode(t testing.TB, data []byte, target decTarget) bool {
	t.Helper()
	want := target.new()
	wantErr := json.Unmarshal(data, want)

	got := target.new()
	fast := decodeFast(data, got)
	switch {
	case fast && wantErr != nil:
		t.Fatalf("%s: decodeFast(%q) succeeded with %#v; json.Unmarshal fails: %v", target.name, data, got, wantErr)
	case fast && !reflect.DeepEqual(got, want):
		t.Fatalf("%s: decodeFast(%q) = %#v; json.Unmarshal gives %#v", target.name, data, got, want)
	case !fast && !reflect.DeepEqual(got, target.new()):
		t.Fatalf("%s: decodeFast(%q) gave up but left %#v", target.name, data, got)
	}

	got = target.new()
	err := decodeJSON(data, got)
	if (err == nil) != (wantErr == nil) || err != nil && err.Error() != wantErr.Error() {
		t.Fatalf("%s: decodeJSON(%q) error %v; json.Unmarshal error %v", target.name, data, err, wantErr)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s: decodeJSON(%q) = %#v; json.Unmarshal gives %#v", target.name, data, got, want)
	}
	return fast
}

// skipUnlessFast skips the tests that compare the fast path with
// encoding/json when the fast path is off. (With GOEXPERIMENT=jsonv2 in Go
// 1.26, json.Unmarshal panics on some of the inputs, such as {"c":1} into a
// struct with a channel field c.)
func skipUnlessFast(t testing.TB) {
	if !fastDecodeOn {
		t.Skip("encoding/json is not the decoder the fast path imitates (GOEXPERIMENT=jsonv2)")
	}
}

func TestDecodeJSONMatchesEncodingJSON(t *testing.T) {
	skipUnlessFast(t)
	fastByTarget := map[string]int{}
	for _, in := range decInputs {
		for _, target := range decTargets {
			if checkDecode(t, []byte(in), target) {
				fastByTarget[target.name]++
			}
		}
	}
	// Every target in the subset has been decoded by the fast path at
	// least once, and none outside it.
	inSubset := true
	for _, target := range decTargets {
		if target.name == "embedded" {
			inSubset = false
		}
		if n := fastByTarget[target.name]; inSubset != (n > 0) {
			t.Errorf("%s: the fast path decoded %d inputs", target.name, n)
		}
	}
}

// TestDecodeJSONFastPath: the fast path runs for what it is for, and
// declines what it is not.
func TestDecodeJSONFastPath(t *testing.T) {
	var c decCharge
	if !fastDecodeOn && decodeFast([]byte(`{"amount":100,"charge_id":"ch_123"}`), &c) {
		t.Fatal("the fast path ran, though encoding/json is not the decoder it imitates")
	}
	skipUnlessFast(t)
	if !decodeFast([]byte(`{"amount":100,"charge_id":"ch_123"}`), &c) {
		t.Fatal("the fast path gave up on the replayed result")
	}
	if c != (decCharge{ChargeID: "ch_123", Amount: 100}) {
		t.Fatalf("got %+v", c)
	}
	var o decOrder
	if !decodeFast(decBenchOrderJSON(t), &o) {
		t.Fatal("the fast path gave up on the order")
	}

	// A pointee that is not zero: encoding/json merges into it.
	m := map[string]int{"kept": 1}
	if decodeFast([]byte(`{"a":2}`), &m) || len(m) != 1 {
		t.Fatalf("decoded into a non-zero map: %v", m)
	}
	// Not a pointer, a nil pointer, a named pointer type.
	if decodeFast([]byte(`1`), 1) || decodeFast([]byte(`1`), (*int)(nil)) || decodeFast([]byte(`1`), nil) {
		t.Fatal("decoded into something that is not a non-nil pointer")
	}
	var tm time.Time
	if decodeFast([]byte(`"2024-05-06T07:08:09Z"`), decTimePtr(&tm)) {
		t.Fatal("decoded through a named pointer type")
	}
	// A failure midway leaves the value zero, and encoding/json's partial
	// result and error are what the caller sees.
	c = decCharge{}
	if decodeFast([]byte(`{"charge_id":"x","amount":"str"}`), &c) || c != (decCharge{}) {
		t.Fatalf("gave up but left %+v", c)
	}
	err := decodeJSON([]byte(`{"charge_id":"x","amount":"str"}`), &c)
	if err == nil || c.ChargeID != "x" {
		t.Fatalf("decodeJSON = %+v, %v; want encoding/json's partial result and error", c, err)
	}
}

func TestDecodeJSONCodec(t *testing.T) {
	var c decCharge
	if err := JSON.Unmarshal([]byte(`{"amount":100,"charge_id":"ch_123"}`), &c); err != nil || c.Amount != 100 {
		t.Fatalf("JSON.Unmarshal = %+v, %v", c, err)
	}
}

// TestDecodeJSONConcurrent compiles and uses plans from many goroutines
// (run it with -race).
func TestDecodeJSONConcurrent(t *testing.T) {
	data := decBenchOrderJSON(t)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 50 {
				checkDecode(t, data, decTarget{"order", newOf[decOrder]()})
				checkDecode(t, data, decTarget{"any", newOf[any]()})
			}
		})
	}
	wg.Wait()
}

// TestDecodeJSONRandom decodes random documents made of the targets'
// member names and of edge-case values, some of them then damaged, into
// every target.
func TestDecodeJSONRandom(t *testing.T) {
	skipUnlessFast(t)
	n := 3000
	if testing.Short() {
		n = 300
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range n {
		data := randomJSON(r)
		for _, target := range decTargets {
			checkDecode(t, data, target)
		}
	}
}

var (
	randomNames = []string{
		"charge_id", "amount", "AMOUNT", "id", "ID", "Id", "iD", "customer", "items", "meta", "extra",
		"created", "shipped", "total", "flags", "blob", "small", "Tiny", "tiny", "next", "ptr", "-",
		"named", "counts", "grid", "big", "neg", "ptrs", "ünïcode", "ÜNÏCODE", "sku", "SKU", "qty",
		"price", "tags", "email", "address", "vip", "name", "A", "J", "K", "k", "K", "ſ", "s",
		"f0", "f69", "F1", "x", "X", "r", "n", "c", "t", "", "z", "p", "inner", "m", "b", "a", "B", "\u0061mount", "ch\u0061rge_id",
	}
	randomStrings = []string{
		`""`, `"ch_123"`, `"aGVsbG8="`, `"aGVs\nbG8="`, `"!!"`, `"2024-05-06T07:08:09Z"`,
		`"2024-05-06T07:08:09.5+01:00"`, `"2024-13-06T07:08:09Z"`, `"\u00e9\ud83d\ude00"`, `"\ud800"`,
		`"a\"b\\c\/d\b\f\n\r\t"`, `"é€😀"`, "\"\xff\"", `"\u0000"`, `"12"`, `"true"`,
	}
	randomNumbers = []string{
		"0", "-0", "1", "-1", "7", "42", "127", "128", "-128", "-129", "255", "256", "65535", "65536",
		"9223372036854775807", "9223372036854775808", "-9223372036854775808", "-9223372036854775809",
		"18446744073709551615", "18446744073709551616", "123456789012345678", "1234567890123456789",
		"1.5", "-0.0", "1e2", "1E-2", "1e400", "1e-400", "3.4028235e38", "3.5e38", "0.1", "12.5e+3",
	}
)

const randomDamage = "{}[],:\"\\ 0-e.x"

// randomJSON returns a random JSON document, damaged one time in five.
func randomJSON(r *rand.Rand) []byte {
	b := randomValue(r, nil, 0)
	if r.IntN(5) == 0 && len(b) > 0 {
		i := r.IntN(len(b))
		switch r.IntN(3) {
		case 0:
			b = append(b[:i], b[i+1:]...)
		case 1:
			b[i] = randomDamage[r.IntN(len(randomDamage))]
		default:
			b = append(b[:i], append([]byte{randomDamage[r.IntN(len(randomDamage))]}, b[i:]...)...)
		}
	}
	return b
}

func randomValue(r *rand.Rand, b []byte, depth int) []byte {
	space := func() {
		if r.IntN(6) == 0 {
			b = append(b, " \t\r\n"[r.IntN(4)])
		}
	}
	space()
	k := r.IntN(10)
	if depth > 4 {
		k = 4 + r.IntN(6)
	}
	switch k {
	case 0, 1, 2:
		b = append(b, '{')
		for i := range r.IntN(5) {
			if i > 0 {
				b = append(b, ',')
			}
			space()
			b = append(b, '"')
			b = append(b, randomNames[r.IntN(len(randomNames))]...)
			b = append(b, '"')
			space()
			b = append(b, ':')
			b = randomValue(r, b, depth+1)
		}
		b = append(b, '}')
	case 3:
		b = append(b, '[')
		for i := range r.IntN(5) {
			if i > 0 {
				b = append(b, ',')
			}
			b = randomValue(r, b, depth+1)
		}
		b = append(b, ']')
	case 4, 5:
		b = append(b, randomStrings[r.IntN(len(randomStrings))]...)
	case 6, 7:
		b = append(b, randomNumbers[r.IntN(len(randomNumbers))]...)
	default:
		b = append(b, []string{"null", "true", "false"}[r.IntN(3)]...)
	}
	space()
	return b
}

// FuzzDecodeJSON: decodeJSON agrees with json.Unmarshal on any input, into
// any target, and the fast path never accepts what json.Unmarshal rejects.
func FuzzDecodeJSON(f *testing.F) {
	skipUnlessFast(f)
	for _, in := range decInputs {
		if len(in) < 1000 {
			f.Add([]byte(in))
		}
	}
	r := rand.New(rand.NewPCG(3, 4))
	for range 50 {
		f.Add(randomJSON(r))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, target := range decTargets {
			checkDecode(t, data, target)
		}
	})
}
