package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/memory"
)

// The summary list writes to standard error counts in words that agree
// with their numbers: "1 page", "2 pages", "1 stuck claim".
func TestListSummaryPlurals(t *testing.T) {
	for _, c := range []struct {
		n, pages int
		stuck    bool
		newest   bool
		want     string
	}{
		{1, 1, false, false, "1 record from S, in the store's order (1 page)"},
		{2, 1, false, true, "2 records from S, newest first (1 page)"},
		{1, 3, true, false, "1 stuck claim from S, in the store's order (3 pages)"},
		{40, 2, true, false, "40 stuck claims from S, in the store's order (2 pages)"},
	} {
		if got := listSummary(c.n, c.pages, c.stuck, "S", c.newest); got != c.want {
			t.Errorf("listSummary(%d, %d, stuck %v) = %q, want %q", c.n, c.pages, c.stuck, got, c.want)
		}
	}
}

// list, get and release say the same of a record's lease and expiry, in
// the same words and with the same figure, and the same state, whatever
// the record: a claim under a running lease, one whose lease lapsed less
// than the clock-skew tolerance ago (still live for a claimant), a stuck
// one, one without a lease, a completed record, an expired one.
func TestLeaseFiguresAgree(t *testing.T) {
	now := time.Date(2026, 6, 2, 10, 0, 0, 0, time.UTC)
	const skew = time.Second
	at := now.Add(-skew)
	claim := func(lease, expiry time.Duration) *store.Record {
		r := &store.Record{Key: "charge#k", Status: store.StatusInProgress, Token: "c4a5be1f0000", ExpiresAt: now.Add(expiry)}
		if lease != 0 {
			r.LeaseExpiresAt = now.Add(lease)
		}
		return r
	}
	done := &store.Record{Key: "charge#k", Status: store.StatusCompleted, Token: "0a1b2c3d", Result: []byte(`1`), ExpiresAt: now.Add(23 * time.Hour)}
	for _, c := range []struct {
		name             string
		r                *store.Record
		state, lease     string
		expires          string
		releaseRefusesIt bool // an expired claim is released: it blocks nothing, and deleting it harms nothing
	}{
		{"held", claim(25*time.Second, time.Hour), stateLive, "in 25s", "in 1h", true},
		{"lapsed within the skew", claim(-500*time.Millisecond, time.Hour), stateLive, "lapsed 500ms", "in 1h", true},
		{"stuck", claim(-(4*time.Minute + 12*time.Second), time.Hour), stateStuck, "lapsed 4m12s", "in 1h", false},
		{"no lease", claim(0, time.Hour), stateLive, "none", "in 1h", true},
		{"completed", done, stateLive, "-", "in 23h", true},
		{"expired", claim(-2*time.Hour, -time.Hour), stateExpired, "lapsed 2h", "expired 1h", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			row := listRow(c.r, now, at)
			fields := strings.Fields(row)
			if fields[1] != c.state {
				t.Errorf("list STATE %q, want %q: %s", fields[1], c.state, row)
			}
			if !strings.Contains(row, pad(c.lease)) || !strings.Contains(row, pad(c.expires)) {
				t.Errorf("list row %q; want LEASE %q and EXPIRES %q", row, c.lease, c.expires)
			}
			var get strings.Builder
			printRecord(&get, c.r, now, at, false)
			lines := map[string]string{}
			for _, l := range strings.Split(get.String(), "\n") {
				if len(l) > 14 {
					lines[strings.TrimSpace(l[:14])] = l[14:]
				}
			}
			if !strings.Contains(lines["status"], "("+c.state) {
				t.Errorf("get status %q, want the state %q list shows", lines["status"], c.state)
			}
			if !strings.HasSuffix(lines["lease ends"], "("+c.lease+")") && !strings.HasPrefix(lines["lease ends"], c.lease) {
				t.Errorf("get lease %q, want %q as list shows it", lines["lease ends"], c.lease)
			}
			if !strings.HasSuffix(lines["expires"], "("+c.expires+")") {
				t.Errorf("get expires %q, want (%s) as list shows it", lines["expires"], c.expires)
			}
			if c.name == "lapsed within the skew" && !strings.Contains(lines["status"], "1s clock-skew tolerance") {
				t.Errorf("get status %q does not say the lapsed claim is live within the clock-skew tolerance", lines["status"])
			}
			j := toJSON(c.r, now, at)
			if j.State != c.state {
				t.Errorf("--json state %q, want %q", j.State, c.state)
			}

			s := memory.New()
			if _, err := s.Acquire(context.Background(), c.r, now.Add(-3*time.Hour)); err != nil {
				t.Fatal(err)
			}
			err := releaseStuck(context.Background(), s, c.r, now, at)
			var ref *refusal
			switch {
			case !c.releaseRefusesIt && err != nil:
				t.Errorf("release of a stuck claim: %v", err)
			case c.releaseRefusesIt && !errors.As(err, &ref):
				t.Errorf("release: %v, want a refusal", err)
			case c.releaseRefusesIt && c.r.Status == store.StatusInProgress && c.state == stateLive && c.lease != "none" &&
				!strings.Contains(ref.reason, "lease "+c.lease):
				t.Errorf("release refused with %q; want the lease as list and get show it, %q", ref.reason, "lease "+c.lease)
			}
		})
	}
}

// pad is a cell as list's fixed-width columns hold it.
func pad(cell string) string { return cell + " " }
