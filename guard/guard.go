package guard

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
	lru "github.com/hashicorp/golang-lru/v2"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/telemetry"
)

// DisableEnv is the environment variable that, set to a true value ("true",
// "1"), makes every guard built afterwards a pass-through that runs the
// function and touches no store.
const DisableEnv = "IDEMGUARD_DISABLED"

// Outcome says how a call got its result.
type Outcome uint8

const (
	// OutcomeExecuted: this call ran the function.
	OutcomeExecuted Outcome = iota + 1
	// OutcomeReplayed: this call returned an outcome stored by an earlier
	// call, read from the store or the local cache.
	OutcomeReplayed
	// OutcomeShared: this call joined a concurrent call with the same key in
	// this process and returned its outcome.
	OutcomeShared
	// OutcomeUnguarded: this call ran the function without a record,
	// because the key selection was empty or the guard is disabled.
	OutcomeUnguarded
)

// String returns "executed", "replayed", "shared" or "unguarded".
func (o Outcome) String() string {
	switch o {
	case OutcomeExecuted:
		return "executed"
	case OutcomeReplayed:
		return "replayed"
	case OutcomeShared:
		return "shared"
	case OutcomeUnguarded:
		return "unguarded"
	}
	return "Outcome(" + strconv.Itoa(int(o)) + ")"
}

// Guard runs functions at most once per idempotency key, keeping a record of
// each call in a [store.Store]. A Guard is safe for concurrent use; build one
// per store and share it.
type Guard struct {
	store    store.Store
	cfg      config
	disabled bool
	cache    *lru.Cache[string, *store.Record] // nil when the cache is off
	tel      *telemetry.Instruments

	mu      sync.Mutex
	flights map[string]*flight // protected by mu: calls in progress in this process
}

// New returns a Guard over s with the given defaults, which calls may
// override. It reports an invalid option (including a JMESPath expression
// that does not compile) or a nil store as an error matching
// [ErrInvalidOption].
func New(s store.Store, opts ...Option) (*Guard, error) {
	if s == nil {
		return nil, invalidOption("nil store")
	}
	g := &Guard{store: s, cfg: defaultConfig()}
	for _, o := range opts {
		o.apply(&g.cfg)
	}
	if g.cfg.err != nil {
		return nil, g.cfg.err
	}
	if g.cfg.cacheSize > 0 {
		g.cache, _ = lru.New[string, *store.Record](g.cfg.cacheSize)
	}
	g.disabled, _ = strconv.ParseBool(os.Getenv(DisableEnv))
	g.tel = telemetry.New(g.cfg.tracerProvider, g.cfg.meterProvider, g.cfg.logger, storeName(s))
	return g, nil
}

// Store returns the guard's store.
func (g *Guard) Store() store.Store { return g.store }

// with returns the guard's config overridden by opts.
func (g *Guard) with(scope string, opts []Option) (*config, error) {
	if scope == "" {
		return nil, invalidOption("empty scope")
	}
	if len(opts) == 0 {
		return &g.cfg, nil
	}
	c := g.cfg
	for _, o := range opts {
		o.apply(&c)
	}
	if c.err != nil {
		return nil, c.err
	}
	return &c, nil
}

type ctxKey struct{}

// KeyFromContext returns the idempotency key of the guarded call running
// with ctx, "<scope>#<hash>". Inside the function, pass it downstream (for
// example as a payment provider's Idempotency-Key header): it is the same on
// every retry, which closes the one window no store can close, a crash after
// the side effect and before its completion is recorded.
func KeyFromContext(ctx context.Context) (string, bool) {
	k, ok := ctx.Value(ctxKey{}).(string)
	return k, ok
}

// Do runs fn at most once for the key derived from input within scope, and
// returns its result, or the stored result of an earlier call with the same
// key. Scope names what is guarded, so that two guarded functions never
// share keys; input is what the key is derived from (see [WithKeyPath]).
// The key is bound before fn runs, so fn may change input.
//
// If fn returns an error the record is released and the next call runs fn
// again, unless the error is definite (see [WithDefiniteErrors]), in which
// case it is stored and replayed. If fn panics the record is released and
// the panic continues in the caller.
func Do[T any](ctx context.Context, g *Guard, scope string, input any, fn func(context.Context) (T, error), opts ...Option) (T, error) {
	v, _, err := Execute(ctx, g, scope, input, fn, opts...)
	return v, err
}

// Execute is [Do] that also reports how the result was obtained.
func Execute[T any](ctx context.Context, g *Guard, scope string, input any, fn func(context.Context) (T, error), opts ...Option) (T, Outcome, error) {
	c, err := g.with(scope, opts)
	if err != nil {
		var zero T
		return zero, 0, err
	}
	return execute(ctx, g, c, scope, input, fn)
}

// Wrap returns a function with fn's signature that runs fn through [Do],
// deriving the key from its input argument. Options are checked once, here.
func Wrap[In, Out any](g *Guard, scope string, fn func(context.Context, In) (Out, error), opts ...Option) (func(context.Context, In) (Out, error), error) {
	c, err := g.with(scope, opts)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, in In) (Out, error) {
		v, _, err := execute(ctx, g, c, scope, in, func(ctx context.Context) (Out, error) { return fn(ctx, in) })
		return v, err
	}, nil
}

func execute[T any](ctx context.Context, g *Guard, c *config, scope string, input any, fn func(context.Context) (T, error)) (v T, out Outcome, err error) {
	if g.disabled {
		v, err := fn(ctx)
		return v, OutcomeUnguarded, err
	}
	var d derived
	o := observation{d: &d}
	ctx, o.span = g.startExecute(ctx, telemetry.SpanExecute)
	defer func() { g.endExecute(ctx, &o, c, scope, out, err) }()

	if d, err = c.derive(scope, input); err != nil {
		return v, 0, err
	}
	if d.key == "" {
		if c.requireKey {
			return v, 0, fmt.Errorf("%w (scope %s)", ErrKeyMissing, scope)
		}
		g.log(ctx, slog.LevelInfo, "idemguard: key selection is empty; running unguarded", scope+"#")
		v, err = fn(ctx)
		return v, OutcomeUnguarded, err
	}
	if g.cache != nil {
		o.cache = "miss"
		if rec, ok := g.cache.Get(d.key); ok {
			if rec.Live(c.clock.Now()) {
				o.cache = "hit"
				return replay[T](ctx, c, d, rec, OutcomeReplayed)
			}
			g.cache.Remove(d.key)
		}
	}
	// Calls share an execution only when their payloads hash the same, so a
	// shared outcome is exactly what the call would have read from the store.
	fkey := d.key
	if d.payloadHash != "" {
		fkey += "\x00" + d.payloadHash
	}
	for {
		f, leader := g.join(fkey)
		if leader {
			return lead(ctx, g, c, d, fkey, f, fn)
		}
		var again bool
		if v, out, err, again = follow[T](ctx, g, c, d, f); !again {
			return v, out, err
		}
	}
}

// flight is a call in progress in this process, which concurrent calls with
// the same key and payload join instead of going to the store.
type flight struct {
	// Protected by Guard.mu.
	done      chan struct{} // made by the first follower; closed once the leader has an outcome
	dups      int           // followers that joined
	settled   bool          // the leader knows whether it runs the function
	executing bool          // the leader runs the function (valid once settled)
	leaseEnd  time.Time     // the leader's lease end when executing
	decided   chan struct{} // made by a Reject-mode follower, closed once settled

	// Written before done is closed.
	rec      *store.Record // the completed record, if any
	value    any           // the leader's result, when followers exist and it returned one
	hasValue bool
	err      error
}

// join returns the flight for fkey, creating it (leader) if there is none.
func (g *Guard) join(fkey string) (f *flight, leader bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if f, ok := g.flights[fkey]; ok {
		f.dups++
		if f.done == nil {
			f.done = make(chan struct{})
		}
		return f, false
	}
	if g.flights == nil {
		g.flights = make(map[string]*flight)
	}
	f = &flight{}
	g.flights[fkey] = f
	return f, true
}

// settle records whether the leader runs the function.
func (g *Guard) settle(f *flight, executing bool, leaseEnd time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	f.settled, f.executing, f.leaseEnd = true, executing, leaseEnd
	if f.decided != nil {
		close(f.decided)
	}
}

// land removes f from the flights and hands its outcome to the followers.
func land[T any](g *Guard, fkey string, f *flight, rec *store.Record, v T, hasValue bool, err error) {
	g.mu.Lock()
	if g.flights[fkey] == f {
		delete(g.flights, fkey)
	}
	if !f.settled {
		f.settled = true
		if f.decided != nil {
			close(f.decided)
		}
	}
	dups, done := f.dups, f.done
	g.mu.Unlock()
	if dups == 0 {
		return // nobody joined, and nobody can any more
	}
	f.rec, f.err = rec, err
	if hasValue {
		f.value, f.hasValue = v, true
	}
	close(done)
}

// follow waits for the leader of f. again reports that the leader's context
// ended while the caller's did not, so the caller should try on its own.
func follow[T any](ctx context.Context, g *Guard, c *config, d derived, f *flight) (v T, out Outcome, err error, again bool) {
	if k, ok := KeyFromContext(ctx); ok && k == d.key {
		// A guarded function calling itself with its own key would wait for
		// itself forever.
		return v, 0, &InProgressError{Key: d.key}, false
	}
	if c.mode == Reject {
		g.mu.Lock()
		if !f.settled {
			if f.decided == nil {
				f.decided = make(chan struct{})
			}
			ch := f.decided
			g.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				return v, 0, ctx.Err(), false
			}
			g.mu.Lock()
		}
		executing, leaseEnd := f.executing, f.leaseEnd
		g.mu.Unlock()
		if executing {
			return v, 0, &InProgressError{Key: d.key, LeaseExpiresAt: leaseEnd}, false
		}
	}
	select {
	case <-f.done:
	case <-ctx.Done():
		return v, 0, ctx.Err(), false
	}
	switch {
	case f.err != nil:
		if isContextError(f.err) && ctx.Err() == nil {
			return v, 0, nil, true
		}
		return v, OutcomeShared, f.err, false
	case f.hasValue:
		if v, ok := f.value.(T); ok {
			return v, OutcomeShared, nil, false
		}
	}
	if f.rec == nil {
		return v, 0, nil, true
	}
	v, out, err = replay[T](ctx, c, d, f.rec, OutcomeShared)
	return v, out, err, false
}

func isContextError(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// lead runs the protocol for one key: claim, then replay or run and record.
func lead[T any](ctx context.Context, g *Guard, c *config, d derived, fkey string, f *flight, fn func(context.Context) (T, error)) (v T, out Outcome, err error) {
	claim, existing, err := g.acquire(ctx, c, d)
	if err != nil {
		land(g, fkey, f, nil, v, false, err)
		return v, 0, err
	}
	if existing != nil {
		g.settle(f, false, time.Time{})
		g.remember(existing)
		v, out, err = replay[T](ctx, c, d, existing, OutcomeReplayed)
		land(g, fkey, f, existing, v, false, nil)
		return v, out, err
	}
	g.settle(f, true, claim.LeaseExpiresAt)

	k := g.keep(ctx, c, claim)
	runCtx, cancel := context.WithCancelCause(context.WithValue(ctx, ctxKey{}, d.key))
	k.cancel = cancel
	finished := false
	defer func() {
		cancel(nil)
		if finished {
			return
		}
		// fn panicked or called runtime.Goexit: release the record so a
		// later call runs again, tell the followers, and let the panic go on.
		r := recover()
		k.stop()
		g.release(ctx, claim)
		perr := error(errGoexit)
		if r != nil {
			perr = &PanicError{Value: r, Stack: debug.Stack()}
		}
		land(g, fkey, f, nil, v, false, perr)
		if r != nil {
			panic(r)
		}
	}()
	k.start()
	v, err = fn(runCtx)
	finished = true

	if err != nil {
		if !c.isDefinite(err) {
			k.stop()
			g.release(ctx, claim)
			land(g, fkey, f, nil, v, false, err)
			return v, OutcomeExecuted, err
		}
		data, encErr := c.errorCodec.EncodeError(err)
		done, cerr := g.record(ctx, c, claim, k, store.ResultError, data, encErr)
		if cerr != nil {
			err = errors.Join(err, cerr)
		}
		land(g, fkey, f, done, v, false, err)
		return v, OutcomeExecuted, err
	}

	if c.keepResult != nil && !c.keepResult(v) {
		k.stop()
		g.release(ctx, claim)
		land(g, fkey, f, nil, v, true, nil)
		return v, OutcomeExecuted, nil
	}
	data, encErr := c.codec.Marshal(v)
	done, cerr := g.record(ctx, c, claim, k, store.ResultValue, data, encErr)
	if cerr != nil {
		var zero T
		land(g, fkey, f, nil, zero, false, cerr)
		return zero, OutcomeExecuted, cerr
	}
	land(g, fkey, f, done, v, true, nil)
	return v, OutcomeExecuted, nil
}

// record stops the lease keeper and completes the claim with data as kind;
// an outcome that could not be encoded (encErr) is recorded without a body,
// so it is never run again. The completed record is cached.
func (g *Guard) record(ctx context.Context, c *config, claim *store.Record, k *keeper, kind store.ResultKind, data []byte, encErr error) (*store.Record, error) {
	if encErr != nil {
		kind, data = store.ResultUnavailable, nil
	}
	done, err := g.complete(ctx, c, claim, k.stop(), kind, data)
	if err == nil {
		g.remember(done)
	}
	return done, err
}

var errGoexit = errors.New("idemguard: guarded function called runtime.Goexit")

// acquire claims d.key, or returns the completed record that holds it. In
// Wait mode it polls while another call holds the key.
func (g *Guard) acquire(ctx context.Context, c *config, d derived) (claim, existing *store.Record, err error) {
	ctx, span := g.child(ctx, telemetry.SpanAcquire)
	var waitStart time.Time
	defer func() {
		if !waitStart.IsZero() {
			waited := time.Since(waitStart).Seconds()
			g.tel.LockWait.Record(ctx, waited, g.tel.CallOption(keyScope(d.key), outcomeLabel(OutcomeReplayed, err)))
			span.SetAttributes(telemetry.WaitKey.Float64(waited))
		}
		if err != nil {
			recordError(span, err)
		}
		span.End()
	}()
	var bo *backoff.ExponentialBackOff
	var waitEnd time.Time
	for vanished := 0; ; {
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		now := c.clock.Now()
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
		start := g.storeStart()
		old, err := g.store.Acquire(ctx, claim, now)
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
		if c.claimToken != "" && old.Token == c.claimToken {
			return old, nil, nil // our own claim, made before and forgotten
		}
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
		if lapse := old.LeaseExpiresAt.Sub(now); !old.LeaseExpiresAt.IsZero() && lapse >= 0 && lapse < pause {
			pause = lapse + time.Millisecond
		}
		if span.IsRecording() {
			span.AddEvent(telemetry.EventWait, trace.WithAttributes(
				telemetry.LeaseExpiresKey.String(old.LeaseExpiresAt.UTC().Format(time.RFC3339Nano)),
				attribute.Float64("idemguard.wait.pause_seconds", pause.Seconds())))
		}
		if err := sleep(ctx, c.clock, pause); err != nil {
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
		return &MismatchError{Key: d.key, PayloadHash: d.payloadHash, Existing: rec}
	}
	return nil
}

// replay returns the outcome stored in rec.
func replay[T any](ctx context.Context, c *config, d derived, rec *store.Record, out Outcome) (v T, _ Outcome, err error) {
	if err := c.validate(d, rec); err != nil {
		return v, 0, err
	}
	if c.onReplay != nil {
		c.onReplay(ctx, d.key, rec, out)
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

// remember puts a completed record in the local cache.
func (g *Guard) remember(rec *store.Record) {
	if g.cache != nil && rec != nil {
		g.cache.Add(rec.Key, rec)
	}
}

// complete records the outcome of a claim whose lease ends at leaseEnd
// (the lease keeper is stopped). It retries transient store failures for as
// long as the lease holds, so that a side effect that happened is never run
// again because bookkeeping failed.
func (g *Guard) complete(ctx context.Context, c *config, claim *store.Record, leaseEnd time.Time, kind store.ResultKind, data []byte) (done *store.Record, err error) {
	ctx, span := g.child(ctx, telemetry.SpanComplete)
	attempts := 0
	defer func() {
		if done != nil && done.ResultKind == store.ResultUnavailable {
			g.log(ctx, slog.LevelWarn, "idemguard: result not stored (too large for the store, or not encodable); replays will get ErrResultUnavailable", claim.Key)
		}
		if errors.Is(err, ErrLeaseLost) {
			g.tel.LeaseLost.Add(ctx, 1, g.tel.CallOption(keyScope(claim.Key), telemetry.OutcomeError))
			g.log(ctx, slog.LevelWarn, "idemguard: lease lost to another caller; outcome not recorded", claim.Key)
		}
		if span.IsRecording() {
			span.SetAttributes(telemetry.AttemptsKey.Int(attempts))
			if done != nil {
				span.SetAttributes(telemetry.ResultKindKey.String(done.ResultKind.String()))
			}
			recordErrorIf(span, err)
		}
		span.End()
	}()
	base := context.WithoutCancel(ctx)
	now := c.clock.Now()
	done = &store.Record{
		Key:         claim.Key,
		Status:      store.StatusCompleted,
		Token:       claim.Token,
		PayloadHash: claim.PayloadHash,
		ResultKind:  kind,
		Result:      data,
		ExpiresAt:   now.Add(c.ttl),
	}
	var bo *backoff.ExponentialBackOff
	for {
		actx, cancel := context.WithTimeout(base, max(leaseEnd.Sub(now), storeCallTimeout))
		attempts++
		start := g.storeStart()
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
		now = c.clock.Now()
		if !now.Before(leaseEnd) {
			return nil, &notRecordedError{key: claim.Key, err: &StoreError{Op: "complete", Key: claim.Key, Err: err}}
		}
		if bo == nil {
			bo = &backoff.ExponentialBackOff{InitialInterval: 50 * time.Millisecond, RandomizationFactor: 0.5, Multiplier: 2, MaxInterval: 2 * time.Second}
		}
		if serr := sleep(base, c.clock, min(bo.NextBackOff(), leaseEnd.Sub(now))); serr != nil {
			return nil, &notRecordedError{key: claim.Key, err: serr}
		}
	}
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

// release deletes a claim so that the next call runs the function at once.
// If it fails the claim lapses with its lease.
func (g *Guard) release(ctx context.Context, claim *store.Record) {
	ctx, span := g.child(ctx, telemetry.SpanRelease)
	defer span.End()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeCallTimeout)
	defer cancel()
	start := g.storeStart()
	err := g.store.Release(rctx, claim.Key, claim.Token)
	g.timeStore(ctx, "release", start)
	if err != nil && !errors.Is(err, store.ErrTokenMismatch) {
		recordError(span, err)
		g.log(ctx, slog.LevelWarn, "idemguard: release failed; the key stays claimed until its lease lapses", claim.Key, slog.Any("error", err))
	}
}

// newToken returns a random fencing token: 128 bits, hex.
func newToken() string {
	var b [16]byte
	var h [32]byte
	binary.LittleEndian.PutUint64(b[:8], rand.Uint64())
	binary.LittleEndian.PutUint64(b[8:], rand.Uint64())
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

func typeName(v any) string {
	return strings.TrimPrefix(fmt.Sprintf("%T", v), "*")
}
