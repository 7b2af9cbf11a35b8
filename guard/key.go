package guard

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"

	jmespath "github.com/jmespath-community/go-jmespath"
	"github.com/jmespath-community/go-jmespath/pkg/functions"
	"github.com/jmespath-community/go-jmespath/pkg/parsing"

	"github.com/idemguard/idemguard/internal/canonjson"
	"github.com/idemguard/idemguard/internal/compress"
)

// A key is derived in four steps:
//
//  1. select: a JMESPath expression over the input's JSON form, or the
//     whole input;
//  2. canonicalise: RFC 8785 JSON Canonicalization Scheme
//     (internal/canonjson), so the same data gives the same bytes whatever
//     the field order or number spelling; a selection holding a string
//     that is not valid UTF-8 is refused, never merged with another;
//  3. hash: SHA-256 (HMAC-SHA-256 under WithKeySecret), lowercase hex;
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
	stringFunction("powertools_json", func(s string) (any, error) {
		var v any
		err := json.Unmarshal([]byte(s), &v)
		return v, err
	}),
	stringFunction("powertools_base64", func(s string) (any, error) {
		b, err := base64.StdEncoding.DecodeString(s)
		return string(b), err
	}),
	stringFunction("powertools_base64_gzip", func(s string) (any, error) {
		b, err := base64.StdEncoding.DecodeString(s)
		if err == nil {
			b, err = compress.Gunzip(b, maxGunzip)
		}
		return string(b), err
	}),
}

// maxGunzip bounds what powertools_base64_gzip inflates, so that a small
// input cannot make the guard allocate without bound.
const maxGunzip = 16 << 20

// stringFunction is a JMESPath function name of one string argument.
func stringFunction(name string, f func(string) (any, error)) jmespath.FunctionEntry {
	return jmespath.FunctionEntry{
		Name:      name,
		Arguments: []jmespath.ArgSpec{{Types: []jmespath.JpType{jmespath.JpString}}},
		Handler: func(args []any) (any, error) {
			v, err := f(args[0].(string))
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			return v, nil
		},
	}
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
	scope       string // the scope part of key
	payloadHash string // empty when validation is off
	validate    string // the payload-validation expression; "" when validation is off
	selection   []byte // the canonical selection, kept only for WithKeySelectionAttribute
	// previous are the key and payload hash under each previous key secret
	// (WithKeySecret), in order, for a guard rotating its secret.
	previous []derivedKey
}

// derivedKey is a key and payload hash under one key secret.
type derivedKey struct{ key, payloadHash string }

// hash returns the hash part of the key.
func (d *derived) hash() string {
	if d.key == "" {
		return ""
	}
	return d.key[len(d.scope)+1:]
}

// derive computes the key (and the payload hash) of input under c. A missing
// selection yields an empty key and no error.
func (g *Guard) derive(c *config, scope string, input any) (derived, error) {
	d := derived{scope: scope}
	in := inputForms{input: input}
	defer in.release()
	var sel []byte
	switch {
	case c.hasKey:
		b, err := canonical(c.explicitKey, "the explicit key")
		if err != nil {
			return d, err
		}
		if !missingCanonical(b) {
			sel = b
		}
	case c.keyPath == nil:
		b, err := in.canonical()
		if err == nil && !utf8.Valid(b) {
			err = &inputError{"the input", errInvalidUTF8}
		}
		if err != nil {
			return d, err
		}
		if !missingCanonical(b) {
			sel = b
		}
	default:
		b, m, err := in.sel(c.keyPath, "key path", "key selection")
		if err != nil {
			return d, err
		}
		if !m {
			sel = b
		}
	}
	var vsel []byte
	if c.validationPath != nil {
		b, _, err := in.sel(c.validationPath, "payload validation path", "validation selection")
		if err != nil {
			return d, err
		}
		vsel = b
		d.validate = c.validationPath.src
		d.payloadHash = g.hashHex(g.secret, b)
	}
	if sel == nil {
		return d, nil
	}
	d.key = g.keyString(g.secret, scope, sel)
	if err := g.checkKey(&d); err != nil {
		// Under every secret the key has this length.
		return derived{scope: scope}, err
	}
	if c.rawKeyAttr {
		d.selection = bytes.Clone(sel) // sel may be in the pooled buffer
	}
	if len(g.previous) > 0 {
		d.previous = make([]derivedKey, len(g.previous))
		for i, secret := range g.previous {
			d.previous[i].key = g.keyString(secret, scope, sel)
			if vsel != nil {
				d.previous[i].payloadHash = g.hashHex(secret, vsel)
			}
		}
	}
	return d, nil
}

// deriveStep derives the key of the step called name of the call d: the
// hash, under each of the guard's secrets, of the enclosing call's key
// under the same secret, within the step's scope. The step carries the
// enclosing call's payload hash, so a step's record is checked against the
// payload as the call's own record is.
func (g *Guard) deriveStep(d *derived, name string) (derived, error) {
	scope := d.scope + "/" + name
	s := derived{scope: scope, payloadHash: d.payloadHash, validate: d.validate}
	sel, err := canonical(d.key, "the enclosing call's key")
	if err != nil {
		return s, err
	}
	s.key = g.keyString(g.secret, scope, sel)
	if err := g.checkKey(&s); err != nil {
		return derived{scope: scope}, err
	}
	if len(d.previous) > 0 {
		s.previous = make([]derivedKey, len(d.previous))
		for i, p := range d.previous {
			if sel, err = canonical(p.key, "the enclosing call's key"); err != nil {
				return s, err
			}
			s.previous[i] = derivedKey{key: g.keyString(g.previous[i], scope, sel), payloadHash: p.payloadHash}
		}
	}
	return s, nil
}

var errInvalidUTF8 = errors.New("it holds a string that is not valid UTF-8 (or a lone UTF-16 surrogate), which RFC 8785 cannot represent")

// canonical returns the RFC 8785 form of v's JSON encoding; what names v
// in errors. Strings that are not valid UTF-8 are an error.
func canonical(v any, what string) ([]byte, error) {
	b, valid, err := canonjson.Append(nil, v)
	switch {
	case err != nil:
		return nil, &inputError{"canonicalising " + what, err}
	case !valid:
		return nil, &inputError{what, errInvalidUTF8}
	}
	return b, nil
}

// inputForms computes the forms of a call's input that derive needs, each
// at most once: its canonical text and its generic tree.
type inputForms struct {
	input any
	buf   *[]byte // the pooled buffer doc is in

	doc     []byte // canonical text, possibly with invalid strings (see canonjson)
	docErr  error
	docDone bool

	tree     any
	treeErr  error
	treeDone bool
}

// canonical returns the input's canonical text. It may hold invalid
// strings: each selection from it is checked.
func (in *inputForms) canonical() ([]byte, error) {
	if !in.docDone {
		in.docDone = true
		in.buf = docBuffers.Get().(*[]byte)
		var err error
		if in.doc, _, err = canonjson.Append((*in.buf)[:0], in.input); err != nil {
			in.docErr = &inputError{"canonicalising the input", err}
		}
	}
	return in.doc, in.docErr
}

// docBuffers recycles the buffers of inputs' canonical texts: a 1 KB
// input's text grown from nothing costs nine allocations.
var docBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 2<<10); return &b }}

// release returns the canonical text's buffer to the pool; nothing derived
// from the input may refer to it afterwards.
func (in *inputForms) release() {
	if in.buf != nil && cap(in.doc) <= 64<<10 {
		*in.buf = in.doc[:0]
		docBuffers.Put(in.buf)
	}
}

// decode returns the input as the generic tree JMESPath expects
// (map[string]any, []any, float64, string, bool, nil), read from its
// canonical text.
func (in *inputForms) decode() (any, error) {
	if !in.treeDone {
		in.treeDone = true
		doc, err := in.canonical()
		switch {
		case err != nil:
			in.treeErr = err
		case !utf8.Valid(doc):
			in.treeErr = &inputError{"the input", fmt.Errorf("%w; a JMESPath expression other than a field path (a.b.c) cannot leave it out", errInvalidUTF8)}
		default:
			var t any // not &in.tree, which would move in to the heap
			if err := json.Unmarshal(doc, &t); err != nil {
				in.treeErr = &inputError{"decoding the input's canonical JSON", err}
			}
			in.tree = t
		}
	}
	return in.tree, in.treeErr
}

// sel returns the canonical text of what e selects from the input, and
// whether the selection is missing (see missing). what and sel name the
// expression and its selection in errors.
func (in *inputForms) sel(e *expression, what, sel string) ([]byte, bool, error) {
	if e.chain {
		// A field chain reads the selection from the canonical text, which
		// JMESPath's tree would give back exactly; only what it selects
		// needs to be valid.
		doc, err := in.canonical()
		if err != nil {
			return nil, false, err
		}
		b := canonjson.Select(doc, e.fields)
		if b == nil {
			b = nullText
		}
		if !utf8.Valid(b) {
			return nil, false, &inputError{"the " + sel + " " + e.src, errInvalidUTF8}
		}
		return b, missingCanonical(b), nil
	}
	t, err := in.decode()
	if err != nil {
		return nil, false, err
	}
	v, err := e.jp.Search(t)
	if err != nil {
		return nil, false, &inputError{"evaluating " + what + " " + e.src, err}
	}
	b, err := canonical(v, "the "+sel)
	return b, missing(v), err
}

var nullText = []byte("null")[:4:4]

// missingCanonical reports whether canonical JSON text b is a selection
// that identifies nothing (see missing): null, "", or an array or object
// that is empty or holds only nulls.
func missingCanonical(b []byte) bool {
	switch string(b) {
	case "null", `""`, "{}", "[]":
		return true
	}
	switch b[0] {
	case '[':
		// [null,null,...]
		for i := 1; ; i += 5 {
			if i+5 > len(b) || string(b[i:i+4]) != "null" {
				return false
			}
			if b[i+4] == ']' {
				return i+5 == len(b)
			}
			if b[i+4] != ',' {
				return false
			}
		}
	case '{':
		// {"k":null,...}: skip each key, stop at the first other value.
		for i := 1; i < len(b); {
			if b[i] != '"' {
				return false
			}
			for i++; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
			i++
			if i+6 > len(b) || string(b[i:i+5]) != ":null" {
				return false
			}
			i += 5
			if b[i] == '}' {
				return i+1 == len(b)
			}
			if b[i] != ',' {
				return false
			}
			i++
		}
	}
	return false
}

// keyString returns "<scope>#<hash of sel>" under secret, in one
// allocation.
func (g *Guard) keyString(secret []byte, scope string, sel []byte) string {
	var hx [2 * sha256.Size]byte
	var b strings.Builder
	b.Grow(len(scope) + 1 + len(hx))
	b.WriteString(scope)
	b.WriteByte('#')
	b.Write(hash(&hx, secret, sel))
	return b.String()
}

// hashHex returns the hash of b under secret as a string.
func (g *Guard) hashHex(secret, b []byte) string {
	var hx [2 * sha256.Size]byte
	return string(hash(&hx, secret, b))
}

// hash writes into hx and returns the lowercase hex SHA-256 of b, or its
// HMAC-SHA-256 under secret if there is one.
func hash(hx *[2 * sha256.Size]byte, secret, b []byte) []byte {
	var sum [sha256.Size]byte
	if secret == nil {
		sum = sha256.Sum256(b)
	} else {
		sum = hmacSum(secret, b)
	}
	hex.Encode(hx[:], sum[:])
	return hx[:]
}

// hmacSum returns the HMAC-SHA-256 of b under secret. It is a function of
// its own so that hash's plain path keeps its sum on the stack.
func hmacSum(secret, b []byte) (sum [sha256.Size]byte) {
	m := hmac.New(sha256.New, secret)
	m.Write(b)
	m.Sum(sum[:0])
	return sum
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
