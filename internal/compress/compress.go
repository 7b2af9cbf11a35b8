// Package compress is the result compression the stores share: a result
// above a threshold is stored gzip-compressed when that makes it smaller,
// and marked with [Encoding] so that a reader knows to decompress it.
package compress

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
)

// DefaultAbove is the result size, in bytes, above which the stores
// compress results unless configured otherwise: 16 KiB.
const DefaultAbove = 16 << 10

// Encoding is the value stores write in their encoding attribute or field
// ("data_encoding") next to a compressed result.
const Encoding = "gzip"

// ErrLimit is returned by [Gunzip] when the data decompresses to more bytes
// than allowed.
var ErrLimit = errors.New("compress: decompressed size over the limit")

// Gzip returns b gzip-compressed, and true, when b is longer than above and
// the compressed form is smaller than b. Otherwise it returns nil and false:
// store b as it is. A negative above turns compression off.
func Gzip(b []byte, above int) ([]byte, bool, error) {
	if above < 0 || len(b) <= above {
		return nil, false, nil
	}
	var buf bytes.Buffer
	buf.Grow(len(b) / 2)
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		return nil, false, err
	}
	if err := zw.Close(); err != nil {
		return nil, false, err
	}
	if buf.Len() >= len(b) {
		return nil, false, nil
	}
	return buf.Bytes(), true, nil
}

// Gunzip decompresses b, which must be one complete gzip stream. It reads
// at most max bytes of output, so that a small item cannot make the reader
// allocate without bound (a decompression bomb), and returns an error
// matching [ErrLimit] when there is more.
func Gunzip(b []byte, max int) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	out, err := io.ReadAll(io.LimitReader(zr, int64(max)+1))
	if err != nil {
		return nil, err
	}
	if len(out) > max {
		return nil, fmt.Errorf("%w: more than %d bytes", ErrLimit, max)
	}
	if err := zr.Close(); err != nil {
		return nil, err
	}
	return out, nil
}
