package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemguard/idemguard/store"
)

// parseBefore reads --before: an RFC 3339 time with its zone, or a
// positive duration meaning that long ago ("24h"); "" is now less skew. It
// refuses a cut-off later than now less skew, the clock-skew tolerance:
// a record that expired before such a cut-off may still be live on the
// clock of a guard that runs behind this one, and deleting it would let a
// retry run its side effect again. A signed duration is refused as
// ambiguous (-24h: ago, or from now?).
func parseBefore(s string, now time.Time, skew time.Duration) (time.Time, error) {
	latest := now.Add(-skew)
	if s == "" {
		return latest, nil
	}
	var cut time.Time
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		cut = t
	} else if d, err := time.ParseDuration(s); err == nil {
		switch {
		case strings.HasPrefix(s, "-") || strings.HasPrefix(s, "+"):
			return time.Time{}, usage("--before %q: a signed duration is ambiguous (ago, or from now?); write how long ago without a sign, such as 24h", s)
		case d <= 0:
			return time.Time{}, usage("--before %q: the duration must be positive: how long ago, such as 24h", s)
		}
		cut = now.Add(-d)
	} else {
		return time.Time{}, usage("--before %q: want an RFC 3339 time with its zone (2025-01-31T00:00:00Z) or a duration ago (24h)", s)
	}
	if cut.After(latest) {
		return time.Time{}, usage("--before %s is later than now less the clock skew (%s, --clock-skew %v): records that expired before it may still be live for a guard whose clock runs behind, and deleting one lets a retry run its side effect again; give an earlier time, or a duration of at least %v",
			s, latest.UTC().Format(time.RFC3339), skew, skew)
	}
	return cut, nil
}

func (a *app) purgeCmd() *cobra.Command {
	var (
		before string
		skew   time.Duration
	)
	c := &cobra.Command{
		Use:   "purge [--before T]",
		Short: "Delete expired records, for stores that keep them (PostgreSQL)",
		Long: `purge deletes the records that expired before T (default: now less
--clock-skew), in batches that do not block live claims, and prints how
many it deleted. Only PostgreSQL keeps expired rows: DynamoDB deletes
expired items itself (TTL on the expiry attribute) and Redis expires its
keys (PEXPIREAT), so for them purge says so and does nothing. T is an RFC
3339 time with its zone, or a positive duration ago, such as 24h.

T may not be later than now less --clock-skew: a record that expires after
that may still be live for a guard whose clock runs behind this one, and
deleting it lets the next retry run its side effect again. Such a T, a
signed duration (-24h: ago, or from now?) or a time without a zone is
refused with exit status 2, before anything is deleted.

Expired records are already ignored by the guard; purging only keeps the
table small. Run it on a schedule (cron, pg_cron) or after large runs.`,
		Example: `  idemguard purge --store postgres://idemguard@db:5432/app
  idemguard purge --before 168h`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			t, err := parseBefore(before, a.now(), skew)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			b, err := a.open(ctx)
			if err != nil {
				return err
			}
			defer b.Close()
			p, ok := b.store.(store.Purger)
			if !ok {
				how := "expires records itself"
				switch b.kind {
				case "dynamodb":
					how = "deletes expired items itself (TTL on the expiry attribute; see idemguard create-table)"
				case "redis":
					how = "expires its keys itself (PEXPIREAT at each record's expiry)"
				}
				if a.json {
					return writeJSONLine(a.stdout, purgeJSON{Purged: 0, Before: t.UTC().Format(time.RFC3339Nano), Note: kindName(b.kind) + " " + how})
				}
				fmt.Fprintf(a.stdout, "nothing to purge: %s %s\n", kindName(b.kind), how)
				return nil
			}
			// Purge works in batches until done: no per-request timeout.
			n, err := p.Purge(ctx, t)
			if err != nil {
				return a.storeErr(b, fmt.Sprintf("purging (%d deleted before the error)", n), err)
			}
			if a.json {
				return writeJSONLine(a.stdout, purgeJSON{Purged: n, Before: t.UTC().Format(time.RFC3339Nano)})
			}
			fmt.Fprintf(a.stdout, "purged %d %s that expired before %s from %s\n", n, plural(n, "record"), fmtTime(t), b.desc)
			return nil
		},
	}
	c.Flags().StringVar(&before, "before", "", "delete records that expired before this time (RFC 3339, or a duration ago such as 24h; default now less --clock-skew); never later than now less --clock-skew")
	addSkewFlag(c, &skew)
	return c
}

// purgeJSON is purge's --json output.
type purgeJSON struct {
	Purged int64  `json:"purged"`
	Before string `json:"before"`
	Note   string `json:"note,omitempty"`
}

// plural returns word, with an s unless n is 1.
func plural(n int64, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}
