package guard

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"sync"

	"github.com/gowebpki/jcs"
	jmespath "github.com/jmespath-community/go-jmespath"
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
}

// expressions caches compiled expressions by source, so that per-call
// options built on every call do not compile again.
var expressions sync.Map // string -> *expression

func compile(src string) (*expression, error) {
	if e, ok := expressions.Load(src); ok {
		return e.(*expression), nil
	}
	jp, err := jmespath.Compile(src, powertoolsFunctions...)
	if err != nil {
		return nil, &ExpressionError{Expr: src, Err: err}
	}
	e, _ := expressions.LoadOrStore(src, &expression{src: src, jp: jp})
	return e.(*expression), nil
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
func (c *config) derive(scope string, input any) (derived, error) {
	var d derived
	var tree any // the input's JSON form, decoded once if an expression needs it
	var treeErr error
	haveTree := false
	decode := func() (any, error) {
		if !haveTree {
			haveTree = true
			tree, treeErr = jsonTree(input)
		}
		return tree, treeErr
	}

	var sel []byte
	switch {
	case c.hasKey:
		b, err := canonicalValue(c.explicitKey)
		if err != nil {
			return d, &inputError{"marshalling the explicit key", err}
		}
		if !missingJSON(c.explicitKey) {
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
		if !missingCanonical(b) {
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
			if sel, err = canonicalValue(v); err != nil {
				return d, &inputError{"canonicalising the key selection", err}
			}
		}
	}
	if sel != nil {
		d.key = scope + "#" + hashHex(sel)
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
		b, err := canonicalValue(v)
		if err != nil {
			return d, &inputError{"canonicalising the validation selection", err}
		}
		d.payloadHash = hashHex(b)
	}
	return d, nil
}

// jsonTree returns input's JSON form as the generic tree JMESPath expects
// (map[string]any, []any, float64, string, bool, nil).
func jsonTree(input any) (any, error) {
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

// Canonicalize returns the RFC 8785 (JCS) canonical form of the JSON text b.
func Canonicalize(b []byte) ([]byte, error) { return jcs.Transform(b) }

// canonicalValue marshals v to JSON and canonicalises it.
func canonicalValue(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return jcs.Transform(b)
}

func hashHex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
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

// missingCanonical is missing for canonical JSON text of the whole input.
func missingCanonical(b []byte) bool {
	switch string(b) {
	case "null", `""`, "{}", "[]":
		return true
	}
	if (b[0] != '{' && b[0] != '[') || !bytes.Contains(b, []byte("null")) {
		return false
	}
	var v any
	if json.Unmarshal(b, &v) != nil {
		return false
	}
	return missing(v)
}

// missingJSON is missing for an arbitrary Go value.
func missingJSON(v any) bool {
	t, err := jsonTree(v)
	return err == nil && missing(t)
}
