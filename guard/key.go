package guard

import (
	"bytes"
	"compress/gzip"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/gowebpki/jcs"
	jmespath "github.com/jmespath-community/go-jmespath"
	"github.com/jmespath-community/go-jmespath/pkg/functions"
	"github.com/jmespath-community/go-jmespath/pkg/parsing"
)

// A key is derived in four steps (see DESIGN.md "Keys"):
//
//  1. select: a JMESPath expression over the input's JSON form, or the
//     whole input;
//  2. canonicalise: RFC 8785 JSON Canonicalization Scheme, so the same data
//     gives the same bytes whatever the field order or number spelling;
//  3. hash: SHA-256, lowercase hex;
//  4. name: "<scope>#<hash>".

// expression is a compiled JMESPath expression.
type expression struct {
	src string
	jp  jmespath.JMESPath
	// chain reports that the expression is "@" or a chain of unquoted
	// identifiers, "a.b.c", with these fields: derive can then read the
	// selection from the input's canonical text instead of evaluating jp.
	chain  bool
	fields []string
}

// expressions caches compiled expressions by source, so that per-call
// options built on every call do not compile again.
var expressions sync.Map // string -> *expression

func compile(src string) (*expression, error) {
	if e, ok := expressions.Load(src); ok {
		return e.(*expression), nil
	}
	jp, err := compileChecked(src)
	if err != nil {
		return nil, &ExpressionError{Expr: src, Err: err}
	}
	e := &expression{src: src, jp: jp}
	e.fields, e.chain = fieldChain(src)
	v, _ := expressions.LoadOrStore(src, e)
	return v.(*expression), nil
}

// compileChecked compiles src and rejects, when the guard is built rather
// than at the first call, what would fail or mislead at every call: a
// parser panic (go-jmespath v1.1.1 panics on some malformed input), an
// unknown function, and a selection whose value depends on map iteration
// order (an object wildcard, keys(), values(), items()) outside a function
// that makes order irrelevant, such as sort() or length(): such a key would
// differ between retries of one request.
func compileChecked(src string) (jp jmespath.JMESPath, err error) {
	defer func() {
		if r := recover(); r != nil {
			jp, err = nil, fmt.Errorf("the parser failed on it: %v", r)
		}
	}()
	ast, err := jmespath.NewParser().Parse(src)
	if err != nil {
		return nil, err
	}
	if err := checkNode(ast, false); err != nil {
		return nil, err
	}
	return jmespath.Compile(src, powertoolsFunctions...)
}

// knownFunctions are the names of the functions expressions may call.
var knownFunctions = func() map[string]bool {
	m := map[string]bool{}
	for _, f := range functions.GetDefaultFunctions() {
		m[f.Name] = true
	}
	for _, f := range powertoolsFunctions {
		m[f.Name] = true
	}
	return m
}()

// orderFree are functions whose result does not depend on the order of
// their array arguments.
var orderFree = map[string]bool{
	"sort": true, "sort_by": true, "length": true, "max": true, "min": true,
	"max_by": true, "min_by": true, "sum": true, "avg": true, "contains": true,
}

// orderDependent are functions whose result follows map iteration order.
var orderDependent = map[string]bool{"keys": true, "values": true, "items": true}

func checkNode(n parsing.ASTNode, ordered bool) error {
	switch n.NodeType {
	case parsing.ASTFunctionExpression:
		name, _ := n.Value.(string)
		if !knownFunctions[name] {
			return fmt.Errorf("unknown function %s()", name)
		}
		if orderDependent[name] && !ordered {
			return fmt.Errorf("%s() follows map order, so the key would change between calls; wrap it in sort()", name)
		}
		ordered = ordered || orderFree[name]
	case parsing.ASTValueProjection:
		if !ordered {
			return fmt.Errorf("an object wildcard (.*) follows map order, so the key would change between calls; wrap it in sort() or select fields by name")
		}
	}
	for _, c := range n.Children {
		if err := checkNode(c, ordered); err != nil {
			return err
		}
	}
	return nil
}

// fieldChain splits "a.b.c", a chain of JMESPath unquoted identifiers, into
// its fields; "@" is the empty chain.
func fieldChain(src string) ([]string, bool) {
	if src == "@" {
		return nil, true
	}
	fields := strings.Split(src, ".")
	for _, f := range fields {
		if f == "" || !(f[0] == '_' || 'a' <= f[0]|0x20 && f[0]|0x20 <= 'z') {
			return nil, false
		}
		for i := 1; i < len(f); i++ {
			if b := f[i]; !(b == '_' || '0' <= b && b <= '9' || 'a' <= b|0x20 && b|0x20 <= 'z') {
				return nil, false
			}
		}
	}
	return fields, true
}

// powertoolsFunctions are the JMESPath functions AWS Powertools ships, so
// that expressions written for it work unchanged.
var powertoolsFunctions = []jmespath.FunctionEntry{
	{
		Name:      "powertools_json",
		Arguments: []jmespath.ArgSpec{{Types: []jmespath.JpType{jmespath.JpString}}},
		Handler: func(args []any) (any, error) {
			var v any
			if err := json.Unmarshal([]byte(args[0].(string)), &v); err != nil {
				return nil, fmt.Errorf("powertools_json: %w", err)
			}
			return v, nil
		},
	},
	{
		Name:      "powertools_base64",
		Arguments: []jmespath.ArgSpec{{Types: []jmespath.JpType{jmespath.JpString}}},
		Handler: func(args []any) (any, error) {
			b, err := base64.StdEncoding.DecodeString(args[0].(string))
			if err != nil {
				return nil, fmt.Errorf("powertools_base64: %w", err)
			}
			return string(b), nil
		},
	},
	{
		Name:      "powertools_base64_gzip",
		Arguments: []jmespath.ArgSpec{{Types: []jmespath.JpType{jmespath.JpString}}},
		Handler: func(args []any) (any, error) {
			b, err := base64.StdEncoding.DecodeString(args[0].(string))
			if err != nil {
				return nil, fmt.Errorf("powertools_base64_gzip: %w", err)
			}
			zr, err := gzip.NewReader(bytes.NewReader(b))
			if err != nil {
				return nil, fmt.Errorf("powertools_base64_gzip: %w", err)
			}
			out, err := io.ReadAll(zr)
			if err != nil {
				return nil, fmt.Errorf("powertools_base64_gzip: %w", err)
			}
			return string(out), nil
		},
	},
}

// inputError wraps a failure to key the input; it matches ErrInvalidInput.
type inputError struct {
	what string
	err  error
}

func (e *inputError) Error() string { return fmt.Sprintf("%v: %s: %v", ErrInvalidInput, e.what, e.err) }
func (e *inputError) Unwrap() error { return e.err }
func (e *inputError) Is(target error) bool {
	return target == ErrInvalidInput
}

// derived is a call's key, bound before the function runs.
type derived struct {
	key         string // "<scope>#<hash>"; empty when the selection is missing
	payloadHash string // empty when validation is off
	selection   []byte // the canonical selection, kept only for WithKeySelectionAttribute
}

// derive computes the key (and the payload hash) of input under c. A missing
// selection yields an empty key and no error.
func (g *Guard) derive(c *config, scope string, input any) (derived, error) {
	var d derived
	cn := getCanon()
	defer putCanon(cn)
	in := inputForms{cn: cn, input: input}

	var sel []byte
	switch {
	case c.hasKey:
		b, err := cn.canonicalValue(c.explicitKey)
		if err != nil {
			return d, &inputError{"marshalling the explicit key", err}
		}
		if !missingCanonical(b) {
			sel = b
		}
	case c.keyPath == nil:
		b, err := in.canonical()
		if err != nil {
			return d, err
		}
		if !missingCanonical(b) {
			sel = b
		}
	default:
		b, m, err := in.sel(c.keyPath, true, "key path", "key selection")
		if err != nil {
			return d, err
		}
		if !m {
			sel = b
		}
	}
	if sel != nil {
		d.key = g.keyString(scope, sel)
		if c.rawKeyAttr {
			d.selection = bytes.Clone(sel) // sel is cn's, reused below
		}
	}

	if c.validationPath != nil {
		b, _, err := in.sel(c.validationPath, false, "payload validation path", "validation selection")
		if err != nil {
			return d, err
		}
		d.payloadHash = g.hashHex(b)
	}
	return d, nil
}

// inputForms computes the forms of a call's input that derive needs, each
// at most once: its JSON encoding, its canonical text, its generic tree.
type inputForms struct {
	cn    *canon
	input any

	json    []byte // in cn.enc: nothing else may use cn.enc after marshal
	jsonErr error
	encoded bool

	doc      []byte // canonical text: cn.doc, or jcs's
	docErr   error
	docDone  bool
	fastDone bool
	fast     bool // doc came from canon

	tree     any
	treeErr  error
	treeDone bool
}

func (in *inputForms) marshal() ([]byte, error) {
	if !in.encoded {
		in.encoded = true
		if in.json, in.jsonErr = in.cn.marshal(in.input); in.jsonErr != nil {
			in.jsonErr = &inputError{"marshalling the input to JSON", in.jsonErr}
		}
	}
	return in.json, in.jsonErr
}

// canonicalFast reports whether canon (its encoder or its parser)
// accepted the input; if so, its canonical text is in.doc.
func (in *inputForms) canonicalFast() bool {
	if !in.fastDone {
		in.fastDone = true
		if b, ok := in.input.(json.RawMessage); ok {
			in.fast = in.cn.transform(b)
		} else if in.fast = in.cn.encodeCanonical(in.input); !in.fast {
			// JSON text that canon accepts is valid, so json.Marshal would
			// only have compacted it: canonicalise it directly.
			if b, _ := in.marshal(); b != nil {
				in.fast = in.cn.transform(b)
			}
		}
		if in.fast {
			in.doc, in.cn.doc, in.cn.out = in.cn.out, in.cn.out, in.cn.doc[:0]
		}
	}
	return in.fast
}

// canonical returns the input's canonical text.
func (in *inputForms) canonical() ([]byte, error) {
	if !in.docDone {
		in.docDone = true
		if !in.canonicalFast() {
			b, err := in.marshal()
			if err != nil {
				in.docErr = err
			} else if in.doc, err = jcs.Transform(b); err != nil {
				in.docErr = &inputError{"canonicalising the input", err}
			}
		}
	}
	return in.doc, in.docErr
}

// decode returns the input's JSON form as the generic tree JMESPath
// expects (map[string]any, []any, float64, string, bool, nil).
func (in *inputForms) decode() (any, error) {
	if !in.treeDone {
		in.treeDone = true
		// Not from the canonical text, which loses -0: to_string() would
		// tell.
		b, err := in.marshal()
		if err != nil {
			in.treeErr = err
		} else {
			var t any // not &in.tree, which would move in to the heap
			if err := json.Unmarshal(b, &t); err != nil {
				in.treeErr = &inputError{"decoding the input's JSON", err}
			}
			in.tree = t
		}
	}
	return in.tree, in.treeErr
}

// sel returns the canonical text of what e selects from the input, and
// whether the selection is missing (then, with onlyPresent, no text). what
// and sel name the expression and its selection in errors.
func (in *inputForms) sel(e *expression, onlyPresent bool, what, sel string) ([]byte, bool, error) {
	// When canon accepts the input, its canonical text is exactly the tree's
	// (encoding/json decodes it without loss), and a field chain cannot
	// fail: read the selection from the text.
	if e.chain {
		if in.canonicalFast() {
			b := selectFields(in.doc, e.fields)
			return b, missingCanonical(b), nil
		}
	}
	t, err := in.decode()
	if err != nil {
		return nil, false, err
	}
	v, err := e.jp.Search(t)
	if err != nil {
		return nil, false, &inputError{"evaluating " + what + " " + e.src, err}
	}
	m := missing(v)
	if m && onlyPresent {
		return nil, true, nil
	}
	b, err := in.cn.canonicalValue(v)
	if err != nil {
		return nil, m, &inputError{"canonicalising the " + sel, err}
	}
	return b, m, nil
}

// Canonicalize returns the RFC 8785 (JCS) canonical form of the JSON text b.
func Canonicalize(b []byte) ([]byte, error) {
	cn := getCanon()
	defer putCanon(cn)
	out, err := cn.canonical(b)
	if err != nil {
		return nil, err
	}
	return bytes.Clone(out), nil
}

// keyString returns "<scope>#<hash of sel>".
func (g *Guard) keyString(scope string, sel []byte) string {
	return scope + "#" + g.hashHex(sel)
}

// hashHex returns the lowercase hex SHA-256 of b, or its HMAC-SHA-256 under
// the guard's key secret.
func (g *Guard) hashHex(b []byte) string {
	if g.secret == nil {
		sum := sha256.Sum256(b)
		return hex.EncodeToString(sum[:])
	}
	m := hmac.New(sha256.New, g.secret)
	m.Write(b)
	return hex.EncodeToString(m.Sum(nil))
}

// missing reports whether a selection identifies nothing: null, an empty
// string, or an object or array that is empty or holds only nulls. Numbers
// and booleans, including 0 and false, are never missing.
func missing(v any) bool {
	switch v := v.(type) {
	case nil:
		return true
	case string:
		return v == ""
	case []any:
		for _, e := range v {
			if e != nil {
				return false
			}
		}
		return true
	case map[string]any:
		for _, e := range v {
			if e != nil {
				return false
			}
		}
		return true
	}
	return false
}
