package compress

import (
	"bytes"
	"compress/gzip"
	"errors"
	"math/rand/v2"
	"testing"
)

func TestGzipRoundTrip(t *testing.T) {
	compressible := bytes.Repeat([]byte(`{"k":"v"},`), DefaultAbove/10+1)
	incompressible := make([]byte, DefaultAbove+1)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range incompressible {
		incompressible[i] = byte(rng.Uint32())
	}
	for _, tc := range []struct {
		name  string
		in    []byte
		above int
		want  bool
	}{
		{"compressible above", compressible, DefaultAbove, true},
		{"compressible at the threshold", compressible[:DefaultAbove], DefaultAbove, false},
		{"incompressible", incompressible, DefaultAbove, false},
		{"off", compressible, -1, false},
		{"zero threshold", []byte("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"), 0, true},
		{"empty", nil, 0, false},
	} {
		z, ok, err := Gzip(tc.in, tc.above)
		if err != nil || ok != tc.want {
			t.Errorf("%s: Gzip = %v, %v; want ok=%v", tc.name, ok, err, tc.want)
			continue
		}
		if !ok {
			if z != nil {
				t.Errorf("%s: Gzip returned %d bytes with ok=false", tc.name, len(z))
			}
			continue
		}
		if len(z) >= len(tc.in) {
			t.Errorf("%s: compressed %d bytes to %d", tc.name, len(tc.in), len(z))
		}
		out, err := Gunzip(z, len(tc.in))
		if err != nil || !bytes.Equal(out, tc.in) {
			t.Errorf("%s: Gunzip = %d bytes, %v; want the %d input bytes", tc.name, len(out), err, len(tc.in))
		}
	}
}

func TestGunzipLimit(t *testing.T) {
	in := make([]byte, 1<<20)
	z, ok, err := Gzip(in, 0)
	if !ok || err != nil {
		t.Fatalf("Gzip = %v, %v", ok, err)
	}
	if _, err := Gunzip(z, len(in)-1); !errors.Is(err, ErrLimit) {
		t.Errorf("Gunzip over the limit = %v, want ErrLimit", err)
	}
	if out, err := Gunzip(z, len(in)); err != nil || len(out) != len(in) {
		t.Errorf("Gunzip at the limit = %d bytes, %v", len(out), err)
	}
}

func TestGunzipInvalid(t *testing.T) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(bytes.Repeat([]byte("x"), 1000))
	zw.Close()
	whole := buf.Bytes()
	for name, b := range map[string][]byte{
		"not gzip":  []byte("not gzip at all"),
		"empty":     {},
		"truncated": whole[:len(whole)-6],
	} {
		if _, err := Gunzip(b, 1<<20); err == nil || errors.Is(err, ErrLimit) {
			t.Errorf("%s: Gunzip = %v, want a gzip error", name, err)
		}
	}
}
