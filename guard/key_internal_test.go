package guard

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"math/bits"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/gowebpki/jcs"
)

// canon (canonical.go) must agree with github.com/gowebpki/jcs, the
// reference it falls back to: whenever it succeeds, jcs succeeds with the
// same bytes. These tests and FuzzCanonMatchesJCS check that, and that the
// fast path is actually taken for ordinary documents.

// canonDocs returns the JSON documents of testdata/jcs and some more.
func canonDocs(t testing.TB) [][]byte {
	files, err := filepath.Glob(filepath.Join("testdata", "jcs", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no testdata/jcs vectors: %v", err)
	}
	var docs [][]byte
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, b)
	}
	for _, s := range []string{
		`{"b":{"d":1,"c":[{"z":null,"y":{"x":"\u00e9\n"}}]},"a":[3,2,1]}`,
		`{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"k":11,"l":12,"m":13,"n":14}`,
		`{"n":14,"m":13,"l":12,"k":11,"j":10,"i":9,"h":8,"g":7,"f":6,"e":5,"d":4,"c":3,"b":2,"a":1}`,
		`{"\ue000":1,"\ud800\udc00":2,"\uffff":3,"\u00ff":4,"\u0100":5,"\ud7ff":6}`,
		`{"a\"b":1,"a\\b":2,"a\/b":3,"a\u0000":4,"a":5}`,
		`[0,-0,1,-1,123456789012345,1234567890123456,-999999999999999,1.5,1e0,1E+2,1e-7,0.1,100e-2]`,
		`["\u0000\u0001\u001f\u007f\u0080\u2028\ud83d\ude00","\"\\\/\b\f\n\r\t"]`,
		"\t[ true ,false , null ]\r\n",
		`"\ud83d"`, `"\ude00"`, `"\ud83d\u0041"`, `{"a":1,"a":2}`, `{"a":1,"b":2,"a":3}`,
		`{"a":{"b":1,"a":2},"a":0}`, `[1,]`, `[01]`, `[1.]`, `[.1]`, `[+1]`, `[1e]`, `[-]`, `1 2`,
		`{"a" 1}`, `{"a":1 "b":2}`, `{1:2}`, `[true1]`, `[nul]`, "[\"\xff\"]", "[\"\xed\xa0\x80\"]",
		"[\"a\x1fb\"]", `[1e400]`, `[-1e400]`, `[1e-400]`, `[4.9e-324]`, `[2.4703282292062328e-324]`,
		strings.Repeat("[", 10000) + strings.Repeat("]", 10000),
		strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
		strings.Repeat(`{"b":1,"a":`, 300) + "0" + strings.Repeat("}", 300),
	} {
		docs = append(docs, []byte(s))
	}
	return docs
}

// checkCanonAgainstJCS fails t if canon and jcs disagree on b.
func checkCanonAgainstJCS(t *testing.T, b []byte) {
	t.Helper()
	want, wantErr := jcs.Transform(b)
	cn := getCanon()
	defer putCanon(cn)
	if cn.transform(b) {
		if wantErr != nil {
			t.Fatalf("canon accepted %q as %q; jcs rejects it: %v", b, cn.out, wantErr)
		}
		if !bytes.Equal(cn.out, want) {
			t.Fatalf("canon(%q) = %q; jcs gives %q", b, cn.out, want)
		}
	}
	got, err := Canonicalize(b)
	if (err == nil) != (wantErr == nil) || !bytes.Equal(got, want) {
		t.Fatalf("Canonicalize(%q) = %q, %v; jcs gives %q, %v", b, got, err, want, wantErr)
	}
	if err == nil && missingCanonical(got) != missingCanonicalReference(got) {
		t.Fatalf("missingCanonical(%s) = %v, want %v", got, missingCanonical(got), missingCanonicalReference(got))
	}
}

// missingCanonicalReference is missingCanonical by decoding.
func missingCanonicalReference(b []byte) bool {
	var v any
	return json.Unmarshal(b, &v) == nil && missing(v)
}

func TestCanonMatchesJCS(t *testing.T) {
	for _, b := range canonDocs(t) {
		checkCanonAgainstJCS(t, b)
	}
}

// The fast path handles valid documents itself, without falling back.
func TestCanonFastPathTaken(t *testing.T) {
	cn := getCanon()
	defer putCanon(cn)
	files, _ := filepath.Glob(filepath.Join("testdata", "jcs", "*.json"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !cn.transform(b) {
			t.Errorf("%s: fast path gave up", f)
		}
	}
	order, err := json.Marshal(newBenchOrder())
	if err != nil {
		t.Fatal(err)
	}
	if !cn.transform(order) {
		t.Error("fast path gave up on the benchmark order")
	}
	var tree any
	if err := json.Unmarshal(order, &tree); err != nil {
		t.Fatal(err)
	}
	if !cn.encodeCanonical(tree) {
		t.Error("encoder gave up on the benchmark order's tree")
	}
	if !cn.encodeCanonical(newBenchOrder()) {
		t.Error("encoder gave up on the benchmark order")
	}
}

// A document whose every level must be reordered gives up before doing
// more than linear work, and jcs decides.
func TestCanonReorderBudget(t *testing.T) {
	const depth = 2000
	doc := []byte(strings.Repeat(`{"b":"`+strings.Repeat("x", 100)+`","a":`, depth) + "0" + strings.Repeat("}", depth))
	cn := getCanon()
	defer putCanon(cn)
	if cn.transform(doc) {
		t.Errorf("moved %d bytes for a %d-byte document; want to give up past %d", cn.moved, len(doc), cn.budget)
	}
	checkCanonAgainstJCS(t, doc)
}

// The tree path (JMESPath selections) matches json.Marshal then jcs.
func TestCanonTreeMatchesMarshal(t *testing.T) {
	values := []any{
		nil, true, false, 0.0, math.Copysign(0, -1), 1e21, 1e-7, 123.456, 5e-324, math.MaxFloat64,
		"", "x", "\u00e9\n\"\\/<>&\u2028\u0000\u007f", "\xff", "a\xc3",
		[]any{}, map[string]any{}, []any{nil, 1.0, "a", []any{map[string]any{"b": 1.0, "a": 2.0}}},
		map[string]any{"\ue000": 1.0, "\U00010000": 2.0, "z": map[string]any{"y": nil, "x": []any{true}}},
		map[string]any{"a\xff": 1.0}, map[string]any{"a\xff": 1.0, "a\xfe": 2.0},
		math.NaN(), math.Inf(-1), []any{math.Inf(1)}, 3, "ok", []string{"b", "a"}, map[string]int{"b": 1, "a": 2},
	}
	for _, v := range values {
		b, merr := json.Marshal(v)
		var want []byte
		var wantErr error = merr
		if merr == nil {
			want, wantErr = jcs.Transform(b)
		}
		cn := getCanon()
		got, err := cn.canonicalValue(v)
		if (err == nil) != (wantErr == nil) || !bytes.Equal(got, want) {
			t.Errorf("canonicalValue(%#v) = %q, %v; want %q, %v", v, got, err, want, wantErr)
		}
		putCanon(cn)
	}
}

func TestCompareUTF16(t *testing.T) {
	strs := []string{"", "a", "b", "ab", "\u007f", "\u0080", "\u00ff", "\u0100", "\u07ff", "\u0800", "\ud7ff",
		"\ue000", "\uffff", "\U00010000", "\U0001F600", "\U0010FFFF", "a\U00010000", "a\uffff", "\ufffd"}
	for _, a := range strs {
		for _, b := range strs {
			want := compareUnits(utf16.Encode([]rune(a)), utf16.Encode([]rune(b)))
			got := compareUTF16(a, b)
			if sign(got) != want || sign(compareUTF16([]byte(a), []byte(b))) != want {
				t.Errorf("compareUTF16(%q, %q) = %d, want sign %d", a, b, got, want)
			}
			checkCompareMembers(t, a, b, want)
			checkCompareMembers(t, a+"\x00", b, compareUnits(utf16.Encode([]rune(a+"\x00")), utf16.Encode([]rune(b))))
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

// FuzzCanonMatchesJCS: canon agrees with jcs on any input, and on the tree
// form of any input encoding/json accepts.
func FuzzCanonMatchesJCS(f *testing.F) {
	for _, b := range canonDocs(f) {
		if len(b) <= 600 { // larger seeds make minimisation slow
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkCanonAgainstJCS(t, b)
		var v any
		if json.Unmarshal(b, &v) != nil {
			return
		}
		m, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		want, wantErr := jcs.Transform(m)
		cn := getCanon()
		defer putCanon(cn)
		got, err := cn.canonicalValue(v)
		if (err == nil) != (wantErr == nil) || !bytes.Equal(got, want) {
			t.Fatalf("canonicalValue(%#v) = %q, %v; jcs gives %q, %v", v, got, err, want, wantErr)
		}
	})
}

// FuzzCompareUTF16: compareUTF16 is UTF-16 code unit order.
func FuzzCompareUTF16(f *testing.F) {
	f.Add("a", "b")
	f.Add("\uffff", "\U00010000")
	f.Add("x\ue000", "x\U0001F600")
	f.Fuzz(func(t *testing.T, a, b string) {
		a, b = strings.ToValidUTF8(a, "\ufffd"), strings.ToValidUTF8(b, "\ufffd")
		want := compareUnits(utf16.Encode([]rune(a)), utf16.Encode([]rune(b)))
		if got := compareUTF16(a, b); sign(got) != want {
			t.Fatalf("compareUTF16(%q, %q) = %d, want sign %d", a, b, got, want)
		}
		checkCompareMembers(t, a, b, want)
	})
}

// checkCompareMembers fails t unless members keyed a and b compare with
// sign want.
func checkCompareMembers(t *testing.T, a, b string, want int) {
	t.Helper()
	c := &canon{keys: []byte(a + b)}
	ma := member{ks: 0, ke: len(a), inKeys: true, pre: keyPrefix(a)}
	mb := member{ks: len(a), ke: len(a) + len(b), inKeys: true, pre: keyPrefix(b)}
	if got := c.compareMembers(&ma, &mb); sign(got) != want {
		t.Fatalf("compareMembers(%q, %q) = %d, want sign %d", a, b, got, want)
	}
}

// deriveReference is derive as it was before canon: json.Marshal, then
// jcs, or a decoded tree and JMESPath. derive must agree with it.
func (c *config) deriveReference(scope string, input any) (derived, error) {
	var d derived
	var tree any
	var treeErr error
	haveTree := false
	decode := func() (any, error) {
		if !haveTree {
			haveTree = true
			tree, treeErr = jsonTreeReference(input)
		}
		return tree, treeErr
	}
	var sel []byte
	switch {
	case c.hasKey:
		b, err := canonicalValueReference(c.explicitKey)
		if err != nil {
			return d, &inputError{"marshalling the explicit key", err}
		}
		if t, err := jsonTreeReference(c.explicitKey); err != nil || !missing(t) {
			sel = b
		}
	case c.keyPath == nil:
		b, err := json.Marshal(input)
		if err != nil {
			return d, &inputError{"marshalling the input to JSON", err}
		}
		if b, err = jcs.Transform(b); err != nil {
			return d, &inputError{"canonicalising the input", err}
		}
		if !missingCanonicalReference(b) {
			sel = b
		}
	default:
		t, err := decode()
		if err != nil {
			return d, err
		}
		v, err := c.keyPath.jp.Search(t)
		if err != nil {
			return d, &inputError{"evaluating key path " + c.keyPath.src, err}
		}
		if !missing(v) {
			if sel, err = canonicalValueReference(v); err != nil {
				return d, &inputError{"canonicalising the key selection", err}
			}
		}
	}
	if sel != nil {
		d.key = scope + "#" + (&Guard{}).hashHex(sel)
		if c.rawKeyAttr {
			d.selection = sel
		}
	}
	if c.validationPath != nil {
		t, err := decode()
		if err != nil {
			return d, err
		}
		v, err := c.validationPath.jp.Search(t)
		if err != nil {
			return d, &inputError{"evaluating payload validation path " + c.validationPath.src, err}
		}
		b, err := canonicalValueReference(v)
		if err != nil {
			return d, &inputError{"canonicalising the validation selection", err}
		}
		d.payloadHash = (&Guard{}).hashHex(b)
	}
	return d, nil
}

func jsonTreeReference(input any) (any, error) {
	b, err := json.Marshal(input)
	if err != nil {
		return nil, &inputError{"marshalling the input to JSON", err}
	}
	var t any
	if err := json.Unmarshal(b, &t); err != nil {
		return nil, &inputError{"decoding the input's JSON", err}
	}
	return t, nil
}

func canonicalValueReference(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return jcs.Transform(b)
}

// checkDeriveAgainstReference fails t if derive and deriveReference differ
// on input under opts.
func checkDeriveAgainstReference(t *testing.T, input any, opts ...CallOption) {
	t.Helper()
	c := defaultSettings().call
	for _, o := range opts {
		o.applyCall(&c)
	}
	if c.err != nil {
		return
	}
	c.rawKeyAttr = true
	got, err := (&Guard{}).derive(&c, "s", input)
	want, wantErr := c.deriveReference("s", input)
	if (err == nil) != (wantErr == nil) || (err != nil && err.Error() != wantErr.Error()) {
		t.Fatalf("derive(%q) error %v; reference %v", input, err, wantErr)
	}
	if got.key != want.key || got.payloadHash != want.payloadHash || !bytes.Equal(got.selection, want.selection) {
		t.Fatalf("derive(%q) = %q %q %q; reference %q %q %q", input, got.key, got.payloadHash, got.selection, want.key, want.payloadHash, want.selection)
	}
}

// deriveExprs are key paths for the derive tests: field chains (read from
// the canonical text) and general expressions (evaluated by JMESPath).
var deriveExprs = []string{"", "@", "a", "a.b", "a.b.c", "order.id", "A_1._x", "let", "null", "a.a", "b",
	"a[0]", "[a, b]", "{x: a.b}", "a.*", "powertools_json(a)", "a || b", "`null`", "\"a\"", "a . b"}

func TestDeriveMatchesReference(t *testing.T) {
	inputs := []any{
		nil, 0, false, "", "x", []any{}, map[string]any{}, []any{nil}, map[string]any{"a": nil},
		map[string]any{"a": map[string]any{"b": map[string]any{"c": 1.5}, "x": nil}, "b": []any{1, "2"}},
		map[string]any{"a": map[string]any{"b": nil}}, map[string]any{"a": map[string]any{}}, map[string]any{"a": ""},
		map[string]any{"a": []any{map[string]any{"b": 1}}}, map[string]any{"a": "{\"k\": [1.0, null]}"},
		map[string]any{"a": "\xff", "b": "\xfe"}, map[string]any{"order": map[string]any{"id": 0}},
		map[string]any{"let": 1, "null": 2, "A_1": map[string]any{"_x": "y"}},
		newBenchOrder(), make(chan int), math.NaN(), map[string]any{"a": math.Inf(1)},
	}
	for _, s := range []string{`{"a":1,"a":2}`, `{"a":{"b":1,"b":null}}`, `{"a":"\ud800"}`, "{\"a\":\"\xff\"}",
		`{"a":1e400}`, `{"b":1e-400,"a":{"b":[1e21,-0]}}`, `[1,2]`, `"a"`, `{"a":{"b":{"c":{}}}}`, `{"\u0061":{"b":1}}`,
		`{"a\u0000":1,"a":{"b":"x"}}`, `{"a":{"b":1},"a":{"c":2}}`} {
		inputs = append(inputs, json.RawMessage(s))
	}
	for _, input := range inputs {
		for _, kp := range deriveExprs {
			var opts []CallOption
			if kp != "" {
				opts = append(opts, WithKeyPath(kp))
			}
			checkDeriveAgainstReference(t, input, opts...)
			for _, vp := range []string{"@", "a.b", "b", "[b]"} {
				checkDeriveAgainstReference(t, input, append(opts, WithPayloadValidation(vp))...)
			}
			checkDeriveAgainstReference(t, input, append(opts, WithKey(input))...)
		}
	}
}

// FuzzDeriveMatchesReference: derive agrees with deriveReference on any
// JSON input, key path and validation path.
func FuzzDeriveMatchesReference(f *testing.F) {
	for i, b := range canonDocs(f) {
		if len(b) <= 600 {
			f.Add(b, deriveExprs[i%len(deriveExprs)], []string{"", "@", "a"}[i%3])
		}
	}
	f.Fuzz(func(t *testing.T, b []byte, keyPath, validation string) {
		exprs := keyPath + " " + validation
		if strings.ContainsFunc(exprs, func(r rune) bool { return r >= utf8.RuneSelf }) {
			return // go-jmespath v1.1.1 can panic compiling these (jmespath-community/go-jmespath#164)
		}
		for _, s := range []string{"*", "keys", "values", "items"} {
			if strings.Contains(exprs, s) {
				return // order of a map's members: random in both
			}
		}
		var opts []CallOption
		if keyPath != "" {
			opts = append(opts, WithKeyPath(keyPath))
		}
		if validation != "" {
			opts = append(opts, WithPayloadValidation(validation))
		}
		checkDeriveAgainstReference(t, json.RawMessage(b), opts...)
	})
}

// appendShortDecimal agrees with ParseFloat and the ECMAScript format on
// decimals around its limits (15 digits, 1e-6).
func TestShortDecimal(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	digits := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte('0' + rng.IntN(10))
		}
		return string(b)
	}
	checked := 0
	for range 200000 {
		ip := "0"
		if rng.IntN(3) > 0 {
			ip = string(byte('1'+rng.IntN(9))) + digits(rng.IntN(17))
		}
		fp := strings.Repeat("0", rng.IntN(8)) + digits(1+rng.IntN(17))
		tok := ip + "." + fp
		if rng.IntN(2) == 0 {
			tok = "-" + tok
		}
		if numberToken([]byte(tok)) != shortDecimal {
			t.Fatalf("numberToken(%s) != shortDecimal", tok)
		}
		got, ok := appendShortDecimal(nil, []byte(tok))
		if !ok {
			continue
		}
		checked++
		f, err := strconv.ParseFloat(tok, 64)
		if err != nil {
			t.Fatal(err)
		}
		if want := appendES6Number(nil, f); string(got) != string(want) {
			t.Fatalf("appendShortDecimal(%s) = %s, want %s", tok, got, want)
		}
	}
	if checked < 50000 {
		t.Errorf("only %d decimals took the short path", checked)
	}
}

func TestSpecialBytes(t *testing.T) {
	for _, s := range []string{"abcdefgh", "abc\"efgh", "\\bcdefgh", "abcdefg\x1f", "abcdefg\x80", "\x00\x01\x02\x03\x04\x05\x06\x07",
		"       ~", "\x7f\x7f\x7f\x7f\x7f\x7f\x7f\x7f", "!#[]~ 09", "aaaa\xff\"\\\x00", "\x20\x21\x22\x5b\x5c\x5d\x7e\x7f"} {
		m := specialBytes(binary.LittleEndian.Uint64([]byte(s)))
		first := 8
		for i := range 8 {
			if !plain[s[i]] {
				first = i
				break
			}
		}
		got := 8
		if m != 0 {
			got = bits.TrailingZeros64(m) / 8
		}
		if got != first {
			t.Errorf("specialBytes(%q): first special byte %d, want %d", s, got, first)
		}
	}
	// Every byte value in every position.
	for pos := range 8 {
		for v := range 256 {
			b := []byte("abcdefgh")
			b[pos] = byte(v)
			m := specialBytes(binary.LittleEndian.Uint64(b))
			if plain[v] != (m == 0) || (m != 0 && bits.TrailingZeros64(m)/8 != pos) {
				t.Fatalf("specialBytes(%q) = %x", b, m)
			}
		}
	}
}
