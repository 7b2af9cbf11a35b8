package main

import (
	"errors"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/store"
)

// addSkewFlag adds --clock-skew, the tolerance the guard allows between
// clocks (guard.WithClockSkew): a lease counts as lapsed only once it has
// lapsed by more than this on the operator's clock, as for a claimant.
func addSkewFlag(c *cobra.Command, skew *time.Duration) {
	c.Flags().DurationVar(skew, "clock-skew", guard.DefaultClockSkew,
		"how far clocks may disagree (guard.WithClockSkew): a lease counts as lapsed only once it lapsed by more than this")
}

func (a *app) getCmd() *cobra.Command {
	var (
		skew time.Duration
		full bool
	)
	c := &cobra.Command{
		Use:   "get KEY",
		Short: "Show a record: status, lease, expiry, payload hash, result, token",
		Long: `get shows the record stored under KEY: its status and state (live, stuck:
in progress with a lapsed lease, or expired), when its lease ends and how
long is left, when it expires and how long is left, its payload hash, the
kind and size of its result and the result itself (JSON pretty-printed;
Temporal payloads with their encoding metadata; anything else in base64),
and the start of its fencing token.

Exit status 1 when there is no record under KEY.`,
		Example: `  idemguard get 'charge#3f1c…' --store dynamodb://idempotency
  idemguard get "$(idemguard key --scope charge order.json)" --json | jq .result`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			b, err := a.open(ctx)
			if err != nil {
				return err
			}
			defer b.Close()
			key := args[0]
			cctx, cancel := a.call(ctx)
			rec, err := b.store.Get(cctx, key)
			cancel()
			if errors.Is(err, store.ErrNotFound) {
				return notFound("no record for %q in %s", key, b.desc)
			}
			if err != nil {
				return a.storeErr(b, "reading "+key, err)
			}
			now := a.now()
			return a.showRecord(rec, now, now.Add(-skew), full)
		},
	}
	addSkewFlag(c, &skew)
	c.Flags().BoolVar(&full, "full", false, "print the whole result, however large (default: the first 64 KiB)")
	return c
}

// showRecord writes rec in the chosen format, with its result.
func (a *app) showRecord(rec *store.Record, now, at time.Time, full bool) error {
	if a.json {
		return writeJSONLine(a.stdout, getJSON{recordJSON: toJSON(rec, now, at), Result: decodeResult(rec)})
	}
	printRecord(a.stdout, rec, now, at, full)
	return nil
}
