package guard

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cenkalti/backoff/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemguard/idemguard/internal/instrument"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/telemetry"
)

// The record protocol against the store: claim (or find the outcome), replay,
// complete, release.

// acquire claims d.key, or returns the completed record that holds it. In
// Wait mode it polls while another call holds the key. f, if not nil, is
// told when another call holds it.
func (g *Guard) acquire(ctx context.Context, c *config, d derived, f *flight) (claim, existing *store.Record, err error) {
	ctx, span := g.child(ctx, telemetry.SpanAcquire)
	var waitStart time.Time
	defer func() {
		if !waitStart.IsZero() {
			waited := time.Since(waitStart).Seconds()
			g.tel.LockWait.Record(ctx, waited, instrument.Scoped(keyScope(d.key), outcomeLabel(OutcomeReplayed, err)))
			span.SetAttributes(telemetry.WaitKey.Float64(waited))
		}
		recordErrorIf(span, err)
		span.End()
	}()
	var bo *backoff.ExponentialBackOff
	var waitEnd time.Time
	for vanished := 0; ; {
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		now := g.clock.Now()
		lease := c.leaseFor(ctx)
		token := c.claimToken
		if token == "" {
			token = newToken()
		}
		claim = &store.Record{
			Key:            d.key,
			Status:         store.StatusInProgress,
			Token:          token,
			PayloadHash:    d.payloadHash,
			ExpiresAt:      now.Add(max(c.ttl, lease)),
			LeaseExpiresAt: now.Add(lease),
		}
		// A lease counts as lapsed only once it has lapsed by more than the
		// skew tolerance on this guard's clock.
		start := time.Now()
		old, err := g.store.Acquire(ctx, claim, now.Add(-g.skew))
		g.timeStore(ctx, "acquire", start)
		if err == nil {
			return claim, nil, nil
		}
		if !errors.Is(err, store.ErrConflict) {
			return nil, nil, &StoreError{Op: "acquire", Key: d.key, Err: err}
		}
		if old == nil {
			// The holder's record vanished between the conflict and the
			// read: try again.
			if vanished++; vanished > 3 {
				return nil, nil, &StoreError{Op: "acquire", Key: d.key, Err: err}
			}
			continue
		}
		if err := c.validate(d, old); err != nil {
			return nil, nil, err
		}
		if old.Status == store.StatusCompleted {
			return nil, old, nil
		}
		if old.Token == token {
			// Our own claim: made before under this fixed token, or written
			// by a retried request whose first answer was lost. It holds
			// with the lease end the store has.
			return old, nil, nil
		}
		g.held(f, old.LeaseExpiresAt)
		busy := &InProgressError{Key: d.key, LeaseExpiresAt: old.LeaseExpiresAt}
		if c.mode == Reject {
			return nil, nil, busy
		}
		if bo == nil {
			bo = &backoff.ExponentialBackOff{
				InitialInterval:     c.waitInitial,
				RandomizationFactor: 0.5,
				Multiplier:          2,
				MaxInterval:         c.waitMax,
			}
			waitEnd = now.Add(c.waitBudget)
			waitStart = time.Now()
		}
		left := waitEnd.Sub(now)
		if left <= 0 {
			return nil, nil, busy
		}
		pause := min(bo.NextBackOff(), left)
		takeover := old.LeaseExpiresAt.Add(g.skew)
		if lapse := takeover.Sub(now); !old.LeaseExpiresAt.IsZero() && lapse >= 0 && lapse < pause {
			pause = lapse + time.Millisecond
		}
		if span.IsRecording() {
			span.AddEvent(telemetry.EventWait, trace.WithAttributes(
				telemetry.LeaseExpiresKey.String(old.LeaseExpiresAt.UTC().Format(time.RFC3339Nano)),
				attribute.Float64("idemguard.wait.pause_seconds", pause.Seconds())))
		}
		if err := sleep(ctx, g.clock, pause); err != nil {
			return nil, nil, err
		}
	}
}

// leaseFor returns the lease for a claim made with ctx.
func (c *config) leaseFor(ctx context.Context) time.Duration {
	if c.lease > 0 {
		return max(c.lease, MinLease)
	}
	if dl, ok := ctx.Deadline(); ok {
		return max(time.Until(dl), MinLease)
	}
	return DefaultLease
}

// validate fails with ErrPayloadMismatch when rec was written for another
// payload. Every path that hands out a stored outcome goes through it.
func (c *config) validate(d derived, rec *store.Record) error {
	if c.validationPath != nil && rec.PayloadHash != d.payloadHash {
		return &MismatchError{Key: d.key, Path: c.validationPath.src, PayloadHash: d.payloadHash, Existing: rec}
	}
	return nil
}

// replay returns the outcome stored in rec.
func replay[T any](ctx context.Context, c *config, d derived, rec *store.Record, out Outcome) (v T, _ Outcome, err error) {
	if err := c.validate(d, rec); err != nil {
		return v, 0, err
	}
	if c.onOutcome != nil {
		c.onOutcome(ctx, d.key, rec, out)
	}
	switch rec.ResultKind {
	case store.ResultValue:
		if len(rec.Result) == 0 {
			return v, out, nil
		}
		if err := c.codec.Unmarshal(rec.Result, &v); err != nil {
			return v, out, fmt.Errorf("%w (key %s): decoding the stored result: %w", ErrResultUnavailable, d.key, err)
		}
		return v, out, nil
	case store.ResultError:
		return v, out, c.errorCodec.DecodeError(rec.Result)
	}
	return v, out, fmt.Errorf("%w (key %s)", ErrResultUnavailable, d.key)
}

// cached returns the live record the local cache holds for key, and drops
// one that has expired.
func (g *Guard) cached(key string) (*store.Record, bool) {
	if g.cache == nil {
		return nil, false
	}
	rec, ok := g.cache.Get(key)
	if !ok {
		return nil, false
	}
	if !rec.Live(g.clock.Now()) {
		g.cache.Remove(key)
		return nil, false
	}
	return rec, true
}

// remember puts a completed record in the local cache.
func (g *Guard) remember(rec *store.Record) {
	if g.cache != nil && rec != nil {
		g.cache.Add(rec.Key, rec)
	}
}

// record completes claim with data as kind — an outcome that could not be
// encoded (encErr) is recorded without a body, so that it is never run
// again — inside tx if there is one. The completed record is cached.
func (g *Guard) record(ctx context.Context, c *config, claim *store.Record, leaseEnd time.Time, kind store.ResultKind, data []byte, encErr error, tx txn) (*store.Record, error) {
	if encErr != nil {
		kind, data = store.ResultUnavailable, nil
	}
	var done *store.Record
	var err error
	if tx != nil {
		done, err = g.completeTx(ctx, c, claim, kind, data, tx)
	} else {
		done, err = g.complete(ctx, c, claim, leaseEnd, kind, data)
	}
	if err == nil {
		g.remember(done)
		if c.onOutcome != nil {
			c.onOutcome(ctx, done.Key, done, OutcomeExecuted)
		}
	}
	return done, err
}

// completed is the record that completes claim with data as kind.
func (g *Guard) completed(c *config, claim *store.Record, kind store.ResultKind, data []byte) *store.Record {
	return &store.Record{
		Key:         claim.Key,
		Status:      store.StatusCompleted,
		Token:       claim.Token,
		PayloadHash: claim.PayloadHash,
		ResultKind:  kind,
		Result:      data,
		ExpiresAt:   g.clock.Now().Add(c.ttl),
	}
}

// complete records the outcome of a claim whose lease ends at leaseEnd
// (the lease keeper is stopped). It retries transient store failures for as
// long as the lease holds, so that a side effect that happened is never run
// again because bookkeeping failed.
func (g *Guard) complete(ctx context.Context, c *config, claim *store.Record, leaseEnd time.Time, kind store.ResultKind, data []byte) (done *store.Record, err error) {
	ctx, span := g.child(ctx, telemetry.SpanComplete)
	attempts := 0
	defer func() { g.endComplete(ctx, span, claim.Key, attempts, done, err) }()
	base := context.WithoutCancel(ctx)
	done = g.completed(c, claim, kind, data)
	var bo *backoff.ExponentialBackOff
	for {
		now := g.clock.Now()
		actx, cancel := context.WithTimeout(base, max(leaseEnd.Sub(now), storeCallTimeout))
		attempts++
		start := time.Now()
		err := g.store.Complete(actx, done)
		g.timeStore(ctx, "complete", start)
		cancel()
		switch {
		case err == nil:
			return done, nil
		case errors.Is(err, store.ErrTokenMismatch):
			return nil, fmt.Errorf("%w (key %s)", ErrLeaseLost, claim.Key)
		case errors.Is(err, store.ErrTooLarge) && done.ResultKind != store.ResultUnavailable:
			done.ResultKind, done.Result = store.ResultUnavailable, nil
			continue
		}
		g.log(ctx, slog.LevelWarn, "idemguard: completion write failed; retrying while the lease holds", claim.Key,
			slog.Int("attempt", attempts), slog.Any("error", err))
		now = g.clock.Now()
		if !now.Before(leaseEnd) {
			return nil, &notRecordedError{key: claim.Key, err: &StoreError{Op: "complete", Key: claim.Key, Err: err}}
		}
		if bo == nil {
			bo = &backoff.ExponentialBackOff{InitialInterval: 50 * time.Millisecond, RandomizationFactor: 0.5, Multiplier: 2, MaxInterval: 2 * time.Second}
		}
		if serr := sleep(base, g.clock, min(bo.NextBackOff(), leaseEnd.Sub(now))); serr != nil {
			return nil, &notRecordedError{key: claim.Key, err: serr}
		}
	}
}

// completeTx records the outcome of a claim inside the function's
// transaction and commits it: the function's writes and the completion
// commit together or not at all. When the commit's answer is lost, the
// record tells which: completed under the claim's token, or still held by
// it (nothing committed, and the claim is released).
func (g *Guard) completeTx(ctx context.Context, c *config, claim *store.Record, kind store.ResultKind, data []byte, tx txn) (done *store.Record, err error) {
	ctx, span := g.child(ctx, telemetry.SpanComplete)
	attempts := 1
	defer func() { g.endComplete(ctx, span, claim.Key, attempts, done, err) }()
	base := context.WithoutCancel(ctx)
	sctx, cancel := context.WithTimeout(base, storeCallTimeout)
	defer cancel()
	done = g.completed(c, claim, kind, data)
	err = tx.Complete(sctx, done)
	if errors.Is(err, store.ErrTooLarge) && kind != store.ResultUnavailable {
		attempts++
		done.ResultKind, done.Result = store.ResultUnavailable, nil
		err = tx.Complete(sctx, done)
	}
	if err != nil {
		_ = tx.Rollback(base)
		if errors.Is(err, store.ErrTokenMismatch) {
			return nil, fmt.Errorf("%w (key %s): the transaction was rolled back", ErrLeaseLost, claim.Key)
		}
		g.release(ctx, claim)
		return nil, &StoreError{Op: "complete", Key: claim.Key, Err: err}
	}
	if cerr := tx.Commit(sctx); cerr != nil {
		rec, gerr := g.store.Get(sctx, claim.Key)
		switch {
		case gerr == nil && rec.Token == claim.Token && rec.Status == store.StatusCompleted:
			return rec, nil // committed; only the answer was lost
		case gerr == nil && rec.Token == claim.Token:
			// Still held: the commit did not land yet, or not at all. The
			// release deletes only a claim in progress; if it finds none,
			// the commit landed while it waited, and the record says so.
			if errors.Is(g.release(ctx, claim), store.ErrTokenMismatch) {
				if rec, gerr := g.store.Get(sctx, claim.Key); gerr == nil && rec.Token == claim.Token && rec.Status == store.StatusCompleted {
					return rec, nil
				}
			}
			return nil, &StoreError{Op: "commit", Key: claim.Key, Err: cerr}
		case gerr != nil && !errors.Is(gerr, store.ErrNotFound):
			return nil, &notRecordedError{key: claim.Key, err: errors.Join(cerr, gerr)}
		}
		return nil, fmt.Errorf("%w (key %s): the transaction did not commit: %w", ErrLeaseLost, claim.Key, cerr)
	}
	return done, nil
}

// endComplete ends a completion's span and logs what callers must know.
func (g *Guard) endComplete(ctx context.Context, span trace.Span, key string, attempts int, done *store.Record, err error) {
	if done != nil && done.ResultKind == store.ResultUnavailable {
		g.log(ctx, slog.LevelWarn, "idemguard: result not stored (too large for the store, or not encodable); replays will get ErrResultUnavailable", key)
	}
	if errors.Is(err, ErrLeaseLost) {
		g.log(ctx, slog.LevelWarn, "idemguard: lease lost to another caller; outcome not recorded", key)
	}
	if span.IsRecording() {
		span.SetAttributes(telemetry.AttemptsKey.Int(attempts))
		if done != nil {
			span.SetAttributes(telemetry.ResultKindKey.String(done.ResultKind.String()))
		}
		recordErrorIf(span, err)
	}
	span.End()
}

// storeCallTimeout bounds each store call made outside the caller's context
// (completion retries, release, lease extension).
const storeCallTimeout = 5 * time.Second

type notRecordedError struct {
	key string
	err error
}

func (e *notRecordedError) Error() string {
	return fmt.Sprintf("%v (key %s): %v", ErrNotRecorded, e.key, e.err)
}
func (e *notRecordedError) Unwrap() []error { return []error{ErrNotRecorded, e.err} }

// release deletes a claim so that the next call runs the function at once,
// and returns the store's answer. If it fails the claim lapses with its
// lease; store.ErrTokenMismatch (taken over, or completed) is not logged.
func (g *Guard) release(ctx context.Context, claim *store.Record) error {
	ctx, span := g.child(ctx, telemetry.SpanRelease)
	defer span.End()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeCallTimeout)
	defer cancel()
	start := time.Now()
	err := g.store.Release(rctx, claim.Key, claim.Token)
	g.timeStore(ctx, "release", start)
	if err != nil && !errors.Is(err, store.ErrTokenMismatch) {
		recordError(span, err)
		g.log(ctx, slog.LevelWarn, "idemguard: release failed; the key stays claimed until its lease lapses", claim.Key, slog.Any("error", err))
	}
	return err
}

// newToken returns a random fencing token: 128 bits, hex.
func newToken() string {
	var b [16]byte
	var h [32]byte
	rand.Read(b[:])
	hex.Encode(h[:], b[:])
	return string(h[:])
}

// sleep pauses for d on clock, or until ctx is done.
func sleep(ctx context.Context, clock Clock, d time.Duration) error {
	ch := make(chan struct{})
	stop := clock.AfterFunc(d, func() { close(ch) })
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		stop()
		return ctx.Err()
	}
}
