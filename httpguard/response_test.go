package httpguard

import (
	"bytes"
	"errors"
	"net/http"
	"reflect"
	"testing"
)

func TestCodecRoundTrip(t *testing.T) {
	in := &response{
		status:  201,
		header:  http.Header{"Content-Type": {"application/json"}, "X-Multi": {"a", "", "c"}, "Empty": {}},
		body:    []byte("\x00\xffbinary body"),
		trailer: http.Header{"X-Checksum": {"c0ffee"}},
	}
	b, err := codec{}.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	b2, _ := codec{}.Marshal(in)
	if !bytes.Equal(b, b2) {
		t.Error("encoding is not deterministic")
	}
	var out *response
	if err := (codec{}).Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if out.status != in.status || !bytes.Equal(out.body, in.body) || !reflect.DeepEqual(out.header, http.Header{"Content-Type": {"application/json"}, "X-Multi": {"a", "", "c"}, "Empty": {}}) ||
		!reflect.DeepEqual(out.trailer, in.trailer) {
		t.Errorf("round trip: %+v, want %+v", out, in)
	}
	// A response stored by version 1, which had no trailers, still decodes.
	v1 := []byte("IGH\x01\xc9\x01\x01\x0cContent-Type\x01\x0atext/plain" + "old body")
	if err := (codec{}).Unmarshal(v1, &out); err != nil || out.status != 201 || out.header.Get("Content-Type") != "text/plain" || string(out.body) != "old body" || out.trailer != nil {
		t.Errorf("version 1: %+v, %v", out, err)
	}
	// Every truncation is corrupt or decodes to less, never panics.
	for i := range len(b) {
		var r *response
		_ = codec{}.Unmarshal(b[:i], &r)
	}
	if err := (codec{}).Unmarshal([]byte(`{"json":true}`), &out); err == nil {
		t.Error("foreign data decoded")
	}
	if _, err := (codec{}).Marshal(&response{status: 200, unstorable: true}); !errors.Is(err, errTooLarge) {
		t.Errorf("unstorable response: %v, want errTooLarge", err)
	}
}

func TestReplaySafe(t *testing.T) {
	h := http.Header{
		"Connection":             {"close, X-Per-Hop"},
		"X-Per-Hop":              {"1"},
		"Keep-Alive":             {"timeout=5"},
		"Transfer-Encoding":      {"chunked"},
		"Set-Cookie":             {"s=1"},
		"Date":                   {"Mon, 01 Jan 2026 00:00:00 GMT"},
		"Trailer:X-Sum":          {"1"},
		"Location":               {"/payments/1"},
		"Idempotency-Key-Status": {"executed"},
	}
	got := replaySafe(h, false, []string{"Idempotency-Key-Status"})
	if want := (http.Header{"Location": {"/payments/1"}}); !reflect.DeepEqual(got, want) {
		t.Errorf("replaySafe = %v, want %v", got, want)
	}
	if got := replaySafe(h, true, nil); got.Get("Set-Cookie") != "s=1" {
		t.Errorf("with Set-Cookie replay: %v", got)
	}
}
