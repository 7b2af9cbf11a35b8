package guard

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/gowebpki/jcs"

	"github.com/idemguard/idemguard/internal/keyformat"
)

// canonDocs returns the JSON documents of canonjson's RFC 8785 vectors and
// some more.
func canonDocs(t testing.TB) [][]byte {
	files, err := filepath.Glob(filepath.Join("..", "internal", "canonjson", "testdata", "jcs", "*.json"))
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

// deriveReference derives keys the plain way: json.Marshal, then the
// RFC 8785 reference (gowebpki/jcs), or a decoded tree and JMESPath. derive
// must agree with it wherever the input's strings are valid UTF-8; where
// they are not, json.Marshal has replaced them with U+FFFD, and derive
// must either refuse the selection or derive the key of a selection that
// leaves them out.
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
			return d, &keyformat.InputError{What: "marshalling the explicit key", Err: err}
		}
		if t, err := jsonTreeReference(c.explicitKey); err != nil || !keyformat.Missing(t) {
			sel = b
		}
	case c.keyPath == nil:
		b, err := json.Marshal(input)
		if err != nil {
			return d, &keyformat.InputError{What: "marshalling the input to JSON", Err: err}
		}
		if b, err = jcs.Transform(b); err != nil {
			return d, &keyformat.InputError{What: "canonicalising the input", Err: err}
		}
		if !missingCanonicalReference(b) {
			sel = b
		}
	default:
		t, err := decode()
		if err != nil {
			return d, err
		}
		v, err := c.keyPath.Search(t)
		if err != nil {
			return d, &keyformat.InputError{What: "evaluating key path " + c.keyPath.String(), Err: err}
		}
		if !keyformat.Missing(v) {
			if sel, err = canonicalValueReference(v); err != nil {
				return d, &keyformat.InputError{What: "canonicalising the key selection", Err: err}
			}
		}
	}
	if sel != nil {
		d.key = scope + "#" + keyformat.Hash(nil, sel)
		if c.rawKeyAttr {
			d.selection = sel
		}
	}
	if c.validationPath != nil {
		t, err := decode()
		if err != nil {
			return d, err
		}
		v, err := c.validationPath.Search(t)
		if err != nil {
			return d, &keyformat.InputError{What: "evaluating payload validation path " + c.validationPath.String(), Err: err}
		}
		b, err := canonicalValueReference(v)
		if err != nil {
			return d, &keyformat.InputError{What: "canonicalising the validation selection", Err: err}
		}
		d.payloadHash = keyformat.Hash(nil, b)
	}
	return d, nil
}

func jsonTreeReference(input any) (any, error) {
	b, err := json.Marshal(input)
	if err != nil {
		return nil, &keyformat.InputError{What: "marshalling the input to JSON", Err: err}
	}
	var t any
	if err := json.Unmarshal(b, &t); err != nil {
		return nil, &keyformat.InputError{What: "decoding the input's JSON", Err: err}
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
	c := defaultSettings().calls
	for _, o := range opts {
		o.applyCall(&c)
	}
	if c.err != nil {
		return
	}
	c.rawKeyAttr = true
	got, err := (&Guard{}).derive(&c, "s", input)
	want, wantErr := c.deriveReference("s", input)
	if errors.Is(err, keyformat.ErrInvalidUTF8) {
		if b, _ := json.Marshal(input); !mayHoldInvalid(b) && !mayHoldInvalid(jsonOf(c.explicitKey)) {
			t.Fatalf("derive(%q) = %v, but the input has no invalid string", input, err)
		}
		return
	}
	if err != nil && wantErr == nil && !canonicalisable(input) {
		// The whole input cannot be canonicalised (duplicate member
		// names): derive refuses it even where JMESPath over encoding/json's
		// tree, which keeps the last duplicate, would select elsewhere.
		return
	}
	if (err == nil) != (wantErr == nil) {
		t.Fatalf("derive(%q) error %v; reference %v", input, err, wantErr)
	}
	if got.key != want.key || got.payloadHash != want.payloadHash || !bytes.Equal(got.selection, want.selection) {
		t.Fatalf("derive(%q) = %q %q %q; reference %q %q %q", input, got.key, got.payloadHash, got.selection, want.key, want.payloadHash, want.selection)
	}
}

// canonicalisable reports whether the reference canonicalises input.
func canonicalisable(input any) bool {
	b, err := json.Marshal(input)
	if err == nil {
		_, err = jcs.Transform(b)
	}
	return err == nil
}

func jsonOf(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// mayHoldInvalid reports whether JSON text b may stand for a string that is
// not valid UTF-8: it is not valid UTF-8 itself, holds U+FFFD (as
// json.Marshal writes an invalid byte), or escapes a surrogate.
func mayHoldInvalid(b []byte) bool {
	if !utf8.Valid(b) || bytes.ContainsRune(b, utf8.RuneError) {
		return true
	}
	lower := bytes.ToLower(b)
	if bytes.Contains(lower, []byte(`\ufffd`)) {
		return true
	}
	for _, c := range "89abcdef" {
		if bytes.Contains(lower, []byte(`\ud`+string(c))) {
			return true
		}
	}
	return false
}

// missingCanonicalReference is missingCanonical the plain way: decode, then
// missing.
func missingCanonicalReference(b []byte) bool {
	var v any
	return json.Unmarshal(b, &v) == nil && keyformat.Missing(v)
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
