package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idemguard/idemguard/store"
)

// purge refuses a cut-off that could delete live records: one later than
// now less the clock skew, a negative duration, an ambiguous value. It
// exits 2 before it opens the store, and the live record stays.
func TestPurgeRefusesLiveCutoff(t *testing.T) {
	f := postgresStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	now := time.Now()
	live := &store.Record{Key: "ledger#live", Status: store.StatusInProgress, Token: "t-live",
		ExpiresAt: now.Add(time.Hour), LeaseExpiresAt: now.Add(time.Minute)}
	if _, err := f.s.Acquire(ctx, live, now); err != nil {
		t.Fatal(err)
	}
	env := []string{StoreEnv + "=" + f.url}
	for _, before := range []string{
		now.Add(2 * time.Hour).UTC().Format(time.RFC3339), // in the future
		now.UTC().Format(time.RFC3339Nano),                // now: within the skew
		"-1h",                                             // negative: ago, or from now?
		"0s",                                              // now
		"500ms",                                           // within the clock skew
		"2025-01-31",                                      // no time, no zone
		"24",                                              // no unit
	} {
		r := cli(t, env, "", "purge", "--before", before)
		if r.code != exitError || !strings.Contains(r.stderr, "--before") {
			t.Errorf("purge --before %q: exit %d, stderr %q; want 2 and a message about --before", before, r.code, r.stderr)
		}
	}
	if _, err := f.s.Get(ctx, live.Key); err != nil {
		t.Errorf("the live record after the refused purges: %v", err)
	}
	// A cut-off in the past purges, and keeps the live record.
	r := cli(t, env, "", "purge", "--before", "1h").want(t, exitOK, "purge", "--before", "1h")
	if !strings.HasPrefix(r.stdout, "purged 0 records") {
		t.Errorf("purge --before 1h: %q", r.stdout)
	}
	cli(t, env, "", "purge").want(t, exitOK, "purge")
	if _, err := f.s.Get(ctx, live.Key); err != nil {
		t.Errorf("the live record after purge: %v", err)
	}
}

func TestParseBefore(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"":                          now.Add(-time.Second),
		"24h":                       now.Add(-24 * time.Hour),
		"1.5s":                      now.Add(-1500 * time.Millisecond),
		"2026-02-01T00:00:00Z":      time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC),
		"2026-03-01T13:00:00+02:00": time.Date(2026, 3, 1, 11, 0, 0, 0, time.UTC),
	} {
		got, err := parseBefore(in, now, time.Second)
		if err != nil || !got.Equal(want) {
			t.Errorf("parseBefore(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"-24h", "+24h", "0", "0s", "999ms", "2026-03-01T12:00:00Z", "2026-03-01T11:59:59.5Z", "2027-01-01T00:00:00Z", "yesterday", "2026-02-01", "24"} {
		if got, err := parseBefore(in, now, time.Second); err == nil {
			t.Errorf("parseBefore(%q) = %v; want an error", in, got)
		}
	}
}
