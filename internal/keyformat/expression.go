package keyformat

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	jmespath "github.com/jmespath-community/go-jmespath"
	"github.com/jmespath-community/go-jmespath/pkg/functions"
	"github.com/jmespath-community/go-jmespath/pkg/parsing"

	"github.com/idemguard/idemguard/internal/compress"
)

// Expression is a compiled JMESPath expression.
type Expression struct {
	src string
	jp  jmespath.JMESPath
	// chain reports that the expression is "@" or a chain of unquoted
	// identifiers, "a.b.c", with these fields: a selection can then be
	// read from the input's canonical text instead of evaluating jp.
	chain  bool
	fields []string
}

// String returns the expression as it was given.
func (e *Expression) String() string { return e.src }

// Search evaluates the expression over a generic JSON tree
// (map[string]any, []any, float64, string, bool, nil).
func (e *Expression) Search(tree any) (any, error) { return e.jp.Search(tree) }

// ExpressionError reports a JMESPath expression that does not compile.
type ExpressionError struct {
	// Expr is the expression as given.
	Expr string
	// Err is the parser's error.
	Err error
}

func (e *ExpressionError) Error() string {
	return fmt.Sprintf("invalid JMESPath expression %q: %v", e.Expr, e.Err)
}

// Unwrap returns the parser's error.
func (e *ExpressionError) Unwrap() error { return e.Err }

// expressions caches compiled expressions by source, so that per-call
// options built on every call do not compile again.
var expressions sync.Map // string -> *Expression

// Compile compiles src, or returns an [*ExpressionError]. Besides what
// the parser refuses, it refuses, when an option is given rather than at
// the first call, what would fail or mislead at every call: a parser panic
// (go-jmespath v1.1.1 panics on some malformed input), an unknown
// function, and a selection whose value depends on map iteration order (an
// object wildcard, keys(), values(), items()) outside a function that makes
// order irrelevant, such as sort() or length(): such a key would differ
// between retries of one request.
func Compile(src string) (*Expression, error) {
	if e, ok := expressions.Load(src); ok {
		return e.(*Expression), nil
	}
	jp, err := compileChecked(src)
	if err != nil {
		return nil, &ExpressionError{Expr: src, Err: err}
	}
	e := &Expression{src: src, jp: jp}
	e.fields, e.chain = fieldChain(src)
	v, _ := expressions.LoadOrStore(src, e)
	return v.(*Expression), nil
}

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
// input cannot make a key's derivation allocate without bound.
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
