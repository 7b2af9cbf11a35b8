package teststores

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"sync"
	"testing"
)

// Logs collects what a logger writes, for tests of what a transport
// integration logs: give [Logs.Logger] to its WithLogger option and read
// the records back with [Logs.Records].
type Logs struct {
	mu  sync.Mutex
	buf bytes.Buffer // JSON lines; protected by mu
}

// Write keeps one JSON line; slog's JSON handler writes each record in one
// call.
func (l *Logs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// Logger returns a logger of every level that writes to l.
func (l *Logs) Logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// Records returns the records logged so far, each as its JSON object:
// "level", "msg" and the attributes by name.
func (l *Logs) Records(t testing.TB) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	dec := json.NewDecoder(bytes.NewReader(l.buf.Bytes()))
	for dec.More() {
		var rec map[string]any
		if err := dec.Decode(&rec); err != nil {
			t.Fatalf("decoding a log record: %v", err)
		}
		out = append(out, rec)
	}
	return out
}
