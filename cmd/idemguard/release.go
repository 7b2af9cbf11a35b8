package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemguard/idemguard/store"
)

// releaseHold is the lease of the claim release takes over a stuck one
// with, and deletes at once: if the CLI dies in between, that claim lapses
// by itself after this long.
const releaseHold = 30 * time.Second

// releaseTokenPrefix starts the token of the CLI's own claims.
const releaseTokenPrefix = "idemguard-release-"

// refusal is why release left a record alone.
type refusal struct{ reason string }

func (r *refusal) Error() string { return r.reason }

// releaseStuck clears rec, a record read at now and judged at time at (now
// less the skew tolerance), if it is a stuck claim: in progress, its lease
// lapsed. It returns a *refusal, and changes nothing, when rec is not stuck
// or stopped being stuck since it was read.
//
// A delete conditional on rec's token (Store.Release) is not enough: the
// guard renews a lease under the same token (Store.Extend), so a claim
// renewed between the read and the delete would be deleted under its
// holder. releaseStuck instead takes the claim over with Store.Acquire at
// time at, the conditional write by which any retry takes over a lapsed
// claim: it succeeds only if no live record holds the key at that moment,
// so a renewed, completed or newly claimed record makes it fail and
// nothing changes. Then it deletes its own claim, conditional on its own
// token. The old holder, if it is still running somewhere, is fenced out
// exactly as after a takeover: its Extend and Complete fail with
// guard.ErrLeaseLost. The CLI's own claim lives from now, not from at, so
// that a skew beyond a store's expiry grace (Redis deletes a key whose
// expiry plus the grace has passed) does not expire it as it is written;
// if it is gone anyway when release deletes it, the stuck claim is gone
// too, and that is what is reported.
func releaseStuck(ctx context.Context, s store.Store, rec *store.Record, now, at time.Time) error {
	switch {
	case rec.Status != store.StatusInProgress:
		return &refusal{fmt.Sprintf("%s is %s, not a stuck claim; to delete it anyway (the next call with this key then runs again), use --force", rec.Key, rec.Status)}
	case rec.Live(at) && rec.LeaseExpiresAt.IsZero():
		return &refusal{fmt.Sprintf("%s is claimed without a lease: the claim holds until the record expires at %s (%s); wait, or use --force if you know its holder is gone",
			rec.Key, fmtTime(rec.ExpiresAt), expiresCell(rec, now))}
	case rec.Live(at):
		return &refusal{fmt.Sprintf("%s is held: lease %s (ends %s), so its holder may still be running; a claim counts as stuck once its lease has lapsed by more than the %s clock-skew tolerance (--clock-skew). Wait for that, or use --force if you know the holder is gone",
			rec.Key, leaseCell(rec, now), fmtTime(rec.LeaseExpiresAt), fmtDur(now.Sub(at)))}
	}
	var b [16]byte
	rand.Read(b[:])
	mine := &store.Record{
		Key:            rec.Key,
		Status:         store.StatusInProgress,
		Token:          releaseTokenPrefix + hex.EncodeToString(b[:]),
		ExpiresAt:      now.Add(2 * releaseHold),
		LeaseExpiresAt: now.Add(releaseHold),
	}
	old, err := s.Acquire(ctx, mine, at)
	if errors.Is(err, store.ErrConflict) {
		switch {
		case old == nil:
			return &refusal{fmt.Sprintf("%s was claimed again meanwhile; nothing released", rec.Key)}
		case old.Status == store.StatusCompleted:
			return &refusal{fmt.Sprintf("%s completed meanwhile; nothing released", rec.Key)}
		case old.Token == rec.Token:
			return &refusal{fmt.Sprintf("%s was renewed by its holder meanwhile: its lease now runs until %s; nothing released", rec.Key, fmtTime(old.LeaseExpiresAt))}
		}
		return &refusal{fmt.Sprintf("%s was claimed by another caller meanwhile (token %s…); nothing released", rec.Key, shortToken(old.Token))}
	}
	if err != nil {
		return fmt.Errorf("taking over the stuck claim: %w", err)
	}
	switch err := s.Release(ctx, rec.Key, mine.Token); {
	case errors.Is(err, store.ErrTokenMismatch) || errors.Is(err, store.ErrNotFound):
		// The CLI's claim is gone already (expired by the store, or taken
		// over by a caller after it lapsed): the stuck claim was replaced
		// by it, so it is gone as well.
		return nil
	case err != nil:
		return fmt.Errorf("the stuck claim was replaced by the CLI's own, but deleting that failed (%w); it lapses by itself at %s", err, fmtTime(mine.LeaseExpiresAt))
	}
	return nil
}

// releaseJSON is release's --json output.
type releaseJSON struct {
	// Released is true when the record was deleted.
	Released bool `json:"released"`
	// Forced is true for --force.
	Forced bool `json:"forced"`
	// Reason says why nothing was released ("" when released).
	Reason string `json:"reason"`
	// Record is the record as read before deleting it; nil for an item
	// that could not be read as a record (deleted with --force).
	Record *getJSON `json:"record"`
}

func (a *app) releaseCmd() *cobra.Command {
	var (
		force bool
		skew  time.Duration
	)
	c := &cobra.Command{
		Use:   "release KEY [--force]",
		Short: "Clear a stuck claim so that the next call runs at once",
		Long: `release deletes the record under KEY if it is a stuck claim: in progress,
with a lease that lapsed (by more than --clock-skew). It first shows the
record, then takes the claim over with the same conditional write a retry
uses, which succeeds only while the claim is still lapsed, and deletes its
own claim: a claim that its holder renewed, completed, or another caller
claimed meanwhile is never deleted. A holder that is still running
somewhere is fenced out as after any takeover (guard.ErrLeaseLost).

--force deletes the record whatever it holds, after showing it: a claim
whose lease is still running (the next call may then run the side effect
while the old holder still runs it), or a completed record (the next call
runs the function again instead of replaying it).

Exit status 0 when the record was deleted, 1 when there was none or it was
left alone (the reason is printed), 2 for an error.`,
		Example: `  idemguard list --stuck
  idemguard release 'charge#3f1c…'
  idemguard release 'charge#3f1c…' --force`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			b, err := a.open(ctx)
			if err != nil {
				return err
			}
			defer b.Close()
			key := args[0]
			rec, err := a.get(ctx, b, key, "; nothing released")
			if force && errors.Is(err, store.ErrCorrupt) {
				return a.forceDeleteUnreadable(ctx, b, key, err)
			}
			if err != nil {
				return err
			}
			cctx, cancel := a.call(ctx)
			defer cancel()
			now := a.now()
			at := now.Add(-skew)
			out := releaseJSON{Forced: force, Record: &getJSON{recordJSON: toJSON(rec, now, at), Result: decodeResult(rec)}}
			if !a.json {
				printRecord(a.stdout, rec, now, at, false)
			}
			if force {
				err = a.forceDelete(cctx, b, rec, at)
			} else {
				err = releaseStuck(cctx, b.store, rec, now, at)
			}
			var ref *refusal
			switch {
			case errors.As(err, &ref):
				out.Reason = ref.reason
			case errors.Is(err, store.ErrNotFound):
				out.Reason = fmt.Sprintf("%s was deleted by someone else meanwhile", key)
			case err != nil:
				return a.storeErr(b, "releasing "+key, err)
			default:
				out.Released = true
			}
			if a.json {
				if err := writeJSONLine(a.stdout, out); err != nil {
					return err
				}
			} else if out.Released {
				how := "released: deleted the stuck claim"
				if force {
					how = "deleted (--force): the " + rec.Status.String() + " record"
				}
				fmt.Fprintf(a.stdout, "\n%s %s (token %s…); the next call with this key runs the function\n", how, key, shortToken(rec.Token))
			}
			if !out.Released {
				return notFound("not released: %s", out.Reason)
			}
			return nil
		},
	}
	c.Flags().BoolVar(&force, "force", false, "delete the record whatever it holds (after showing it)")
	addSkewFlag(c, &skew)
	return c
}

// forceDelete deletes rec unconditionally, warning about what that means
// for a live claim.
func (a *app) forceDelete(ctx context.Context, b *backend, rec *store.Record, at time.Time) error {
	admin, ok := b.store.(store.Admin)
	if !ok {
		return fmt.Errorf("%s cannot delete records unconditionally; release without --force clears stuck claims", b.desc)
	}
	if rec.Status == store.StatusInProgress && rec.Live(at) {
		fmt.Fprintf(a.stderr, "idemguard: warning: %s is held under a running lease; if its holder is still running, the next call may run the side effect a second time (the holder's completion will fail with guard.ErrLeaseLost)\n", rec.Key)
	}
	return admin.Delete(ctx, rec.Key)
}

// forceDeleteUnreadable deletes, for --force, an item that cannot be read
// as a record (readErr says why): such an item blocks its key until it
// expires, and deleting it is the way out.
func (a *app) forceDeleteUnreadable(ctx context.Context, b *backend, key string, readErr error) error {
	admin, ok := b.store.(store.Admin)
	if !ok {
		return readErr
	}
	if !a.json {
		fmt.Fprintf(a.stdout, "%s cannot be read as a record:\n  %v\n", key, errors.Unwrap(readErr))
	}
	ctx, cancel := a.call(ctx)
	defer cancel()
	if err := admin.Delete(ctx, key); errors.Is(err, store.ErrNotFound) {
		return notFound("not released: %s was deleted by someone else meanwhile", key)
	} else if err != nil {
		return a.storeErr(b, "deleting "+key, err)
	}
	if a.json {
		return writeJSONLine(a.stdout, releaseJSON{Released: true, Forced: true})
	}
	fmt.Fprintf(a.stdout, "\ndeleted (--force): the unreadable item %s; the next call with this key runs the function\n", key)
	return nil
}
