package httpguard

import (
	"errors"
	"net/http"
	"reflect"
	"testing"

	"github.com/idemguard/idemguard/internal/respfmt"
)

// The codec is respfmt's HTTP format (tested there) around a response
// that may be unstorable.
func TestCodec(t *testing.T) {
	in := &response{HTTP: respfmt.HTTP{Status: 201, Header: http.Header{"A": {"b"}}, Body: []byte("body")}}
	b, err := codec{}.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out *response
	if err := (codec{}).Unmarshal(b, &out); err != nil || out.Status != 201 || string(out.Body) != "body" || out.unstorable {
		t.Errorf("round trip: %+v, %v", out, err)
	}
	if err := (codec{}).Unmarshal([]byte(`{"json":true}`), &out); err == nil {
		t.Error("foreign data decoded")
	}
	if _, err := (codec{}).Marshal(&response{HTTP: respfmt.HTTP{Status: 200}, unstorable: true}); !errors.Is(err, errTooLarge) {
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
