package guard

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemguard/idemguard/internal/guardhook"
	"github.com/idemguard/idemguard/internal/instrument"
	"github.com/idemguard/idemguard/internal/leasecap"
	"github.com/idemguard/idemguard/internal/telemetry"
	"github.com/idemguard/idemguard/store"
)

// Acquire and replay: the claim of a key in the store (or the outcome
// that holds it), and the replay of a stored outcome. Every store call
// goes through g.timed (storectx.go), which measures it.

// acquire claims d.key into claim, or returns the completed record that
// holds the key. In wait mode it polls while another call holds the key.
// f, if not nil, is told when another call holds it. A guard rotating its
// key secret looks the key up under its previous secrets once it holds the
// claim (see WithKeySecret).
func (g *Guard) acquire(ctx context.Context, c *config, d *derived, f *flight, claim *store.Record) (existing *store.Record, err error) {
	ctx, span := g.child(ctx, telemetry.SpanAcquire)
	var waitStart time.Time
	defer func() {
		if !waitStart.IsZero() {
			waited := time.Since(waitStart).Seconds()
			g.tel.LockWait.Record(ctx, waited, instrument.Scoped(scopeLabel(ctx, d), waitLabel(existing, err)))
			span.SetAttributes(telemetry.WaitKey.Float64(waited))
		}
		recordErrorIf(span, err)
		span.End()
	}()
	token := c.claimToken
	if token == "" {
		// One token for every attempt of this call: an attempt whose
		// answer was lost is found by the next as the call's own claim.
		token = newToken()
	}
	var waitEnd time.Time
	for vanished := 0; ; {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		now := g.clock.Now()
		lease := c.leaseFor(ctx)
		*claim = store.Record{
			Key:            d.key,
			Status:         store.StatusInProgress,
			Token:          token,
			PayloadHash:    d.payloadHash,
			ExpiresAt:      now.Add(max(c.ttl, lease)),
			LeaseExpiresAt: now.Add(lease),
		}
		// A lease counts as lapsed only once it has lapsed by more than the
		// skew tolerance on this guard's clock.
		var old *store.Record
		err := g.timed(ctx, "acquire", func() (err error) {
			old, err = g.store.Acquire(ctx, claim, now.Add(-g.skew))
			return err
		})
		switch {
		case err == nil:
			if old != nil {
				g.tookOver(ctx, span, d, old)
			}
			prev, perr := g.lookPrevious(ctx, d, claim)
			if perr != nil || prev == nil {
				return nil, perr
			}
			if prev.Status == store.StatusCompleted {
				return prev, nil
			}
			// Held under a previous secret: wait or give way as for our own
			// key, without our claim in the way.
			g.release(ctx, d, claim)
			old = prev
		case !errors.Is(err, store.ErrConflict):
			return nil, &storeError{Op: "acquire", Key: d.key, Err: err}
		case old == nil:
			// The holder's record vanished between the conflict and the
			// read: try again.
			if vanished++; vanished > 3 {
				return nil, &storeError{Op: "acquire", Key: d.key, Err: err}
			}
			continue
		default:
			if err := validate(d, old, d.payloadHash); err != nil {
				return nil, err
			}
			if old.Status == store.StatusCompleted {
				return old, nil
			}
			if old.Token == token {
				// Our own claim: made before under this fixed token, or
				// written by an attempt whose answer was lost. It holds with
				// the lease end the store has.
				*claim = *old
				return nil, nil
			}
		}
		g.flights.held(f, old.LeaseExpiresAt)
		busy := &inProgressError{Key: d.key, LeaseExpiresAt: old.LeaseExpiresAt}
		if c.mode == guardhook.Reject {
			return nil, busy
		}
		if waitEnd.IsZero() {
			waitEnd = now.Add(c.waitBudget)
			waitStart = time.Now()
		}
		if !now.Before(waitEnd) {
			return nil, busy
		}
		if span.IsRecording() {
			span.AddEvent(telemetry.EventWait, trace.WithAttributes(
				telemetry.LeaseExpiresKey.String(old.LeaseExpiresAt.UTC().Format(time.RFC3339Nano))))
		}
		// Wait for the holder's outcome with this process's other
		// duplicates of the key (wait.go), then replay it or claim again.
		done, err := g.waitHeld(ctx, c, d.key, old, waitEnd)
		switch {
		case errors.Is(err, errWaitBudget):
			return nil, busy
		case err != nil:
			return nil, err
		case done != nil:
			if err := validate(d, done, d.payloadHash); err != nil {
				return nil, err
			}
			return done, nil
		}
	}
}

// tookOver reports a claim taken over: the store replaced old, a claim
// whose lease lapsed without a completion, because its holder crashed,
// hung or lost the store. That is a stuck claim, unlike a duplicate that
// meets a live holder: it is counted (idemguard.claim.taken_over), marked
// on the acquire span and logged, since the holder may have done the side
// effect before it stopped.
func (g *Guard) tookOver(ctx context.Context, span trace.Span, d *derived, old *store.Record) {
	if g.tel.Metering() {
		g.tel.ClaimsTakenOver.Add(ctx, 1, metric.WithAttributes(telemetry.ScopeKey.String(scopeLabel(ctx, d)), g.tel.StoreAttr))
	}
	if span.IsRecording() {
		span.AddEvent(telemetry.EventTakeover, trace.WithAttributes(
			telemetry.LeaseExpiresKey.String(old.LeaseExpiresAt.UTC().Format(time.RFC3339Nano))))
	}
	g.log(ctx, slog.LevelWarn, "idemguard: took over a claim whose lease lapsed without a completion; its holder crashed, hung or lost the store, and may have done the side effect", d,
		slog.Time("idemguard.lease.expires_at", old.LeaseExpiresAt))
}

// scopeLabel is the scope under which telemetry counts the call whose key
// is d: a step (guard.Step) counts under its call's scope, as in
// idemguard.calls, since step names may be per item.
func scopeLabel(ctx context.Context, d *derived) string {
	if r, ok := ctx.Value(runningKey{}).(*running); ok && r.d != nil && strings.HasPrefix(d.scope, r.d.scope+"/") {
		return r.d.scope
	}
	return d.scope
}

// waitLabel is the outcome label of a wait that ended in existing or err:
// replayed when it found the outcome, executed when it took the key over.
func waitLabel(existing *store.Record, err error) string {
	switch {
	case err != nil:
		return outcomeLabel(0, err)
	case existing != nil:
		return telemetry.OutcomeReplayed
	}
	return telemetry.OutcomeExecuted
}

// lookPrevious looks the key up under the guard's previous key secrets, once
// claim is held: it returns a live record found there, and adopts a
// completed one (completes claim with its outcome, so that later calls find
// it under the new key). It returns nil when there is nothing live there.
func (g *Guard) lookPrevious(ctx context.Context, d *derived, claim *store.Record) (*store.Record, error) {
	for _, p := range d.previous {
		var rec *store.Record
		err := g.timed(ctx, "get", func() (err error) {
			rec, err = g.store.Get(ctx, p.key)
			return err
		})
		switch {
		case errors.Is(err, store.ErrNotFound):
			continue
		case err != nil:
			g.release(ctx, d, claim)
			return nil, &storeError{Op: "get", Key: p.key, Err: err}
		case !rec.Live(g.clock.Now().Add(-g.skew)):
			continue
		}
		if err := validate(d, rec, p.payloadHash); err != nil {
			g.release(ctx, d, claim)
			return nil, err
		}
		if rec.Status == store.StatusInProgress {
			return rec, nil
		}
		adopted := *claim
		adopted.Status, adopted.ResultKind, adopted.Result = store.StatusCompleted, rec.ResultKind, rec.Result
		adopted.ExpiresAt, adopted.LeaseExpiresAt = rec.ExpiresAt, time.Time{}
		sctx := newStoreContext(ctx, storeCallTimeout)
		err = g.timed(ctx, "complete", func() error { return g.store.Complete(sctx, &adopted) })
		sctx.cancel()
		if err != nil {
			g.release(ctx, d, claim)
			g.log(ctx, slog.LevelWarn, "idemguard: copying a record found under a previous key secret failed; replaying it from there", d, slog.Any("error", err))
		}
		return &adopted, nil
	}
	return nil, nil
}

// leaseFor returns the lease for a claim made with ctx: never past the
// deadline of a context whose deadline ends its process (internal/leasecap).
func (c *config) leaseFor(ctx context.Context) time.Duration {
	if c.lease > 0 {
		if dl, ok := leasecap.Deadline(ctx); ok {
			return max(min(c.lease, time.Until(dl)), guardhook.MinLease)
		}
		return max(c.lease, guardhook.MinLease)
	}
	if dl, ok := ctx.Deadline(); ok {
		return max(time.Until(dl), guardhook.MinLease)
	}
	return guardhook.DefaultLease
}

// replay returns the outcome stored in rec, as out: validated against the
// call's payload, shown to the outcome hook, decoded.
func replay[T any](ctx context.Context, c *config, d *derived, rec *store.Record, out Outcome) (v T, _ Outcome, err error) {
	if err := validate(d, rec, d.payloadHash); err != nil {
		return v, 0, err
	}
	if c.onOutcome != nil {
		c.onOutcome(ctx, d.key, rec, out)
	}
	return v, out, decode(c, d.key, rec, &v)
}

// decode decodes the outcome stored in rec, the record of key, into v, a
// pointer: the result, or the stored error.
func decode(c *config, key string, rec *store.Record, v any) error {
	switch rec.ResultKind {
	case store.ResultValue:
		if len(rec.Result) == 0 {
			return nil
		}
		if err := c.codec.Unmarshal(rec.Result, v); err != nil {
			return fmt.Errorf("%w (key %s): decoding the stored result: %w", ErrResultUnavailable, key, err)
		}
		return nil
	case store.ResultError:
		return c.errorCodec.DecodeError(rec.Result)
	}
	return fmt.Errorf("%w (key %s)", ErrResultUnavailable, key)
}

// cached returns the record the local cache may serve for key.
func (g *Guard) cached(key string) (*store.Record, bool) {
	if g.cache == nil {
		return nil, false
	}
	return g.cache.get(key, g.clock.Now())
}

// newToken returns a random fencing token: 128 bits, hex.
func newToken() string {
	var b [16]byte
	var h [32]byte
	rand.Read(b[:])
	hex.Encode(h[:], b[:])
	return string(h[:])
}
