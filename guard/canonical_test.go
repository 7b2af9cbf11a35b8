package guard_test

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/idemguard/idemguard/guard"
)

// RFC 8785 (JSON Canonicalization Scheme) vectors. The files in
// testdata/jcs come in pairs, NAME.input.json and NAME.expected.json; the
// expected files hold the exact canonical bytes (no trailing newline). The
// two rfc8785-* pairs are the RFC's own examples (sections 3.2.2 and 3.2.3);
// the others were produced by testdata/jcs_ref.py, an independent
// implementation, and reviewed by hand.

func readTestdata(name string) ([]byte, error) {
	return os.ReadFile(filepath.Join("testdata", filepath.FromSlash(name)))
}

func TestCanonicalizeVectors(t *testing.T) {
	inputs, err := filepath.Glob(filepath.Join("testdata", "jcs", "*.input.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(inputs) < 10 {
		t.Fatalf("found %d vectors in testdata/jcs, want at least 10", len(inputs))
	}
	for _, in := range inputs {
		name := strings.TrimSuffix(filepath.Base(in), ".input.json")
		t.Run(name, func(t *testing.T) {
			input, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			want, err := os.ReadFile(strings.TrimSuffix(in, ".input.json") + ".expected.json")
			if err != nil {
				t.Fatal(err)
			}
			got, err := guard.Canonicalize(input)
			if err != nil {
				t.Fatalf("Canonicalize: %v", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("Canonicalize =\n%s\nwant\n%s", got, want)
			}
			// Canonical text is its own canonical form.
			again, err := guard.Canonicalize(want)
			if err != nil || !bytes.Equal(again, want) {
				t.Errorf("Canonicalize(expected) = %s, %v; want it unchanged", again, err)
			}
		})
	}
}

// The RFC's examples, also spelled out here so that they do not depend on
// the files alone.
func TestCanonicalizeRFC8785Examples(t *testing.T) {
	for _, tc := range []struct{ name, file, in, want string }{
		{
			"3.2.2", "rfc8785-3.2.2-example",
			`{
  "numbers": [333333333.33333329, 1E30, 4.50,
              2e-3, 0.000000000000000000000000001],
  "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
  "literals": [null, true, false]
}`,
			`{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}`,
		},
		{
			"3.2.3", "rfc8785-3.2.3-sorting",
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
		got, err := guard.Canonicalize([]byte(tc.in))
		if err != nil || string(got) != tc.want {
			t.Errorf("section %s: Canonicalize = %s, %v\nwant %s", tc.name, got, err, tc.want)
		}
		if f, err := readTestdata("jcs/" + tc.file + ".expected.json"); err != nil || string(f) != tc.want {
			t.Errorf("section %s: testdata expected file = %q, %v; want %q", tc.name, f, err, tc.want)
		}
	}
	// 3.2.3's order is by UTF-16 code units: U+1F600 (D83D DE00) sorts
	// before U+FB33, though its code point is greater.
	got, err := guard.Canonicalize([]byte(`{"\ufb33":1,"\ud83d\ude00":2}`))
	if want := "{\"\U0001F600\":2,\"\uFB33\":1}"; err != nil || string(got) != want {
		t.Errorf("surrogate order: %s, %v; want %s", got, err, want)
	}
}

// TestCanonicalizeNumbers is RFC 8785 Appendix B: IEEE-754 bit patterns
// and their canonical text. Each is fed as the shortest Go spelling of the
// number, which is not the canonical one for most of them.
func TestCanonicalizeNumbers(t *testing.T) {
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
		got, err := guard.Canonicalize([]byte(in))
		if err != nil || string(got) != tc.want {
			t.Errorf("%016x (%s): Canonicalize = %q, %v; want %q", tc.bits, in, got, err, tc.want)
			continue
		}
		// The canonical text reads back as the same double.
		if back, err := strconv.ParseFloat(string(got), 64); err != nil || back != f {
			t.Errorf("%016x: %s reads back as %v, %v", tc.bits, got, back, err)
		}
		// Inside a document too.
		doc, err := guard.Canonicalize([]byte(`{ "n" : [ ` + in + ` ] }`))
		if want := `{"n":[` + tc.want + `]}`; err != nil || string(doc) != want {
			t.Errorf("%016x in a document: %s, %v; want %s", tc.bits, doc, err, want)
		}
	}
	// NaN and the infinities have no JSON form.
	for _, bits := range []uint64{0x7fffffffffffffff, 0x7ff0000000000000, 0xfff0000000000000} {
		in := strconv.FormatFloat(math.Float64frombits(bits), 'g', -1, 64)
		if got, err := guard.Canonicalize([]byte(in)); err == nil {
			t.Errorf("%016x (%s): Canonicalize = %q, want an error", bits, in, got)
		}
	}
}

func TestCanonicalizeRejectsInvalidJSON(t *testing.T) {
	for _, in := range []string{
		"", "   ", "\n",
		"NaN", "Infinity", "-Infinity", "nan", "inf", `[NaN]`, `{"a":Infinity}`,
		`{"a":1} x`, `[1]]`, `{}}`, `1 2`, `"a" "b"`, `{"a":1}{}`, "null\x00",
		`[1,2`, `{"a":1`, `{"a":`, `"abc`, `[`, `{`, `{"a"`,
		`{"a":1,}`, `[1,]`, `[,1]`, `{,}`, `{"a" 1}`, `{"a":}`, `[1 2]`, `{a:1}`, `{'a':1}`, `'x'`,
		`{"a":1,"a":2}`,
		`01`, `+1`, `.5`, `1.`, `0x10`, `1e`, `1e+`, `--1`, `-`, `1_000`, `1e400`, `-1e400`,
		`tru`, `nul`, `nulll`, `True`, `None`, `undefined`,
		`"\x"`, `"\u12"`, `"\u12g4"`, `"\ud800"`, `"\ud800x"`, `"\udc00"`, `"\ud800\u0041"`,
		"\"\xff\"", "\"\xc3\"", "\"a\tb\"", "\"a\nb\"", "\xef\xbb\xbf{}",
	} {
		if got, err := guard.Canonicalize([]byte(in)); err == nil {
			t.Errorf("Canonicalize(%q) = %q, want an error", in, got)
		}
	}
	if got, err := guard.Canonicalize(nil); err == nil {
		t.Errorf("Canonicalize(nil) = %q, want an error", got)
	}
}

// Nesting far beyond what a key needs is still handled.
func TestCanonicalizeDeepNesting(t *testing.T) {
	const depth = 5000
	in := strings.Repeat(`{"a": [`, depth) + "1" + strings.Repeat("] }", depth)
	want := strings.Repeat(`{"a":[`, depth) + "1" + strings.Repeat("]}", depth)
	got, err := guard.Canonicalize([]byte(in))
	if err != nil || string(got) != want {
		t.Errorf("depth %d: err %v, output matches %v", depth, err, string(got) == want)
	}
}
