package main

import (
	"bufio"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemguard/idemguard/store"
)

func (a *app) listCmd() *cobra.Command {
	var (
		scope, status string
		stuck         bool
		limit, page   int
		skew          time.Duration
	)
	c := &cobra.Command{
		Use:   "list [--scope S] [--status in-progress|completed] [--stuck] [--limit N]",
		Short: "List records, or the stuck claims among them",
		Long: `list prints the records of the store, one line each, page by page as the
store returns them, so that it runs in bounded memory however many records
there are. PostgreSQL lists newest first (by expiry); DynamoDB (a Scan, or a
Query of the partition in sort-key mode) and Redis (SCAN) list in their own
order.

--scope keeps the records of one scope (keys "SCOPE#…"), --status those
in progress or completed, and --stuck the claims that are stuck: in progress
with a lease that lapsed (by more than --clock-skew) and nobody holding it,
which 'idemguard release' clears. --limit stops after N records.

The table's columns: STATUS, STATE (live, stuck or expired, judged at now
less --clock-skew as a claimant judges it), LEASE ("in 25s", "lapsed
4m12s", "none" for a claim without a lease, "-" for a completed record),
EXPIRES ("in 23h59m", "expired 5m"), RESULT (kind and size), TOKEN (its
first 8 characters) and KEY; get writes the lease and the expiry in the same
words. --json prints one object per line (docs/cli.md has the schema).
Exit status 1 when no record matches.`,
		Example: `  idemguard list --stuck --store dynamodb://idempotency
  idemguard list --scope charge --status completed --limit 20
  idemguard list --stuck --json | jq -r .key`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			q := store.Query{Limit: page}
			if scope != "" {
				q.Prefix = scope + "#"
			}
			switch status {
			case "":
			case "in-progress", "inprogress", "INPROGRESS":
				q.Status = store.StatusInProgress
			case "completed", "COMPLETED":
				q.Status = store.StatusCompleted
			default:
				return usage("--status %q: want in-progress or completed", status)
			}
			if stuck {
				if q.Status == store.StatusCompleted {
					return usage("--stuck lists in-progress claims; it cannot be combined with --status completed")
				}
				q.Status = store.StatusInProgress
			}
			if limit < 0 || page < 0 {
				return usage("--limit and --page-size cannot be negative")
			}
			ctx := cmd.Context()
			b, err := a.open(ctx)
			if err != nil {
				return err
			}
			defer b.Close()
			admin, ok := b.store.(store.Admin)
			if !ok {
				return &exitErr{code: exitError, err: fmt.Errorf("%s cannot list records", b.desc)}
			}
			w := bufio.NewWriterSize(a.stdout, 64<<10)
			n, pages, newest := 0, 0, false
		pages:
			for {
				cctx, cancel := a.call(ctx)
				p, err := admin.List(cctx, q)
				cancel()
				switch {
				case errors.Is(err, store.ErrSkip):
					return &exitErr{code: exitError, err: fmt.Errorf("%s cannot list records: its client lacks the listing API", b.desc)}
				case errors.Is(err, store.ErrNewerFormat):
					// The page comes with the records that could be read.
					fmt.Fprintf(a.stderr, "idemguard: warning: %v\n  %s\n", err, newerFormatHint)
				case errors.Is(err, store.ErrCorrupt):
					fmt.Fprintf(a.stderr, "idemguard: warning: %v\n", err)
				case err != nil:
					w.Flush()
					return a.storeErr(b, fmt.Sprintf("listing page %d", pages+1), err)
				}
				pages++
				newest = p.NewestFirst
				now := a.now()
				at := now.Add(-skew)
				for _, r := range p.Records {
					if stuck && state(r, at) != stateStuck {
						continue
					}
					if a.json {
						if err := writeJSONLine(w, toJSON(r, now, at)); err != nil {
							return err
						}
					} else {
						if n == 0 {
							fmt.Fprintln(w, listHeader)
						}
						fmt.Fprintln(w, listRow(r, now, at))
					}
					n++
					if limit > 0 && n >= limit {
						break pages
					}
				}
				if err := w.Flush(); err != nil {
					return err
				}
				if p.Next == "" {
					break
				}
				q.Cursor = p.Next
			}
			if err := w.Flush(); err != nil {
				return err
			}
			if n == 0 {
				what := "records"
				if stuck {
					what = "stuck claims"
				}
				return notFound("no %s in %s", what, b.desc)
			}
			if !a.json {
				fmt.Fprintln(a.stderr, listSummary(n, pages, stuck, b.desc, newest))
			}
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&scope, "scope", "", "list only this scope's records (keys SCOPE#…)")
	f.StringVar(&status, "status", "", "list only in-progress or completed records")
	f.BoolVar(&stuck, "stuck", false, "list only stuck claims: in progress with a lapsed lease")
	f.IntVar(&limit, "limit", 0, "stop after N records (0: all)")
	f.IntVar(&page, "page-size", 0, "records per store request (0: the store's default, 100; at most 1000)")
	addSkewFlag(c, &skew)
	return c
}

// listSummary is list's last line, on standard error: how many records (or
// stuck claims) it printed from desc, in which order, in how many pages.
func listSummary(n, pages int, stuck bool, desc string, newest bool) string {
	what := "records"
	if stuck {
		what = "stuck claims"
	}
	if n == 1 {
		what = strings.TrimSuffix(what, "s")
	}
	order := "in the store's order"
	if newest {
		order = "newest first"
	}
	page := "pages"
	if pages == 1 {
		page = "page"
	}
	return fmt.Sprintf("%d %s from %s, %s (%d %s)", n, what, desc, order, pages, page)
}
