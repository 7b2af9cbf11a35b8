// Package respfmt holds the formats in which httpguard and grpcguard store
// responses as a guarded call's result: theirs to write and read, and the
// idemguard command's to show.
package respfmt

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"net/http"
	"slices"
)

// HTTP is an HTTP response as httpguard stores it: its status, the
// headers that are safe to replay, its body and its trailers.
type HTTP struct {
	Status  int
	Header  http.Header
	Body    []byte
	Trailer http.Header // nil for none
}

// The HTTP format, binary rather than JSON (bodies are bytes, and base64
// would make them a third larger in the store):
//
//	"IGH" 2                 magic and version
//	uvarint status
//	fields                  the header
//	fields                  the trailers
//	rest                    the body
//
// where fields are a uvarint n and n × (string name, uvarint m, m ×
// string value), sorted by name, and a string is a uvarint length and its
// bytes. Version 1, which DecodeHTTP still reads, had no trailers.
var (
	httpMagic   = []byte("IGH\x02")
	httpMagicV1 = []byte("IGH\x01")
)

// IsHTTP reports whether data starts like a stored HTTP response.
func IsHTTP(data []byte) bool {
	return bytes.HasPrefix(data, httpMagic) || bytes.HasPrefix(data, httpMagicV1)
}

// AppendHTTP appends r in the HTTP format to b.
func AppendHTTP(b []byte, r *HTTP) []byte {
	b = slices.Grow(b, len(httpMagic)+binary.MaxVarintLen64+len(r.Body)+fieldsSize(r.Header)+fieldsSize(r.Trailer))
	b = append(b, httpMagic...)
	b = binary.AppendUvarint(b, uint64(r.Status))
	b = appendFields(b, r.Header)
	b = appendFields(b, r.Trailer)
	return append(b, r.Body...)
}

func fieldsSize(h http.Header) int {
	size := binary.MaxVarintLen64
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

// ErrNotHTTP is DecodeHTTP's error for data that is not a stored HTTP
// response.
var ErrNotHTTP = errors.New("the stored result is not a response stored by httpguard")

// ErrCorrupt is the error for data in one of the formats that cannot be
// read to the end.
var ErrCorrupt = errors.New("corrupt stored response")

// DecodeHTTP reads a response in the HTTP format. The body is a subslice
// of data.
func DecodeHTTP(data []byte) (*HTTP, error) {
	if !IsHTTP(data) {
		return nil, ErrNotHTTP
	}
	v1 := bytes.HasPrefix(data, httpMagicV1)
	d := decoder{b: data[len(httpMagic):]}
	r := &HTTP{Status: d.uvarint(999)}
	r.Header = d.fields()
	if !v1 {
		if r.Trailer = d.fields(); len(r.Trailer) == 0 {
			r.Trailer = nil
		}
	}
	if d.err != nil {
		return nil, d.err
	}
	if r.Status < 100 {
		return nil, errors.New("corrupt stored response: status out of range")
	}
	r.Body = d.b
	return r, nil
}

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) uvarint(limit uint64) int {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 || v > limit {
		d.err = ErrCorrupt
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
		d.err = ErrCorrupt
	}
	if d.err != nil {
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

// The gRPC format: a response message as its full name and its wire bytes
// (proto.Marshal), so that a replay needs no service descriptor:
//
//	"IGG" 1        magic and version
//	uvarint n      length of the message's full name
//	n bytes        the full name, such as "google.protobuf.StringValue"
//	rest           the message's wire bytes
var messageMagic = []byte("IGG\x01")

// IsMessage reports whether data starts like a stored gRPC message.
func IsMessage(data []byte) bool { return bytes.HasPrefix(data, messageMagic) }

// AppendMessageName appends the gRPC format's magic and the message's full
// name to b; the message's wire bytes follow.
func AppendMessageName(b []byte, fullName string) []byte {
	b = append(b, messageMagic...)
	b = binary.AppendUvarint(b, uint64(len(fullName)))
	return append(b, fullName...)
}

// ErrNotMessage is SplitMessage's error for data that is not a stored gRPC
// message.
var ErrNotMessage = errors.New("the stored result is not a message stored by grpcguard")

// SplitMessage reads a message in the gRPC format: its full name and its
// wire bytes (a subslice of data).
func SplitMessage(data []byte) (fullName string, wire []byte, err error) {
	if !IsMessage(data) {
		return "", nil, ErrNotMessage
	}
	data = data[len(messageMagic):]
	n, k := binary.Uvarint(data)
	if k <= 0 || n > uint64(len(data)-k) {
		return "", nil, ErrCorrupt
	}
	return string(data[k : k+int(n)]), data[k+int(n):], nil
}
