package httpguard

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
)

// response is a handler's response as stored for replays: its status, the
// headers that are safe to replay, its body and its trailers.
type response struct {
	status  int
	header  http.Header
	body    []byte
	trailer http.Header // nil for none
	// unstorable: the body passed the bound on stored responses and was
	// streamed to the client; the codec refuses to encode it, so the guard
	// records the call without a result.
	unstorable bool
}

// errTooLarge is the codec's refusal of an unstorable response.
var errTooLarge = errors.New("httpguard: response body over the bound on stored responses")

// codec stores responses in a compact binary form, not JSON: bodies are
// bytes, and base64 would make them a third larger in the store.
//
//	"IGH" 2                 magic and version
//	uvarint status
//	fields                  the header
//	fields                  the trailers
//	rest                    the body
//
// where fields are a uvarint n and n × (string name, uvarint m, m ×
// string value), sorted by name, and a string is a uvarint length and its
// bytes. Version 1, which it still reads, had no trailers.
type codec struct{}

var (
	magic   = []byte("IGH\x02")
	magicV1 = []byte("IGH\x01")
)

// Marshal encodes a *response.
func (codec) Marshal(v any) ([]byte, error) {
	r, ok := v.(*response)
	if !ok || r == nil {
		return nil, fmt.Errorf("httpguard: cannot encode %T", v)
	}
	if r.unstorable {
		return nil, errTooLarge
	}
	size := len(magic) + 3*binary.MaxVarintLen64 + len(r.body) + fieldsSize(r.header) + fieldsSize(r.trailer)
	b := make([]byte, 0, size)
	b = append(b, magic...)
	b = binary.AppendUvarint(b, uint64(r.status))
	b = appendFields(b, r.header)
	b = appendFields(b, r.trailer)
	return append(b, r.body...), nil
}

func fieldsSize(h http.Header) int {
	size := 0
	for name, values := range h {
		size += binary.MaxVarintLen64*(2+len(values)) + len(name)
		for _, v := range values {
			size += len(v)
		}
	}
	return size
}

func appendFields(b []byte, h http.Header) []byte {
	names := make([]string, 0, len(h))
	for name := range h {
		names = append(names, name)
	}
	slices.Sort(names)
	b = binary.AppendUvarint(b, uint64(len(names)))
	for _, name := range names {
		b = appendString(b, name)
		values := h[name]
		b = binary.AppendUvarint(b, uint64(len(values)))
		for _, v := range values {
			b = appendString(b, v)
		}
	}
	return b
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// Unmarshal decodes into a **response.
func (codec) Unmarshal(data []byte, v any) error {
	p, ok := v.(**response)
	if !ok {
		return fmt.Errorf("httpguard: cannot decode into %T", v)
	}
	d := decoder{b: data}
	var v1 bool
	switch {
	case bytes.HasPrefix(data, magic):
	case bytes.HasPrefix(data, magicV1):
		v1 = true
	default:
		return errors.New("httpguard: the stored result is not a response stored by httpguard")
	}
	d.b = d.b[len(magic):]
	r := &response{status: int(d.uvarint(999))}
	r.header = d.fields()
	if !v1 {
		if r.trailer = d.fields(); len(r.trailer) == 0 {
			r.trailer = nil
		}
	}
	if d.err != nil {
		return d.err
	}
	if r.status < 100 {
		return errors.New("httpguard: corrupt stored response: status out of range")
	}
	r.body = d.b
	*p = r
	return nil
}

type decoder struct {
	b   []byte
	err error
}

var errCorrupt = errors.New("httpguard: corrupt stored response")

func (d *decoder) uvarint(limit uint64) int {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 || v > limit {
		d.err = errCorrupt
		return 0
	}
	d.b = d.b[n:]
	return int(v)
}

func (d *decoder) fields() http.Header {
	n := d.uvarint(1 << 16)
	h := make(http.Header, min(n, 64))
	for range n {
		name := d.string()
		m := d.uvarint(1 << 16)
		values := make([]string, 0, min(m, 16))
		for range m {
			values = append(values, d.string())
		}
		h[name] = values
	}
	return h
}

func (d *decoder) string() string {
	n := d.uvarint(math.MaxInt32)
	if d.err == nil && n > len(d.b) {
		d.err = errCorrupt
	}
	if d.err != nil {
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}
