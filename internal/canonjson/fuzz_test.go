package canonjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gowebpki/jcs"
)

// Differential fuzzing against the reference implementation of RFC 8785:
// of JSON text (FuzzAppendText), of Go values (FuzzAppendMatchesJCS) and of
// numbers (FuzzNumber). Where the reference has no answer, for strings that
// are not Unicode, the output must still mean exactly what the input does,
// which decodeExact checks.

var textSeeds = []string{
	`{"b":2,"a":1}`,
	`{"numbers":[333333333.33333329,1E30,4.50,2e-3,0.000000000000000000000000001],"string":"\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/","literals":[null,true,false]}`,
	`{"\u20ac":1,"\r":2,"\ufb33":3,"1":4,"\ud83d\ude00":5,"\u0080":6,"\u00f6":7}`,
	`[-0, 1e21, 1e-7, 9007199254740993, 5e-324, 1.7976931348623157e308, 0.1, 100e-2]`,
	` { "a" : [ { } , [ ] , "" , null ] } `,
	`"\u0000\u001f\u007f\u2028"`, `0`, `false`, `null`, `""`, `{}`, `[]`,
	`{"a":1,"a":2}`, `[1,]`, `{"a":1e400}`, "\"\xff\"", "{\"\xff\":1,\"\xfe\":2,\"a\":3}",
	`"\ud800"`, `["\udc00\ud800"]`, `{"\ud800":1,"\udbff\udfff":2}`, "\"\xed\xa0\x80\\ud800\"",
	`{"a":{"b":1,"a":2},"c":[{"z":null,"y":"\u00e9\n"}]}`,
}

func FuzzAppendText(f *testing.F) {
	for _, s := range textSeeds {
		f.Add([]byte(s))
	}
	files, _ := filepath.Glob(filepath.Join("testdata", "jcs", "*.json"))
	for _, file := range files {
		if b, err := os.ReadFile(file); err == nil && len(b) < 600 {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		got, valid, err := AppendText(nil, in)
		want, werr := jcs.Transform(in)
		switch {
		case err != nil:
			if werr == nil {
				t.Fatalf("AppendText(%q): %v; the reference gives %q", in, err, want)
			}
			return
		case valid:
			if werr != nil || !bytes.Equal(got, want) || !utf8.Valid(got) {
				t.Fatalf("AppendText(%q) = %q, valid; the reference gives %q, %v", in, got, want, werr)
			}
		default:
			// Only strings that are not Unicode make it invalid: the text
			// is JSON, which the reference rejects for them.
			if werr == nil || !json.Valid(in) || utf8.Valid(got) {
				t.Fatalf("AppendText(%q) = %q, invalid; the reference gives %q, %v; json.Valid %v", in, got, want, werr, json.Valid(in))
			}
		}
		again, valid2, err := AppendText(nil, got)
		if err != nil || valid2 != valid || !bytes.Equal(again, got) {
			t.Fatalf("AppendText(%q) = %q, but AppendText of that = %q, %v, %v", in, got, again, valid2, err)
		}
		x, xerr := decodeExact(in)
		y, yerr := decodeExact(got)
		if xerr != nil || yerr != nil || !reflect.DeepEqual(x, y) {
			t.Fatalf("AppendText(%q) = %q: means %#v (%v), not %#v (%v)", in, got, y, yerr, x, xerr)
		}
	})
}

func FuzzAppendMatchesJCS(f *testing.F) {
	for i := range 64 {
		f.Add([]byte(fmt.Sprintf("%c%c\x03\x01\x02\x05abc\xffdef\x80\x07%c", i, 255-i, i*7)))
	}
	f.Add([]byte("\x0d\x00\x01\xff\x41\x42"))
	f.Fuzz(func(t *testing.T, data []byte) {
		// The same value twice: with each byte of its strings that is not
		// UTF-8 replaced by a private-use character, and as it is.
		v := (&gen{data: data}).value(0)
		checkOracle(t, v)
		want, wvalid, werr := Append(nil, v)
		r := (&gen{data: data, raw: true}).value(0)
		got, valid, err := Append(nil, r)
		if (err == nil) != (werr == nil) {
			t.Fatalf("Append(%#v): %v; with valid strings %v", r, err, werr)
		}
		if err != nil {
			return
		}
		if !wvalid || utf8.Valid(got) != valid || valid && !bytes.Equal(got, want) {
			t.Fatalf("Append(%#v) = %q, %v; with valid strings %q, %v", r, got, valid, want, wvalid)
		}
		// got means want with the bytes back in place of the characters.
		x, xerr := decodeExact(got)
		y, yerr := decodeExact(want)
		if xerr != nil || yerr != nil || !reflect.DeepEqual(x, unmapPrivate(y)) {
			t.Fatalf("Append(%#v) = %q, which means %#v (%v); want %#v (%v)", r, got, x, xerr, unmapPrivate(y), yerr)
		}
	})
}

func FuzzNumber(f *testing.F) {
	for _, bits := range []uint64{0, 1 << 63, 1, 0x7fefffffffffffff, 0x4340000000000000, 0x444b1ae4d6e2ef50,
		0x3eb0c6f7a0b5ed8d, 0x41b3de4355555555, 0x7ff8000000000001, 0x3fb999999999999a, 0x3e45798ee2308c3a} {
		f.Add(bits)
	}
	f.Fuzz(func(t *testing.T, bits uint64) {
		x := math.Float64frombits(bits)
		got, _, err := Append(nil, x)
		want, werr := jcs.NumberToJSON(x)
		if (err == nil) != (werr == nil) || err == nil && string(got) != want {
			t.Fatalf("Append(%v) = %s, %v; want %s, %v", x, got, err, want, werr)
		}
		if werr == nil {
			for _, s := range []string{strconv.FormatFloat(x, 'g', -1, 64), strconv.FormatFloat(x, 'e', 20, 64), strconv.FormatFloat(x, 'f', -1, 64)} {
				got, _, err := AppendText(nil, []byte(s))
				want, werr := jcs.Transform([]byte(s))
				if (err == nil) != (werr == nil) || !bytes.Equal(got, want) {
					t.Fatalf("AppendText(%s) = %s, %v; want %s, %v", s, got, err, want, werr)
				}
				checkOracle(t, json.Number(s))
			}
		}
		f32 := math.Float32frombits(uint32(bits))
		for _, v := range []any{f32, int64(bits), bits, int32(bits), struct {
			F float64 `json:",string"`
			G float32 `json:",string"`
			I int64   `json:",string"`
		}{x, f32, int64(bits)}} {
			checkOracle(t, v)
		}
	})
}

// decodeExact decodes JSON text without replacing anything: a string is
// the bytes it stands for (an escaped lone surrogate its WTF-8 bytes), an
// object a map[string]any, a number a float64. Its input is text that
// AppendText accepted.
func decodeExact(b []byte) (v any, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("decodeExact: %v", r) // out of range on truncated text
		}
	}()
	i := 0
	v, err = decodeValue(b, &i)
	if err == nil && len(bytes.TrimLeft(b[i:], " \t\r\n")) > 0 {
		err = errors.New("decodeExact: text after the value")
	}
	return v, err
}

func decodeValue(b []byte, i *int) (any, error) {
	for b[*i] == ' ' || b[*i] == '\t' || b[*i] == '\r' || b[*i] == '\n' {
		*i++
	}
	switch c := b[*i]; c {
	case '"':
		return decodeExactString(b, i), nil
	case '[', '{':
		*i++
		var arr []any
		obj := map[string]any{}
		for {
			for b[*i] == ' ' || b[*i] == '\t' || b[*i] == '\r' || b[*i] == '\n' || b[*i] == ',' {
				*i++
			}
			if b[*i] == ']' || b[*i] == '}' {
				*i++
				if c == '[' {
					return append([]any{}, arr...), nil
				}
				return obj, nil
			}
			var name string
			if c == '{' {
				name = decodeExactString(b, i)
				for b[*i] != ':' {
					*i++
				}
				*i++
			}
			v, err := decodeValue(b, i)
			if err != nil {
				return nil, err
			}
			if c == '[' {
				arr = append(arr, v)
			} else if _, dup := obj[name]; dup {
				return nil, fmt.Errorf("decodeExact: duplicate %q", name)
			} else {
				obj[name] = v
			}
		}
	}
	j := *i
	for j < len(b) && !bytes.ContainsAny(b[j:j+1], ",]} \t\r\n") {
		j++
	}
	tok := string(b[*i:j])
	*i = j
	switch tok {
	case "null":
		return nil, nil
	case "true", "false":
		return tok == "true", nil
	}
	return strconv.ParseFloat(tok, 64)
}

// decodeExactString decodes the string at b[*i], its opening quote.
func decodeExactString(b []byte, i *int) string {
	var out []byte
	for *i++; b[*i] != '"'; {
		if b[*i] != '\\' {
			out = append(out, b[*i])
			*i++
			continue
		}
		e := b[*i+1]
		*i += 2
		if e != 'u' {
			out = append(out, map[byte]byte{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}[e])
			continue
		}
		u, _ := strconv.ParseUint(string(b[*i:*i+4]), 16, 32)
		r := rune(u)
		*i += 4
		if 0xD800 <= r && r < 0xDC00 && *i+6 <= len(b) && b[*i] == '\\' && b[*i+1] == 'u' {
			if lo, err := strconv.ParseUint(string(b[*i+2:*i+6]), 16, 32); err == nil && 0xDC00 <= lo && lo < 0xE000 {
				r = 0x10000 + (r-0xD800)<<10 + rune(lo) - 0xDC00
				*i += 6
			}
		}
		if 0xD800 <= r && r < 0xE000 {
			out = append(out, 0xED, byte(0x80|r>>6&0x3F), byte(0x80|r&0x3F))
		} else {
			out = utf8.AppendRune(out, r)
		}
	}
	*i++
	return string(out)
}

// unmapPrivate turns the private-use characters gen writes for bytes that
// are not UTF-8 back into the bytes.
func unmapPrivate(v any) any {
	switch v := v.(type) {
	case string:
		var out []byte
		for _, r := range v {
			if privateBase <= r && r < privateBase+0x80 {
				out = append(out, byte(r-privateBase+0x80))
			} else {
				out = utf8.AppendRune(out, r)
			}
		}
		return string(out)
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = unmapPrivate(e)
		}
		return out
	case map[string]any:
		out := map[string]any{}
		for k, e := range v {
			out[unmapPrivate(k).(string)] = unmapPrivate(e)
		}
		return out
	}
	return v
}

// privateBase + (b - 0x80) is the character that stands for byte b, which
// is not UTF-8, in gen's strings when it is not raw.
const privateBase = 0xF780

// gen makes Go values of many types from fuzz input: the types of
// encode_test.go, decoded JSON trees, JSON text, numbers, strings with
// escapes, multi-byte characters and arbitrary bytes. Unless raw, a byte
// that is not UTF-8 is replaced by a private-use character; the two values
// made from one input differ only in that.
type gen struct {
	data []byte
	raw  bool
}

func (g *gen) byte() byte {
	if len(g.data) == 0 {
		return 0
	}
	b := g.data[0]
	g.data = g.data[1:]
	return b
}

func (g *gen) intn(n int) int { return int(g.byte()) % n }

func (g *gen) uint64() uint64 {
	var u uint64
	for range g.intn(9) {
		u = u<<8 | uint64(g.byte())
	}
	return u
}

var pieces = []string{`"`, `\`, "\n", "\x00", "\x1f", "\x7f", "<", "&", "/", "\u2028", "\u00e9", "\u20ac", "\U0001F600", "\uffff", "\ufffd", "\ue000"}

func (g *gen) str() string {
	var b []byte
	for range g.intn(7) {
		switch g.intn(8) {
		case 0, 1, 2:
			b = append(b, "abcxyz_-AZ09"[g.intn(12)])
		case 3, 4:
			b = append(b, pieces[g.intn(len(pieces))]...)
		default:
			b = append(b, g.byte())
		}
	}
	var out []byte
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		switch {
		case r == utf8.RuneError && n == 1 && g.raw:
			out = append(out, b[0])
		case r == utf8.RuneError && n == 1:
			out = utf8.AppendRune(out, privateBase+rune(b[0])-0x80)
		case privateBase <= r && r < privateBase+0x80:
			out = append(out, 'x')
		default:
			out = append(out, b[:n]...)
		}
		b = b[n:]
	}
	return string(out)
}

func (g *gen) float() float64 {
	special := []float64{0, math.Copysign(0, -1), 0.1, 1e21, 1e-7, 5e-324, math.MaxFloat64, -123.456, 1 << 53, 0.19, math.NaN()}
	if i := g.intn(len(special) + 4); i < len(special) {
		return special[i]
	}
	return math.Float64frombits(g.uint64())
}

func (g *gen) number() string {
	ns := []string{"0", "-0", "1.50", "1e21", "12345678901234567890", "-1.5E-7", "", "3", "1e400", "01", "x", "0.000001", "9007199254740993"}
	return ns[g.intn(len(ns))]
}

// quote writes s as a JSON string escaping only what it must: bytes that
// are not UTF-8 stay as they are.
func quote(s string) string {
	var b []byte
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' {
			b = fmt.Appendf(b, `\u%04X`, c)
		} else {
			b = append(b, c)
		}
	}
	return `"` + string(b) + `"`
}

// text makes JSON text, mostly valid.
func (g *gen) text(depth int) string {
	ws := []string{"", " ", "\n\t", ""}[g.intn(4)]
	n := 6
	if depth > 3 {
		n = 3
	}
	switch g.intn(n) {
	case 0:
		return ws + []string{"null", "true", "false", `"\u00e9\/\ud83d\ude00\t"`, "{", "[1,]"}[g.intn(6)] + ws
	case 1:
		if s := g.number(); s != "" && s != "x" && s != "01" {
			return ws + s + ws
		}
		return "0"
	case 2:
		return ws + quote(g.str()) + ws
	}
	open, close, b := "[", "]", ""
	obj := g.intn(2) == 0
	if obj {
		open, close = "{", "}"
	}
	for i := range g.intn(4) {
		if i > 0 {
			b += ","
		}
		if obj {
			b += ws + quote(g.str()) + ws + ":"
		}
		b += g.text(depth + 1)
	}
	return ws + open + b + close + ws
}

var fuzzTypes = []reflect.Type{
	reflect.TypeFor[Embeds](), reflect.TypeFor[Options](), reflect.TypeFor[Quoted](), reflect.TypeFor[Methods](),
	reflect.TypeFor[Bytes](), reflect.TypeFor[Ties](), reflect.TypeFor[Diamond](), reflect.TypeFor[Base](),
	reflect.TypeFor[map[strKey]any](), reflect.TypeFor[map[intKey]string](), reflect.TypeFor[map[uintKey]float32](),
	reflect.TypeFor[map[textKey]int](), reflect.TypeFor[map[lossyKey]int](), reflect.TypeFor[map[textIntKey]textOf](),
	reflect.TypeFor[map[*textKey]bool](), reflect.TypeFor[[]byteText](),
	reflect.TypeFor[[2]ptrJSON](), reflect.TypeFor[map[string]ptrJSON](), reflect.TypeFor[[]*Base](), reflect.TypeFor[jsonOf](),
	reflect.TypeFor[quotedOf](), reflect.TypeFor[*bytePtr](), reflect.TypeFor[map[string]string](), reflect.TypeFor[benchOrder](),
}

// value makes a value of a type chosen by the input.
func (g *gen) value(depth int) any {
	switch i := g.intn(14 + len(fuzzTypes)); {
	case i == 0 || depth > 4:
		return nil
	case i == 1:
		return g.str()
	case i == 2:
		return g.float()
	case i == 3:
		return int64(g.uint64())
	case i == 4:
		return g.intn(2) == 0
	case i == 5:
		n := g.intn(4)
		s := make([]any, n)
		for i := range s {
			s[i] = g.value(depth + 1)
		}
		return s
	case i == 6:
		m := map[string]any{}
		for range g.intn(4) {
			m[g.str()] = g.value(depth + 1)
		}
		return m
	case i == 7:
		return json.Number(g.number())
	case i == 8:
		return json.RawMessage(g.text(depth))
	case i == 9:
		return g.time()
	case i == 10:
		return textOf(g.str())
	case i == 11:
		return float32(g.float())
	case i == 12:
		return g.uint64()
	case i == 13:
		b := make([]byte, g.intn(5)) // the same in both modes
		for i := range b {
			b[i] = g.byte()
		}
		return b
	default:
		p := reflect.New(fuzzTypes[i-14])
		g.fill(p.Elem(), depth+1)
		if g.intn(2) == 0 {
			return p.Interface() // addressable
		}
		return p.Elem().Interface()
	}
}

func (g *gen) time() time.Time {
	zones := []*time.Location{time.UTC, time.FixedZone("e", 3600), time.FixedZone("s", -30), time.FixedZone("h", 25*3600)}
	return time.Unix(int64(g.uint64()%(1<<40))-1<<39, int64(g.uint64()%1e9)).In(zones[g.intn(len(zones))])
}

// ifaceValues are candidates for interface-typed fields other than any.
var ifaceValues = []any{valJSON{1}, &ptrJSON{2}, valText{3}, zeroer{-1}, zeroer{1}, &ptrZero{-1}, (*ptrZero)(nil), time.Duration(7), jsonOf("j"), failJSON{}}

// fill sets v, recursively, from the input.
func (g *gen) fill(v reflect.Value, depth int) {
	t := v.Type()
	if depth > 5 || !v.CanSet() && t.Kind() != reflect.Struct {
		return
	}
	switch t {
	case reflect.TypeFor[json.Number]():
		v.SetString(g.number())
		return
	case reflect.TypeFor[json.RawMessage]():
		if g.intn(4) > 0 {
			v.SetBytes([]byte(g.text(depth)))
		}
		return
	case reflect.TypeFor[time.Time]():
		v.Set(reflect.ValueOf(g.time()))
		return
	}
	switch t.Kind() {
	case reflect.Bool:
		v.SetBool(g.intn(2) == 0)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(g.uint64()))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		v.SetUint(g.uint64())
	case reflect.Float32, reflect.Float64:
		v.SetFloat(g.float())
	case reflect.String:
		v.SetString(g.str())
	case reflect.Slice:
		if g.intn(4) > 0 {
			n := g.intn(4)
			v.Set(reflect.MakeSlice(t, n, n))
			for i := range n {
				g.fill(v.Index(i), depth+1)
			}
		}
	case reflect.Array:
		for i := range v.Len() {
			g.fill(v.Index(i), depth+1)
		}
	case reflect.Map:
		if g.intn(4) > 0 {
			v.Set(reflect.MakeMap(t))
			for range g.intn(4) {
				k, e := reflect.New(t.Key()).Elem(), reflect.New(t.Elem()).Elem()
				g.fill(k, depth+1)
				g.fill(e, depth+1)
				v.SetMapIndex(k, e)
			}
		}
	case reflect.Pointer:
		if g.intn(3) > 0 {
			v.Set(reflect.New(t.Elem()))
			g.fill(v.Elem(), depth+1)
		}
	case reflect.Interface:
		if t == reflect.TypeFor[any]() {
			if x := g.value(depth + 1); x != nil {
				v.Set(reflect.ValueOf(x))
			}
			return
		}
		if x := ifaceValues[g.intn(len(ifaceValues))]; reflect.TypeOf(x).Implements(t) {
			v.Set(reflect.ValueOf(x))
		}
	case reflect.Struct:
		for i := range v.NumField() {
			g.fill(v.Field(i), depth+1)
		}
	}
}
