package keyformat

import (
	"encoding/json"
	"fmt"
	"sync"
	"unicode/utf8"

	"github.com/idemguard/idemguard/internal/canonjson"
)

// Input computes the forms of an input that selections read, each at most
// once: its canonical text and its generic tree. Release it when the
// selections made from it are no longer needed.
type Input struct {
	input any
	buf   *[]byte // the pooled buffer doc is in

	doc     []byte // canonical text, possibly with invalid strings (see canonjson)
	docErr  error
	docDone bool

	tree     any
	treeErr  error
	treeDone bool
}

// NewInput returns the forms of input, none computed yet.
func NewInput(input any) Input { return Input{input: input} }

// Canonical returns the input's canonical text. It may hold invalid
// strings: each selection from it is checked.
func (in *Input) Canonical() ([]byte, error) {
	if !in.docDone {
		in.docDone = true
		in.buf = docBuffers.Get().(*[]byte)
		var err error
		if in.doc, _, err = canonjson.Append((*in.buf)[:0], in.input); err != nil {
			in.docErr = &InputError{"canonicalising the input", err}
		}
	}
	return in.doc, in.docErr
}

// Whole returns the canonical text of the whole input as a selection: an
// error if it holds an invalid string.
func (in *Input) Whole() ([]byte, error) {
	b, err := in.Canonical()
	if err == nil && !utf8.Valid(b) {
		err = &InputError{"the input", ErrInvalidUTF8}
	}
	return b, err
}

// docBuffers recycles the buffers of inputs' canonical texts: a 1 KB
// input's text grown from nothing costs nine allocations.
var docBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 2<<10); return &b }}

// Release returns the canonical text's buffer to the pool; nothing derived
// from the input may refer to it afterwards.
func (in *Input) Release() {
	if in.buf != nil && cap(in.doc) <= 64<<10 {
		*in.buf = in.doc[:0]
		docBuffers.Put(in.buf)
	}
}

// decode returns the input as the generic tree JMESPath expects
// (map[string]any, []any, float64, string, bool, nil), read from its
// canonical text.
func (in *Input) decode() (any, error) {
	if !in.treeDone {
		in.treeDone = true
		doc, err := in.Canonical()
		switch {
		case err != nil:
			in.treeErr = err
		case !utf8.Valid(doc):
			in.treeErr = &InputError{"the input", fmt.Errorf("%w; a JMESPath expression other than a field path (a.b.c) cannot leave it out", ErrInvalidUTF8)}
		default:
			var t any // not &in.tree, which would move in to the heap
			if err := json.Unmarshal(doc, &t); err != nil {
				in.treeErr = &InputError{"decoding the input's canonical JSON", err}
			}
			in.tree = t
		}
	}
	return in.tree, in.treeErr
}

// Select returns the canonical text of what e selects from the input, and
// whether the selection is missing (see [Missing]). what and sel name the
// expression and its selection in errors.
func (in *Input) Select(e *Expression, what, sel string) ([]byte, bool, error) {
	if e.chain {
		// A field chain reads the selection from the canonical text, which
		// JMESPath's tree would give back exactly; only what it selects
		// needs to be valid.
		doc, err := in.Canonical()
		if err != nil {
			return nil, false, err
		}
		b := canonjson.Select(doc, e.fields)
		if b == nil {
			b = nullText
		}
		if !utf8.Valid(b) {
			return nil, false, &InputError{"the " + sel + " " + e.src, ErrInvalidUTF8}
		}
		return b, MissingCanonical(b), nil
	}
	t, err := in.decode()
	if err != nil {
		return nil, false, err
	}
	v, err := e.jp.Search(t)
	if err != nil {
		return nil, false, &InputError{"evaluating " + what + " " + e.src, err}
	}
	b, err := Canonical(v, "the "+sel)
	return b, Missing(v), err
}

var nullText = []byte("null")[:4:4]
