package main

import (
	"context"
	"errors"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/store"
)

// addSkewFlag adds --clock-skew, the tolerance the guard allows between
// clocks (guard.WithClockSkew): a lease counts as lapsed only once it has
// lapsed by more than this on the operator's clock, as for a claimant.
func addSkewFlag(c *cobra.Command, skew *time.Duration) {
	c.Flags().DurationVar(skew, "clock-skew", adapt.DefaultClockSkew,
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
kind and size of its result and the result itself (JSON pretty-printed; a
response httpguard stored as its status, headers, body and trailers; one
grpcguard stored as its message or status; Temporal payloads with their
encoding metadata; anything else in base64), and the start of its fencing
token. An in-progress record has no result (--json: result_kind null).

Exit status 1 when there is no record under KEY.`,
		Example: `  idemguard get 'charge#3f1c…' --store dynamodb://idempotency
  idemguard get "$(idemguard key --http --route 'POST /payments' --idempotency-key 8e03978e-… --authorization-env AUTH)"
  idemguard get "$(idemguard key --scope charge order.json)" --json | jq .result`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			b, err := a.open(ctx)
			if err != nil {
				return err
			}
			defer b.Close()
			rec, err := a.get(ctx, b, args[0], "")
			if err != nil {
				return err
			}
			now := a.now()
			return a.showRecord(rec, now, now.Add(-skew), full)
		},
	}
	addSkewFlag(c, &skew)
	c.Flags().BoolVar(&full, "full", false, "print the whole result, however large (default: the first 64 KiB)")
	return c
}

// get reads the record key; its errors end the command (exit status 1 if
// there is none, with the message's tail after the key's).
func (a *app) get(ctx context.Context, b *backend, key, tail string) (*store.Record, error) {
	ctx, cancel := a.call(ctx)
	defer cancel()
	rec, err := b.store.Get(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		return nil, notFound("no record for %q in %s%s", key, b.desc, tail)
	}
	if err != nil {
		return nil, a.storeErr(b, "reading "+key, err)
	}
	return rec, nil
}

// showRecord writes rec in the chosen format, with its result.
func (a *app) showRecord(rec *store.Record, now, at time.Time, full bool) error {
	if a.json {
		return writeJSONLine(a.stdout, getJSON{recordJSON: toJSON(rec, now, at), Result: decodeResult(rec)})
	}
	printRecord(a.stdout, rec, now, at, full)
	return nil
}
