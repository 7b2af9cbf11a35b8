package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestWorkerPool(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), &out, 120, 6); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	for _, want := range []string{"effects = unique messages = 120", "0 duplicate effects", "died with"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
