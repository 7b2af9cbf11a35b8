package respfmt

import (
	"bytes"
	"errors"
	"net/http"
	"reflect"
	"testing"
)

func TestHTTPRoundTrip(t *testing.T) {
	in := &HTTP{
		Status:  201,
		Header:  http.Header{"Content-Type": {"application/json"}, "X-Multi": {"a", "", "c"}, "Empty": {}},
		Body:    []byte("\x00\xffbinary body"),
		Trailer: http.Header{"X-Checksum": {"c0ffee"}},
	}
	b := AppendHTTP(nil, in)
	if !bytes.Equal(b, AppendHTTP(nil, in)) {
		t.Error("encoding is not deterministic")
	}
	out, err := DecodeHTTP(b)
	if err != nil || !reflect.DeepEqual(out, in) {
		t.Errorf("round trip: %+v, %v; want %+v", out, err, in)
	}
	// Every truncation is corrupt or decodes to less, never panics.
	for i := range len(b) {
		_, _ = DecodeHTTP(b[:i])
	}
	if _, err := DecodeHTTP([]byte(`{"json":true}`)); !errors.Is(err, ErrNotHTTP) {
		t.Errorf("foreign data: %v, want ErrNotHTTP", err)
	}
	// A response stored by version 1, which had no trailers, still decodes.
	v1 := []byte("IGH\x01\xc9\x01\x01\x0cContent-Type\x01\x0atext/plain" + "old body")
	if out, err := DecodeHTTP(v1); err != nil || out.Status != 201 || out.Header.Get("Content-Type") != "text/plain" || string(out.Body) != "old body" || out.Trailer != nil {
		t.Errorf("version 1: %+v, %v", out, err)
	}
}

func TestMessage(t *testing.T) {
	b := append(AppendMessageName(nil, "google.protobuf.StringValue"), 0x0a, 0x01, 'x')
	name, wire, err := SplitMessage(b)
	if err != nil || name != "google.protobuf.StringValue" || !bytes.Equal(wire, []byte{0x0a, 0x01, 'x'}) || !IsMessage(b) || IsHTTP(b) {
		t.Errorf("SplitMessage = %q, %x, %v", name, wire, err)
	}
	for i := range len(b) - 3 {
		if _, _, err := SplitMessage(b[:i]); err == nil && i < len(b)-3 {
			t.Errorf("SplitMessage of %d bytes: no error", i)
		}
	}
	if _, _, err := SplitMessage([]byte("IGH\x02")); !errors.Is(err, ErrNotMessage) {
		t.Errorf("an HTTP response: %v, want ErrNotMessage", err)
	}
}
