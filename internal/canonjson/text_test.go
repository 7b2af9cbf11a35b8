package canonjson

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unicode/utf16"

	"github.com/gowebpki/jcs"
)

// RFC 8785 vectors. The files in testdata/jcs come in pairs,
// NAME.input.json and NAME.expected.json, the expected files holding the
// exact canonical bytes (no trailing newline). The two rfc8785-* pairs are
// the RFC's own examples (sections 3.2.2 and 3.2.3); the others were made
// by testdata/jcs_ref.py, an independent implementation, and checked by
// hand.

func TestVectors(t *testing.T) {
	inputs, err := filepath.Glob(filepath.Join("testdata", "jcs", "*.input.json"))
	if err != nil || len(inputs) < 10 {
		t.Fatalf("found %d vectors in testdata/jcs (%v), want at least 10", len(inputs), err)
	}
	for _, in := range inputs {
		t.Run(strings.TrimSuffix(filepath.Base(in), ".input.json"), func(t *testing.T) {
			input, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			want, err := os.ReadFile(strings.TrimSuffix(in, ".input.json") + ".expected.json")
			if err != nil {
				t.Fatal(err)
			}
			checkText(t, input, string(want))
			checkText(t, want, string(want)) // canonical text is its own canonical form
			// The same text as a value: a json.RawMessage, and what
			// encoding/json decodes it to.
			checkAppend(t, json.RawMessage(input), string(want))
			var tree any
			if err := json.Unmarshal(input, &tree); err != nil {
				t.Fatal(err)
			}
			checkAppend(t, tree, string(want))
		})
	}
}

// checkText fails t unless AppendText(text) is want, valid.
func checkText(t *testing.T, text []byte, want string) {
	t.Helper()
	got, valid, err := AppendText([]byte("prefix"), text)
	if err != nil || !valid || string(got) != "prefix"+want {
		t.Errorf("AppendText(%q) = %q, %v, %v; want %q, true", text, got, valid, err, "prefix"+want)
	}
}

// checkAppend fails t unless Append(v) is want, valid.
func checkAppend(t *testing.T, v any, want string) {
	t.Helper()
	got, valid, err := Append(nil, v)
	if err != nil || !valid || string(got) != want {
		t.Errorf("Append(%#v) = %q, %v, %v; want %q, true", v, got, valid, err, want)
	}
}

// The RFC's examples, also spelled out here so that they do not depend on
// the files alone.
func TestRFC8785Examples(t *testing.T) {
	for _, tc := range []struct{ file, in, want string }{
		{
			"rfc8785-3.2.2-example",
			`{
  "numbers": [333333333.33333329, 1E30, 4.50,
              2e-3, 0.000000000000000000000000001],
  "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
  "literals": [null, true, false]
}`,
			`{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}`,
		},
		{
			"rfc8785-3.2.3-sorting",
			`{
  "\u20ac": "Euro Sign",
  "\r": "Carriage Return",
  "\ufb33": "Hebrew Letter Dalet With Dagesh",
  "1": "One",
  "\ud83d\ude00": "Emoji: Grinning Face",
  "\u0080": "Control",
  "\u00f6": "Latin Small Letter O With Diaeresis"
}`,
			"{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u0080\":\"Control\",\"\u00f6\":\"Latin Small Letter O With Diaeresis\",\"\u20ac\":\"Euro Sign\",\"\U0001F600\":\"Emoji: Grinning Face\",\"\uFB33\":\"Hebrew Letter Dalet With Dagesh\"}",
		},
	} {
		checkText(t, []byte(tc.in), tc.want)
		if f, err := os.ReadFile(filepath.Join("testdata", "jcs", tc.file+".expected.json")); err != nil || string(f) != tc.want {
			t.Errorf("%s: testdata expected file = %q, %v; want %q", tc.file, f, err, tc.want)
		}
	}
	// 3.2.3's order is by UTF-16 code units: U+1F600 (D83D DE00) sorts
	// before U+FB33, though its code point is greater.
	checkText(t, []byte(`{"\ufb33":1,"\ud83d\ude00":2}`), "{\"\U0001F600\":2,\"\uFB33\":1}")
	checkAppend(t, map[string]int{"\ufb33": 1, "\U0001F600": 2}, "{\"\U0001F600\":2,\"\uFB33\":1}")
}

// TestNumbers is RFC 8785 Appendix B: IEEE-754 bit patterns and their
// canonical text, as text (in the shortest Go spelling, which is not the
// canonical one for most) and as float64 values.
func TestNumbers(t *testing.T) {
	for _, tc := range []struct {
		bits uint64
		want string
	}{
		{0x0000000000000000, "0"},
		{0x8000000000000000, "0"}, // minus zero
		{0x0000000000000001, "5e-324"},
		{0x8000000000000001, "-5e-324"},
		{0x7fefffffffffffff, "1.7976931348623157e+308"},
		{0xffefffffffffffff, "-1.7976931348623157e+308"},
		{0x4340000000000000, "9007199254740992"},
		{0xc340000000000000, "-9007199254740992"},
		{0x4430000000000000, "295147905179352830000"},
		{0x44b52d02c7e14af5, "9.999999999999997e+22"},
		{0x44b52d02c7e14af6, "1e+23"},
		{0x44b52d02c7e14af7, "1.0000000000000001e+23"},
		{0x444b1ae4d6e2ef4e, "999999999999999700000"},
		{0x444b1ae4d6e2ef4f, "999999999999999900000"},
		{0x444b1ae4d6e2ef50, "1e+21"},
		{0x444b1ae4d6e2ef51, "1.0000000000000001e+21"}, // not in the RFC; the next double up
		{0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"},
		{0x3eb0c6f7a0b5ed8d, "0.000001"},
		{0x41b3de4355555553, "333333333.3333332"},
		{0x41b3de4355555554, "333333333.33333325"},
		{0x41b3de4355555555, "333333333.3333333"},
		{0x41b3de4355555556, "333333333.3333334"},
		{0x41b3de4355555557, "333333333.33333343"},
		{0xbecbf647612f3696, "-0.0000033333333333333333"},
		{0x43143ff3c1cb0959, "1424953923781206.2"}, // round to even
	} {
		f := math.Float64frombits(tc.bits)
		in := strconv.FormatFloat(f, 'g', -1, 64)
		checkText(t, []byte(in), tc.want)
		checkText(t, []byte(`{ "n" : [ `+in+` ] }`), `{"n":[`+tc.want+`]}`)
		checkAppend(t, f, tc.want)
		if back, err := strconv.ParseFloat(tc.want, 64); err != nil || back != f {
			t.Errorf("%016x: %s reads back as %v, %v", tc.bits, tc.want, back, err)
		}
	}
	// Integers beyond 2^53 are rounded like doubles, also from Go integers.
	for _, tc := range []struct {
		in   string
		v    any
		want string
	}{
		{"9007199254740993", int64(9007199254740993), "9007199254740992"},
		{"-9007199254740993", int64(-9007199254740993), "-9007199254740992"},
		{"18446744073709551615", uint64(math.MaxUint64), "18446744073709552000"},
		{"-9223372036854775808", int64(math.MinInt64), "-9223372036854776000"},
		{"100000000000000000000", json.Number("1e20"), "100000000000000000000"},
		{"1e21", json.Number("1E+21"), "1e+21"},
		{"-0.0", json.Number("-0"), "0"},
		{"123456789012345", int64(123456789012345), "123456789012345"},
		{"1e-400", json.Number("1e-400"), "0"}, // underflow is not an error
	} {
		checkText(t, []byte(tc.in), tc.want)
		checkAppend(t, tc.v, tc.want)
	}
	for _, in := range []string{"1e400", "-1e400", "[1e309]"} {
		if got, _, err := AppendText(nil, []byte(in)); err == nil {
			t.Errorf("AppendText(%s) = %s, want an error", in, got)
		}
		if got, _, err := Append(nil, json.Number(in)); err == nil {
			t.Errorf("Append(json.Number(%s)) = %s, want an error", in, got)
		}
	}
	for _, f := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		if got, _, err := Append(nil, f); err == nil {
			t.Errorf("Append(%v) = %s, want an error", f, got)
		}
		if got, _, err := Append(nil, []float32{float32(f)}); err == nil {
			t.Errorf("Append(float32(%v)) = %s, want an error", f, got)
		}
	}
}

func TestRejectsInvalidJSON(t *testing.T) {
	for _, in := range []string{
		"", "   ", "\n",
		"NaN", "Infinity", "-Infinity", "nan", "inf", `[NaN]`, `{"a":Infinity}`,
		`{"a":1} x`, `[1]]`, `{}}`, `1 2`, `"a" "b"`, `{"a":1}{}`, "null\x00",
		`[1,2`, `{"a":1`, `{"a":`, `"abc`, `[`, `{`, `{"a"`, `"\`, `"\u12`,
		`{"a":1,}`, `[1,]`, `[,1]`, `{,}`, `{"a" 1}`, `{"a":}`, `[1 2]`, `{a:1}`, `{'a':1}`, `'x'`,
		`{"a":1,"a":2}`, `{"b":1,"a":2,"b":3}`, `{"a":{},"\u0061":[]}`, `{"\ud83d\ude00":1,"😀":2}`,
		`01`, `+1`, `.5`, `1.`, `0x10`, `1e`, `1e+`, `--1`, `-`, `1_000`, `1e400`, `-1e400`,
		`tru`, `nul`, `nulll`, `True`, `None`, `undefined`, `[truex]`, `[1true]`, `{"a":1:2}`,
		`"\x"`, `"\u12"`, `"\u12g4"`, `"\U0041"`, "\"a\tb\"", "\"a\nb\"", "\"\x00\"", "\xef\xbb\xbf{}", "\u00a0{}",
	} {
		if got, _, err := AppendText(nil, []byte(in)); err == nil {
			t.Errorf("AppendText(%q) = %q, want an error", in, got)
		}
		if _, err := jcs.Transform([]byte(in)); err == nil {
			t.Errorf("jcs accepts %q", in) // the list is wrong
		}
	}
}

func TestDeepNesting(t *testing.T) {
	ok := strings.Repeat(`{"a": [`, maxDepth/2) + "1" + strings.Repeat("] }", maxDepth/2)
	checkText(t, []byte(ok), strings.ReplaceAll(ok, " ", ""))
	for _, in := range []string{strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1), strings.Repeat(`{"":`, maxDepth+1)} {
		if _, _, err := AppendText(nil, []byte(in)); err == nil {
			t.Errorf("AppendText accepted nesting deeper than %d", maxDepth)
		}
	}
	// Values as deep as RFC 8785 allows, but no deeper; a MarshalJSON's
	// output counts.
	nest := func(v any) any {
		for range maxDepth - 1 {
			v = []any{v}
		}
		return v
	}
	for _, v := range []any{[]any{1.0}, json.RawMessage("[1]"), map[string]any{"a": 1}} {
		if _, _, err := Append(nil, nest(v)); err != nil {
			t.Errorf("Append of %T nested %d deep: %v", v, maxDepth, err)
		}
		if _, _, err := Append(nil, []any{nest(v)}); err == nil {
			t.Errorf("Append of %T nested %d deep: no error", v, maxDepth+1)
		}
	}
}

func TestSelect(t *testing.T) {
	doc, valid, err := AppendText(nil, []byte(`{"b":{"c":[1,{"d":2}],"x\"y":"z","e":{}},"a":"\ud800","s":"q\\","n":null}`))
	if err != nil || valid {
		t.Fatalf("AppendText = %q, %v, %v", doc, valid, err)
	}
	for _, tc := range []struct {
		fields []string
		want   string // "" for nil
	}{
		{nil, string(doc)},
		{[]string{"b"}, `{"c":[1,{"d":2}],"e":{},"x\"y":"z"}`},
		{[]string{"b", "c"}, `[1,{"d":2}]`},
		{[]string{"b", "e"}, `{}`},
		{[]string{"b", "x\"y"}, `"z"`},
		{[]string{"s"}, `"q\\"`},
		{[]string{"n"}, `null`},
		{[]string{"a"}, "\"\xed\xa0\x80\""},
		{[]string{"c"}, ""},
		{[]string{"b", "c", "d"}, ""}, // an array
		{[]string{"n", "x"}, ""},
		{[]string{"b", "e", "x"}, ""},
		{[]string{"b", "x"}, ""},
	} {
		got := Select(doc, tc.fields)
		if string(got) != tc.want || (got == nil) != (tc.want == "") {
			t.Errorf("Select(%q) = %q, want %q", tc.fields, got, tc.want)
		}
	}
	// Not canonical text: no panic.
	for _, s := range []string{"", "{", `{"a"`, `{"a":`, `{"a":"`, `{"a":[`, `{"b":1`, "[", `"a"`, `{"a":1}x`, "}"} {
		Select([]byte(s), []string{"a", "b"})
	}
}

func TestCompareNames(t *testing.T) {
	strs := []string{"", "a", "b", "ab", "\u007f", "\u0080", "\u00ff", "\u0100", "\u07ff", "\u0800", "\ud7ff",
		"\ue000", "\uffff", "\U00010000", "\U0001F600", "\U0010FFFF", "a\U00010000", "a\uffff", "\ufffd"}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 { // random strings from the ranges where the orders differ
		var r []rune
		for range 1 + rng.IntN(3) {
			r = append(r, []rune{'a', 0x7ff, 0xd7ff, 0xe000 + rng.Int32N(0x2000), 0xfffd, 0x10000 + rng.Int32N(0x100000)}[rng.IntN(6)])
		}
		strs = append(strs, string(r))
	}
	for i, a := range strs {
		for _, b := range strs[max(0, i-40):min(len(strs), i+40)] {
			want := compareUnits(utf16.Encode([]rune(a)), utf16.Encode([]rune(b)))
			if got := compareNames(a, b); sign(got) != want {
				t.Fatalf("compareNames(%q, %q) = %d, want sign %d", a, b, got, want)
			}
		}
	}
	// With names that are not UTF-8 too, the order is total.
	names := []string{"", "a", "\xff", "\xee", "\xef\xbf", "\xf0", "\xed\xa0\x80", "\uffff", "\U00010000", "\x80", "a\xc3", "\xc3\xa9", "\u00e9"}
	for _, a := range names {
		for _, b := range names {
			ab, ba := sign(compareNames(a, b)), sign(compareNames(b, a))
			if ab != -ba || (ab == 0) != (a == b) {
				t.Errorf("compareNames(%q, %q) = %d, but reversed %d", a, b, ab, ba)
			}
			for _, c := range names {
				if ab < 0 && sign(compareNames(b, c)) < 0 && sign(compareNames(a, c)) >= 0 {
					t.Errorf("compareNames: %q < %q < %q but not %q < %q", a, b, c, a, c)
				}
			}
		}
	}
}

func compareUnits(a, b []uint16) int {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] != b[i] {
			return sign(int(a[i]) - int(b[i]))
		}
	}
	return sign(len(a) - len(b))
}

func sign(n int) int {
	switch {
	case n < 0:
		return -1
	case n > 0:
		return 1
	}
	return 0
}

func TestSkipPlain(t *testing.T) {
	for pos := range 8 {
		for v := range 256 {
			b := []byte("abcdefghij")
			b[pos] = byte(v)
			want := len(b)
			if !plain[v] {
				want = pos
			}
			if got := skipPlain(b, 0); got != want {
				t.Fatalf("skipPlain(%q) = %d, want %d", b, got, want)
			}
			if got := skipPlain(string(b), 0); got != want {
				t.Fatalf("skipPlain(string %q) = %d, want %d", b, got, want)
			}
		}
	}
	if got := skipPlain([]byte(`abc"`), 1); got != 3 {
		t.Errorf("skipPlain from 1 = %d, want 3", got)
	}
}

// The output does not alias the input, and AppendText appends.
func TestAppendTextAppends(t *testing.T) {
	in := []byte(`{"b":"x","a":"y"}`)
	dst := make([]byte, 3, 100)
	copy(dst, "abc")
	out, _, err := AppendText(dst, in)
	if err != nil || string(out) != `abc{"a":"y","b":"x"}` || &out[0] != &dst[0] {
		t.Errorf("AppendText = %q, %v", out, err)
	}
	if !bytes.Equal(in, []byte(`{"b":"x","a":"y"}`)) {
		t.Errorf("input changed: %q", in)
	}
	if out, _, err := AppendText(dst, []byte("{")); err == nil || string(out) != "abc" {
		t.Errorf("AppendText of bad text = %q, %v; want dst and an error", out, err)
	}
}
