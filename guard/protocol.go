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

	"github.com/cenkalti/backoff/v5"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemguard/idemguard/internal/guardhook"
	"github.com/idemguard/idemguard/internal/instrument"
	"github.com/idemguard/idemguard/internal/leasecap"
	"github.com/idemguard/idemguard/internal/telemetry"
	"github.com/idemguard/idemguard/store"
)

// The record protocol against the store, each step in one place: claim (or
// find the outcome), replay, complete (alone or in a transaction), release,
// extend. Every store call goes through timed, which measures it.

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
		g.held(f, old.LeaseExpiresAt)
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

// validate fails with ErrPayloadMismatch when rec was written for another
// payload than the one whose hash (under rec's key secret) is hash. Every
// path that hands out a stored outcome goes through it.
func validate(d *derived, rec *store.Record, hash string) error {
	if d.validate != "" && rec.PayloadHash != hash {
		return &mismatchError{Key: d.key, Path: d.validate, PayloadHash: d.payloadHash, Existing: rec}
	}
	return nil
}

// replay returns the outcome stored in rec.
func replay[T any](ctx context.Context, c *config, d *derived, rec *store.Record, out Outcome) (v T, _ Outcome, err error) {
	out, err = replayInto(ctx, c, d, rec, out, &v)
	return v, out, err
}

// replayInto is replay decoding the result into v, a pointer.
func replayInto(ctx context.Context, c *config, d *derived, rec *store.Record, out Outcome, v any) (Outcome, error) {
	if err := validate(d, rec, d.payloadHash); err != nil {
		return 0, err
	}
	if c.onOutcome != nil {
		c.onOutcome(ctx, d.key, rec, out)
	}
	switch rec.ResultKind {
	case store.ResultValue:
		if len(rec.Result) == 0 {
			return out, nil
		}
		if err := c.codec.Unmarshal(rec.Result, v); err != nil {
			return out, fmt.Errorf("%w (key %s): decoding the stored result: %w", ErrResultUnavailable, d.key, err)
		}
		return out, nil
	case store.ResultError:
		return out, c.errorCodec.DecodeError(rec.Result)
	}
	return out, fmt.Errorf("%w (key %s)", ErrResultUnavailable, d.key)
}

// cached returns the record the local cache may serve for key.
func (g *Guard) cached(key string) (*store.Record, bool) {
	if g.cache == nil {
		return nil, false
	}
	return g.cache.get(key, g.clock.Now())
}

// remember puts a completed record in the local cache.
func (g *Guard) remember(rec *store.Record) {
	if g.cache != nil && rec != nil {
		g.cache.put(rec, g.clock.Now())
	}
}

// writeOutcome completes claim with data as kind — an outcome that could not be
// encoded (encErr) is recorded without a body, so that it is never run
// again — inside the transaction of cl if it has one. The completed record
// is cached, and shown to the outcome hook.
func (g *Guard) writeOutcome(ctx context.Context, c *config, d *derived, claim *store.Record, leaseEnd time.Time, kind store.ResultKind, data []byte, encErr error, cl *call) (*store.Record, error) {
	if encErr != nil {
		kind, data = store.ResultUnavailable, nil
	}
	var done *store.Record
	var err error
	inTx := cl != nil && cl.run.tx != nil
	switch {
	case inTx && cl.parent != nil:
		// A step inside a transaction: its completion commits with the
		// call's.
		done, err = g.completeStepInTx(ctx, c, d, claim, kind, data, cl.run.tx)
	case inTx:
		done, err = g.completeTx(ctx, c, d, claim, kind, data, cl)
	default:
		done, err = g.complete(ctx, c, d, claim, leaseEnd, kind, data)
	}
	if err != nil {
		return nil, err
	}
	if cl != nil {
		cl.done = done // written: a panic from here on must not rewrite it
	}
	if cl != nil && cl.parent != nil {
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

// completeStepInTx writes the completion of a step's claim into its call's
// transaction, tx, which the call commits.
func (g *Guard) completeStepInTx(ctx context.Context, c *config, d *derived, claim *store.Record, kind store.ResultKind, data []byte, tx txn) (done *store.Record, err error) {
	ctx, span := g.child(ctx, telemetry.SpanComplete)
	attempts := 1
	defer func() { g.endComplete(ctx, span, d, attempts, done, err) }()
	sctx := newStoreContext(ctx, storeCallTimeout)
	defer sctx.cancel()
	done, err = g.writeInTx(sctx, c, claim, kind, data, tx, &attempts)
	switch {
	case errors.Is(err, store.ErrTokenMismatch):
		return nil, fmt.Errorf("%w (key %s)", ErrLeaseLost, claim.Key)
	case err != nil:
		g.release(ctx, d, claim)
		return nil, &storeError{Op: "complete", Key: claim.Key, Err: err}
	}
	return done, nil
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

// complete records the outcome of a claim whose lease ends at leaseEnd
// (the lease keeper is stopped). It retries transient store failures for as
// long as the lease holds, so that a side effect that happened is never run
// again because bookkeeping failed.
func (g *Guard) complete(ctx context.Context, c *config, d *derived, claim *store.Record, leaseEnd time.Time, kind store.ResultKind, data []byte) (done *store.Record, err error) {
	ctx, span := g.child(ctx, telemetry.SpanComplete)
	attempts := 0
	defer func() { g.endComplete(ctx, span, d, attempts, done, err) }()
	done = g.completedRecord(c, claim, kind, data)
	var bo *backoff.ExponentialBackOff
	for {
		now := g.clock.Now()
		attempts++
		sctx := newStoreContext(ctx, max(leaseEnd.Sub(now), storeCallTimeout))
		err := g.timed(ctx, "complete", func() error { return g.store.Complete(sctx, done) })
		sctx.cancel()
		switch {
		case err == nil:
			return done, nil
		case errors.Is(err, store.ErrTokenMismatch):
			return nil, fmt.Errorf("%w (key %s)", ErrLeaseLost, claim.Key)
		case errors.Is(err, store.ErrTooLarge) && done.ResultKind != store.ResultUnavailable:
			done.ResultKind, done.Result = store.ResultUnavailable, nil
			continue
		}
		g.log(ctx, slog.LevelWarn, "idemguard: completion write failed; retrying while the lease holds", d,
			slog.Int("attempt", attempts), slog.Any("error", err))
		now = g.clock.Now()
		if !now.Before(leaseEnd) {
			return nil, &notRecordedError{key: claim.Key, err: &storeError{Op: "complete", Key: claim.Key, Err: err}}
		}
		if bo == nil {
			bo = &backoff.ExponentialBackOff{InitialInterval: 50 * time.Millisecond, RandomizationFactor: 0.5, Multiplier: 2, MaxInterval: 2 * time.Second}
		}
		if serr := sleep(context.WithoutCancel(ctx), g.clock, min(bo.NextBackOff(), leaseEnd.Sub(now))); serr != nil {
			return nil, &notRecordedError{key: claim.Key, err: serr}
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
func (g *Guard) completeTx(ctx context.Context, c *config, d *derived, claim *store.Record, kind store.ResultKind, data []byte, cl *call) (done *store.Record, err error) {
	ctx, span := g.child(ctx, telemetry.SpanComplete)
	attempts := 1
	defer func() { g.endComplete(ctx, span, d, attempts, done, err) }()
	tx := cl.run.tx
	sctx := newStoreContext(ctx, storeCallTimeout)
	defer sctx.cancel()
	done, err = g.writeInTx(sctx, c, claim, kind, data, tx, &attempts)
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
		return done, nil
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

// writeInTx writes the completion of claim with data as kind into tx, and
// without a body if the store finds it too large; attempts counts the
// writes.
func (g *Guard) writeInTx(ctx context.Context, c *config, claim *store.Record, kind store.ResultKind, data []byte, tx txn, attempts *int) (*store.Record, error) {
	done := g.completedRecord(c, claim, kind, data)
	err := tx.Complete(ctx, done)
	if errors.Is(err, store.ErrTooLarge) && kind != store.ResultUnavailable {
		*attempts++
		done.ResultKind, done.Result = store.ResultUnavailable, nil
		err = tx.Complete(ctx, done)
	}
	return done, err
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

// endComplete ends a completion's span and logs what callers must know.
func (g *Guard) endComplete(ctx context.Context, span trace.Span, d *derived, attempts int, done *store.Record, err error) {
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

// extend moves the lease of the claim key held under token to leaseEnd
// and the record's expiry to expiresAt, with a call bounded by timeout:
// the one extend path, for the lease keeper and the claim API.
func (g *Guard) extend(ctx context.Context, key, token string, leaseEnd, expiresAt time.Time, timeout time.Duration) error {
	ctx, span := g.child(ctx, telemetry.SpanExtend)
	defer span.End()
	sctx := newStoreContext(ctx, timeout)
	defer sctx.cancel()
	err := g.timed(ctx, "extend", func() error { return g.store.Extend(sctx, key, token, leaseEnd, expiresAt) })
	recordErrorIf(span, err)
	return err
}

// timed runs one store call, f, measuring it as operation op.
func (g *Guard) timed(ctx context.Context, op string, f func() error) error {
	if !g.tel.Metering() {
		return f()
	}
	start := time.Now()
	err := f()
	g.tel.StoreDuration.Record(ctx, time.Since(start).Seconds(), g.tel.Operation(op))
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
func sleep(ctx context.Context, clock timeSource, d time.Duration) error {
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
