package guard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/idemguard/idemguard/internal/telemetry"
	"github.com/idemguard/idemguard/store"
	"go.opentelemetry.io/otel/trace"
)

// Complete, release and extend: the writes that end or keep a claim,
// alone or inside a transaction, and the release of a call's steps when
// its transaction does not commit. Every store call goes through g.timed
// (storectx.go), which measures it.

// remember puts a completed record in the local cache.
func (g *Guard) remember(rec *store.Record) {
	if g.cache != nil && rec != nil {
		g.cache.put(rec, g.clock.Now())
	}
}

// writeOutcome completes the call's claim, whose lease ends at leaseEnd,
// with data as kind — an outcome that could not be encoded (encErr) is
// recorded without a body, so that it is never run again — inside the
// call's transaction if it has one. The completed record is cached, and
// shown to the outcome hook.
func (cl *call) writeOutcome(ctx context.Context, leaseEnd time.Time, kind store.ResultKind, data []byte, encErr error) (*store.Record, error) {
	g, c, d, claim := cl.g, cl.c, &cl.d, &cl.claim
	if encErr != nil {
		kind, data = store.ResultUnavailable, nil
	}
	done := g.completedRecord(c, claim, kind, data)
	var err error
	inTx := cl.run.tx != nil
	switch {
	case inTx && cl.parent != nil:
		// A step inside a transaction: its completion commits with the
		// call's.
		err = g.completeStepInTx(ctx, d, done, cl.run.tx)
	case inTx:
		done, err = cl.completeTx(ctx, done)
	default:
		err = g.complete(ctx, d, done, leaseEnd)
	}
	if err != nil {
		return nil, err
	}
	cl.done = done // written: a panic from here on must not rewrite it
	if cl.parent != nil {
		cl.run.steps.add(d, claim, inTx)
		if inTx {
			return done, nil // not committed yet: not for the cache
		}
	}
	g.remember(done)
	if c.onOutcome != nil {
		c.onOutcome(ctx, done.Key, done, OutcomeExecuted)
	}
	return done, nil
}

// completeStepInTx writes done, the completion of a step's claim, into its
// call's transaction, tx, which the call commits.
func (g *Guard) completeStepInTx(ctx context.Context, d *derived, done *store.Record, tx txn) (err error) {
	ctx, span := g.child(ctx, telemetry.SpanComplete)
	attempts := 1
	defer func() { g.endComplete(ctx, span, d, completion{attempts, done, err}) }()
	sctx := newStoreContext(ctx, storeCallTimeout)
	defer sctx.cancel()
	err = writeInTx(sctx, done, tx, &attempts)
	switch {
	case errors.Is(err, store.ErrTokenMismatch):
		return fmt.Errorf("%w (key %s)", ErrLeaseLost, done.Key)
	case err != nil:
		g.release(ctx, d, done)
		return &storeError{Op: "complete", Key: done.Key, Err: err}
	}
	return nil
}

// completedRecord is the record that completes claim with data as kind.
func (g *Guard) completedRecord(c *config, claim *store.Record, kind store.ResultKind, data []byte) *store.Record {
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

// complete writes done, the completion of a claim whose lease ends at
// leaseEnd (the lease keeper is stopped). It retries transient store
// failures for as long as the lease holds, so that a side effect that
// happened is never run again because bookkeeping failed; a result too
// large for the store is written without its body.
func (g *Guard) complete(ctx context.Context, d *derived, done *store.Record, leaseEnd time.Time) (err error) {
	ctx, span := g.child(ctx, telemetry.SpanComplete)
	attempts := 0
	defer func() { g.endComplete(ctx, span, d, completion{attempts, done, err}) }()
	var bo *backoff.ExponentialBackOff
	for {
		now := g.clock.Now()
		attempts++
		sctx := newStoreContext(ctx, max(leaseEnd.Sub(now), storeCallTimeout))
		err := g.timed(ctx, "complete", func() error { return g.store.Complete(sctx, done) })
		sctx.cancel()
		switch {
		case err == nil:
			return nil
		case errors.Is(err, store.ErrTokenMismatch):
			return fmt.Errorf("%w (key %s)", ErrLeaseLost, done.Key)
		case errors.Is(err, store.ErrTooLarge) && done.ResultKind != store.ResultUnavailable:
			done.ResultKind, done.Result = store.ResultUnavailable, nil
			continue
		}
		g.log(ctx, slog.LevelWarn, "idemguard: completion write failed; retrying while the lease holds", d,
			slog.Int("attempt", attempts), slog.Any("error", err))
		now = g.clock.Now()
		if !now.Before(leaseEnd) {
			return &notRecordedError{key: done.Key, err: &storeError{Op: "complete", Key: done.Key, Err: err}}
		}
		if bo == nil {
			bo = &backoff.ExponentialBackOff{InitialInterval: 50 * time.Millisecond, RandomizationFactor: 0.5, Multiplier: 2, MaxInterval: 2 * time.Second}
		}
		if serr := sleep(context.WithoutCancel(ctx), g.clock, min(bo.NextBackOff(), leaseEnd.Sub(now))); serr != nil {
			return &notRecordedError{key: done.Key, err: serr}
		}
	}
}

// completeTx records the outcome of a claim inside the call's transaction
// and commits it: the function's writes, the completions of the steps it
// ran inside it, and the call's completion commit together or not at all.
// When the commit fails, the record tells whether it committed, read
// under a fresh deadline (the commit's own may have passed): completed
// under the claim's token, or still held by it (nothing committed, and the
// claim is released, cl.released). Whatever did not commit releases the
// steps' claims. A commit refused by the function's own writes
// (store.ErrRefused) is a *refusedError, any other failure a *storeError.
func (cl *call) completeTx(ctx context.Context, write *store.Record) (done *store.Record, err error) {
	g, d, claim := cl.g, &cl.d, &cl.claim
	ctx, span := g.child(ctx, telemetry.SpanComplete)
	attempts := 1
	defer func() { g.endComplete(ctx, span, d, completion{attempts, done, err}) }()
	tx := cl.run.tx
	sctx := newStoreContext(ctx, storeCallTimeout)
	defer sctx.cancel()
	err = writeInTx(sctx, write, tx, &attempts)
	if err != nil {
		cl.rollback(ctx)
		if errors.Is(err, store.ErrTokenMismatch) {
			return nil, fmt.Errorf("%w (key %s): the transaction was rolled back", ErrLeaseLost, claim.Key)
		}
		g.release(ctx, d, claim)
		cl.released = true
		return nil, &storeError{Op: "complete", Key: claim.Key, Err: err}
	}
	cl.run.tx = nil
	cerr := g.timed(ctx, "commit", func() error { return tx.Commit(sctx) })
	if cerr == nil {
		return write, nil
	}
	lost := fmt.Errorf("%w (key %s): the transaction did not commit: %w", ErrLeaseLost, claim.Key, cerr)
	if errors.Is(cerr, store.ErrTokenMismatch) {
		// A fenced completion in the transaction failed: nothing committed.
		cl.run.steps.releaseInTx(ctx, g)
		return nil, lost
	}
	rec, gerr := g.getFresh(ctx, claim.Key)
	switch {
	case gerr == nil && rec.Token == claim.Token && rec.Status == store.StatusCompleted:
		return rec, nil // committed; only the answer was lost
	case gerr == nil && rec.Token == claim.Token:
		// Still held: the commit did not land yet, or not at all. The
		// release deletes only a claim in progress; if it finds none, the
		// commit landed while it waited, and the record says so.
		switch rerr := g.release(ctx, d, claim); {
		case errors.Is(rerr, store.ErrTokenMismatch):
			if rec, gerr := g.getFresh(ctx, claim.Key); gerr == nil && rec.Token == claim.Token && rec.Status == store.StatusCompleted {
				return rec, nil
			}
			// Neither held nor completed under the claim's token: taken
			// over, and the commit's fenced completion can never land.
			cl.run.steps.releaseInTx(ctx, g)
			return nil, lost
		case rerr != nil:
			// The claim may still be held, and the commit may still land.
			return nil, &notRecordedError{key: claim.Key, err: errors.Join(cerr, rerr)}
		}
		cl.run.steps.releaseInTx(ctx, g)
		cl.released = true
		if errors.Is(cerr, store.ErrRefused) {
			return nil, &refusedError{Key: claim.Key, Err: cerr}
		}
		return nil, &storeError{Op: "commit", Key: claim.Key, Err: cerr}
	case gerr != nil && !errors.Is(gerr, store.ErrNotFound):
		return nil, &notRecordedError{key: claim.Key, err: errors.Join(cerr, gerr)}
	}
	cl.run.steps.releaseInTx(ctx, g)
	return nil, lost
}

// writeInTx writes done, a claim's completion, into tx, and without its
// body if the store finds it too large; attempts counts the writes.
func writeInTx(ctx context.Context, done *store.Record, tx txn, attempts *int) error {
	err := tx.Complete(ctx, done)
	if errors.Is(err, store.ErrTooLarge) && done.ResultKind != store.ResultUnavailable {
		*attempts++
		done.ResultKind, done.Result = store.ResultUnavailable, nil
		err = tx.Complete(ctx, done)
	}
	return err
}

// getFresh reads a record with the store's strongly consistent Get, on
// the guard's behalf: bounded by a deadline of its own, not the caller's
// context's.
func (g *Guard) getFresh(ctx context.Context, key string) (rec *store.Record, err error) {
	sctx := newStoreContext(ctx, storeCallTimeout)
	defer sctx.cancel()
	err = g.timed(ctx, "get", func() (err error) {
		rec, err = g.store.Get(sctx, key)
		return err
	})
	return rec, err
}

// completion is how a completion went: the writes it took, the record it
// wrote, and its error (then the record was not written).
type completion struct {
	attempts int
	done     *store.Record
	err      error
}

// endComplete ends a completion's span and logs what callers must know.
func (g *Guard) endComplete(ctx context.Context, span trace.Span, d *derived, cp completion) {
	attempts, done, err := cp.attempts, cp.done, cp.err
	if err != nil {
		done = nil
	}
	if done != nil && done.ResultKind == store.ResultUnavailable {
		g.log(ctx, slog.LevelWarn, "idemguard: result not stored (too large for the store, or not encodable); replays will get ErrResultUnavailable", d)
	}
	if errors.Is(err, ErrLeaseLost) {
		g.log(ctx, slog.LevelWarn, "idemguard: lease lost to another caller; outcome not recorded", d)
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

type notRecordedError struct {
	key string
	err error
}

func (e *notRecordedError) Error() string {
	return fmt.Sprintf("%v (key %s): %v", ErrNotRecorded, e.key, e.err)
}

func (e *notRecordedError) Unwrap() []error { return []error{ErrNotRecorded, e.err} }

// release deletes a claim in progress so that the next call runs the
// function at once, and returns the store's answer: the one release path,
// for calls, steps and the claim API. If it fails the claim lapses with
// its lease; store.ErrTokenMismatch (taken over, or completed) is not
// logged.
func (g *Guard) release(ctx context.Context, d *derived, claim *store.Record) error {
	ctx, span := g.child(ctx, telemetry.SpanRelease)
	defer span.End()
	sctx := newStoreContext(ctx, storeCallTimeout)
	defer sctx.cancel()
	err := g.timed(ctx, "release", func() error { return g.store.Release(sctx, claim.Key, claim.Token) })
	if err != nil && !errors.Is(err, store.ErrTokenMismatch) {
		recordError(span, err)
		g.log(ctx, slog.LevelWarn, "idemguard: release failed; the key stays claimed until its lease lapses", d, slog.Any("error", err))
	}
	return err
}

// extend moves the lease of claim (its key, held under its token) to
// leaseEnd and the record's expiry to expiresAt, with a call bounded by
// timeout: the one extend path, for the lease keeper and the claim API.
func (g *Guard) extend(ctx context.Context, claim *store.Record, leaseEnd, expiresAt time.Time, timeout time.Duration) error {
	key, token := claim.Key, claim.Token
	ctx, span := g.child(ctx, telemetry.SpanExtend)
	defer span.End()
	sctx := newStoreContext(ctx, timeout)
	defer sctx.cancel()
	err := g.timed(ctx, "extend", func() error { return g.store.Extend(sctx, key, token, leaseEnd, expiresAt) })
	recordErrorIf(span, err)
	return err
}

// releaseInTx releases the claims of the steps completed inside a
// transaction that did not commit: their records are in progress again,
// under their own tokens.
func (s *steps) releaseInTx(ctx context.Context, g *Guard) {
	for _, st := range s.take(func(st stepClaim) bool { return st.inTx }) {
		g.release(ctx, st.d, &st.claim)
	}
}

// retire releases the steps of a call whose result the filter refused,
// those completed in this attempt and those replayed from an earlier one,
// so that the next call runs them again. A step replayed under a rotating
// key secret is retired under the previous secrets too, where the next
// call would find it.
func (s *steps) retire(ctx context.Context, g *Guard) {
	for _, st := range s.take(func(stepClaim) bool { return true }) {
		g.retire(ctx, st.d, st.claim)
		if !st.replayed {
			continue
		}
		for _, p := range st.d.previous {
			rec, err := g.getFresh(ctx, p.key)
			if err == nil && rec.Status == store.StatusCompleted {
				g.retire(ctx, st.d, *rec)
			}
		}
	}
}

// retire completes the record of a step, rec, again as already expired,
// fenced by its token (a completed record is never deleted by a release),
// and drops it from the local cache.
func (g *Guard) retire(ctx context.Context, d *derived, rec store.Record) {
	rec.Status, rec.ResultKind, rec.Result = store.StatusCompleted, store.ResultUnavailable, nil
	rec.ExpiresAt, rec.LeaseExpiresAt = g.clock.Now().Add(-time.Hour-g.skew), time.Time{}
	sctx := newStoreContext(ctx, storeCallTimeout)
	err := g.timed(ctx, "complete", func() error { return g.store.Complete(sctx, &rec) })
	sctx.cancel()
	if err != nil && !errors.Is(err, store.ErrTokenMismatch) {
		g.log(ctx, slog.LevelWarn, "idemguard: releasing a step of a call whose result was filtered out failed; the step replays until it expires", d, slog.Any("error", err))
	}
	if g.cache != nil {
		g.cache.lru.Remove(rec.Key)
	}
}

// rollback ends the call's transaction, if it began one, without
// committing, and releases the claims of the steps it completed inside it.
// A step leaves its call's transaction to its call.
func (cl *call) rollback(ctx context.Context) {
	tx := cl.run.tx
	if tx == nil || cl.parent != nil {
		return
	}
	cl.run.tx = nil
	_ = cl.g.timed(ctx, "rollback", func() error { return tx.Rollback(context.WithoutCancel(ctx)) })
	cl.run.steps.releaseInTx(ctx, cl.g)
}
