package httpguard

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
)

// response is a handler's response as stored for replays: its status, the
// headers that are safe to replay, and its body.
type response struct {
	status int
	header http.Header
	body   []byte
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
//	"IGH" 1                 magic and version
//	uvarint status
//	uvarint n               header fields, sorted by name
//	n × (string name, uvarint m, m × string value)
//	rest                    the body
//
// where a string is a uvarint length and its bytes.
type codec struct{}

var magic = []byte("IGH\x01")

// Marshal encodes a *response.
func (codec) Marshal(v any) ([]byte, error) {
	r, ok := v.(*response)
	if !ok || r == nil {
		return nil, fmt.Errorf("httpguard: cannot encode %T", v)
	}
	if r.unstorable {
		return nil, errTooLarge
	}
	names := make([]string, 0, len(r.header))
	size := len(magic) + 2*binary.MaxVarintLen64 + len(r.body)
	for name, values := range r.header {
		names = append(names, name)
		size += binary.MaxVarintLen64 * (2 + len(values))
		size += len(name)
		for _, v := range values {
			size += len(v)
		}
	}
	slices.Sort(names)
	b := make([]byte, 0, size)
	b = append(b, magic...)
	b = binary.AppendUvarint(b, uint64(r.status))
	b = binary.AppendUvarint(b, uint64(len(names)))
	for _, name := range names {
		b = appendString(b, name)
		values := r.header[name]
		b = binary.AppendUvarint(b, uint64(len(values)))
		for _, v := range values {
			b = appendString(b, v)
		}
	}
	return append(b, r.body...), nil
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
	if len(data) < len(magic) || string(data[:len(magic)]) != string(magic) {
		return errors.New("httpguard: the stored result is not a response stored by httpguard")
	}
	d.b = d.b[len(magic):]
	r := &response{status: int(d.uvarint(999))}
	n := d.uvarint(1 << 16)
	r.header = make(http.Header, n)
	for range n {
		name := d.string()
		m := d.uvarint(1 << 16)
		values := make([]string, 0, min(m, 16))
		for range m {
			values = append(values, d.string())
		}
		r.header[name] = values
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
