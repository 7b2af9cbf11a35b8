package guard

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/idemguard/idemguard/internal/instrument"
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
	cfg      config // the call defaults
	clock    Clock
	skew     time.Duration
	secret   []byte // HMAC key of key hashes; nil for plain SHA-256
	disabled bool
	cache    *lru.Cache[string, *store.Record] // nil when the cache is off
	tel      *instrument.Set

	mu      sync.Mutex
	flights map[string]*flight // protected by mu: calls in progress in this process
}

// New returns a Guard over s. Guard-wide options configure the guard;
// call options set the defaults that calls may override. It reports an
// invalid option (including a JMESPath expression that does not compile)
// or a nil store as an error matching [ErrInvalidOption].
func New(s store.Store, opts ...Option) (*Guard, error) {
	if s == nil {
		return nil, invalidOption("nil store")
	}
	st := defaultSettings()
	for _, o := range opts {
		o.applyGuard(&st)
	}
	if err := cmp.Or(st.err, st.call.err); err != nil {
		return nil, err
	}
	switch {
	case st.call.hasKey:
		return nil, invalidOption("WithKey names one call and cannot be a guard's default")
	case st.call.claimToken != "":
		return nil, invalidOption("WithClaimToken names one claimant and cannot be a guard's default")
	}
	g := &Guard{store: s, cfg: st.call, clock: st.clock, skew: st.skew, secret: st.secret}
	if st.cacheSize > 0 {
		g.cache, _ = lru.New[string, *store.Record](st.cacheSize)
	}
	g.disabled, _ = strconv.ParseBool(os.Getenv(DisableEnv))
	g.tel = instrument.New(st.tracerProvider, st.meterProvider, st.logger, storeName(s))
	return g, nil
}

// Store returns the guard's store.
func (g *Guard) Store() store.Store { return g.store }

// ClockSkew returns the guard's clock-skew tolerance ([WithClockSkew]): a
// claim whose lease ended at t may be taken over from t plus this on.
func (g *Guard) ClockSkew() time.Duration { return g.skew }

// Now returns the time on the guard's clock ([WithClock]), the clock its
// leases and expiries are computed on.
func (g *Guard) Now() time.Time { return g.clock.Now() }

// Disabled reports whether the guard is a pass-through (IDEMGUARD_DISABLED).
func (g *Guard) Disabled() bool { return g.disabled }

// with returns the guard's call defaults overridden by opts.
func (g *Guard) with(scope string, opts []CallOption) (*config, error) {
	if scope == "" {
		return nil, invalidOption("empty scope")
	}
	if len(opts) == 0 {
		return &g.cfg, nil
	}
	c := g.cfg
	for _, o := range opts {
		o.applyCall(&c)
	}
	if c.err != nil {
		return nil, c.err
	}
	return &c, nil
}

// running is what a guarded function's context carries about its call.
type running struct {
	g     *Guard
	c     *config
	scope string
	key   string // empty when the call runs unguarded
}

type runningKey struct{}

// KeyFromContext returns the idempotency key of the guarded call running
// with ctx, "<scope>#<hash>". Inside the function, pass it downstream (for
// example as a payment provider's Idempotency-Key header): it is the same on
// every retry, which closes the one window no store can close, a crash after
// the side effect and before its completion is recorded.
func KeyFromContext(ctx context.Context) (string, bool) {
	r, ok := ctx.Value(runningKey{}).(*running)
	if !ok || r.key == "" {
		return "", false
	}
	return r.key, true
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
// the panic continues in the caller. If something panics after fn returned
// (a result's MarshalJSON, a codec, a predicate), the side effect has
// happened: the record is completed without a result (replays get
// [ErrResultUnavailable]) and the panic continues in the caller.
func Do[T any](ctx context.Context, g *Guard, scope string, input any, fn func(context.Context) (T, error), opts ...CallOption) (T, error) {
	v, _, err := Execute(ctx, g, scope, input, fn, opts...)
	return v, err
}

// Execute is [Do] that also reports how the result was obtained. The
// outcome is zero when the call returns an error without an outcome of its
// own: a guard error before the function ran, or a failure of a concurrent
// call it joined that was not recorded.
func Execute[T any](ctx context.Context, g *Guard, scope string, input any, fn func(context.Context) (T, error), opts ...CallOption) (T, Outcome, error) {
	c, err := g.with(scope, opts)
	if err != nil {
		var zero T
		return zero, 0, err
	}
	return execute(ctx, g, c, scope, input, noTx(fn))
}

// Wrap returns a function with fn's signature that runs fn through [Do],
// deriving the key from its input argument. Options are checked once, here.
func Wrap[In, Out any](g *Guard, scope string, fn func(context.Context, In) (Out, error), opts ...CallOption) (func(context.Context, In) (Out, error), error) {
	c, err := g.with(scope, opts)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, in In) (Out, error) {
		v, _, err := execute(ctx, g, c, scope, in, func(ctx context.Context, _ txn) (Out, error) { return fn(ctx, in) })
		return v, err
	}, nil
}

// body is a guarded function; tx is nil unless the call runs in a store
// transaction (DoTx).
type body[T any] func(ctx context.Context, tx txn) (T, error)

func noTx[T any](fn func(context.Context) (T, error)) body[T] {
	return func(ctx context.Context, _ txn) (T, error) { return fn(ctx) }
}

// execute is the path of every guarded call: key, local cache, the
// in-process flight, then the store protocol.
func execute[T any](ctx context.Context, g *Guard, c *config, scope string, input any, fn body[T]) (v T, out Outcome, err error) {
	return executeTx(ctx, g, c, scope, input, fn, nil)
}

func executeTx[T any](ctx context.Context, g *Guard, c *config, scope string, input any, fn body[T], tr beginner) (v T, out Outcome, err error) {
	if g.disabled {
		v, err := unguarded(context.WithValue(ctx, runningKey{}, &running{g: g, c: c, scope: scope}), fn, tr)
		return v, OutcomeUnguarded, err
	}
	var d derived
	o := observation{scope: scope}
	ctx, o.span = g.span(ctx, telemetry.SpanExecute)
	defer func() { g.endExecute(ctx, &o, &d, c, out, err) }()

	if d, err = g.derive(c, scope, input); err != nil {
		return v, 0, err
	}
	if d.key == "" {
		if c.requireKey {
			return v, 0, fmt.Errorf("%w (scope %s)", ErrKeyMissing, scope)
		}
		g.log(ctx, slog.LevelInfo, "idemguard: key selection is empty; running unguarded", scope+"#")
		v, err = unguarded(context.WithValue(ctx, runningKey{}, &running{g: g, c: c, scope: scope}), fn, tr)
		return v, OutcomeUnguarded, err
	}
	if g.cache != nil {
		o.cache = "miss"
		if rec, ok := g.cached(d.key); ok {
			o.cache = "hit"
			return replay[T](ctx, c, d, rec, OutcomeReplayed)
		}
	}
	// Calls share an execution only when their payloads hash the same, so a
	// shared outcome is exactly what the call would have read from the store.
	fkey := d.key + "\x00" + d.payloadHash
	for {
		f, leader := g.join(fkey)
		if leader {
			return lead(ctx, g, c, d, fkey, f, fn, tr)
		}
		var again bool
		if v, out, err, again = follow[T](ctx, g, c, d, f); !again {
			return v, out, err
		}
	}
}

// lead runs the protocol for one key: claim, then replay, or run the
// function and record its outcome.
func lead[T any](ctx context.Context, g *Guard, c *config, d derived, fkey string, f *flight, fn body[T], tr beginner) (v T, out Outcome, err error) {
	claim, existing, err := g.acquire(ctx, c, d, f)
	if err != nil {
		g.land(fkey, f, landing{err: err})
		return v, 0, err
	}
	if existing != nil {
		g.remember(existing)
		v, out, err = replay[T](ctx, c, d, existing, OutcomeReplayed)
		g.land(fkey, f, landing{rec: existing})
		return v, out, err
	}
	g.settle(f, claim.LeaseExpiresAt)

	runCtx, cancel := context.WithCancelCause(context.WithValue(ctx, runningKey{}, &running{g: g, c: c, scope: keyScope(d.key), key: d.key}))
	k := g.keep(ctx, c, claim, f, cancel)
	var tx txn
	returned := false // fn has returned: its side effect happened
	settled := false  // the outcome is recorded or released
	defer func() {
		cancel(nil)
		if settled {
			return
		}
		// A panic or runtime.Goexit: in fn, or after it returned.
		r := recover()
		leaseEnd, _ := k.stop()
		perr := error(errGoexit)
		if r != nil {
			perr = &PanicError{Value: r, Stack: debug.Stack()}
		}
		var rec *store.Record
		switch {
		case tr != nil:
			// fn's writes roll back with the transaction (or committed
			// with the completion, which Release leaves alone).
			if tx != nil {
				_ = tx.Rollback(context.WithoutCancel(ctx))
			}
			g.release(ctx, claim)
		case returned:
			// The side effect happened: never run it again.
			rec, _ = g.complete(ctx, c, claim, leaseEnd, store.ResultUnavailable, nil)
			g.log(ctx, slog.LevelError, "idemguard: panic after the guarded function returned; recorded without a result", d.key, slog.Any("panic", r))
		default:
			g.release(ctx, claim)
		}
		g.land(fkey, f, landing{rec: rec, err: perr})
		if r != nil {
			panic(r)
		}
	}()
	k.start()
	if tr != nil {
		if tx, err = tr(runCtx); err != nil {
			k.stop()
			g.release(ctx, claim)
			settled = true
			err = &StoreError{Op: "begin", Key: d.key, Err: err}
			g.land(fkey, f, landing{err: err})
			return v, 0, err
		}
	}
	v, err = fn(runCtx, tx)
	returned = true
	leaseEnd, lost := k.stop()

	var rec *store.Record
	var l landing
	switch {
	case err != nil:
		if tx != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
			tx = nil
		}
		if lost != nil {
			err = fmt.Errorf("%w: %w", lost, err)
		}
		if lost != nil || !c.isDefinite(err) {
			g.release(ctx, claim)
			l = landing{err: err, released: true}
			break
		}
		data, encErr := c.errorCodec.EncodeError(err)
		var cerr error
		if rec, cerr = g.record(ctx, c, claim, leaseEnd, store.ResultError, data, encErr, nil); cerr != nil {
			err = errors.Join(err, cerr)
		}
		l = landing{rec: rec, err: err}
	case c.keepResult != nil && !c.keepResult(v):
		if tx != nil {
			err = tx.Commit(context.WithoutCancel(ctx))
			tx = nil
		}
		g.release(ctx, claim)
		l = landing{value: v, hasValue: err == nil, err: err, released: true}
	default:
		data, encErr := c.codec.Marshal(v)
		var cerr error
		if rec, cerr = g.record(ctx, c, claim, leaseEnd, store.ResultValue, data, encErr, tx); cerr != nil {
			var zero T
			v, err = zero, cerr
		}
		tx = nil
		l = landing{rec: rec, value: v, hasValue: cerr == nil, err: err}
	}
	settled = true
	g.land(fkey, f, l)
	return v, OutcomeExecuted, err
}

var errGoexit = errors.New("idemguard: guarded function called runtime.Goexit")

func typeName(v any) string {
	return strings.TrimPrefix(fmt.Sprintf("%T", v), "*")
}
