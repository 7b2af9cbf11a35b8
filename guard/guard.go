package guard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"

	lru "github.com/hashicorp/golang-lru/v2"

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
	g.cfg.leases = &leaseTimer{clock: g.cfg.clock}
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
	var o observation // apart from d, which would otherwise move to the heap
	ctx, o.span = g.startExecute(ctx, telemetry.SpanExecute)
	defer func() { g.endExecute(ctx, &o, &d, c, scope, out, err) }()

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
		if rec, ok := g.cached(d.key, c.clock.Now()); ok {
			o.cache = "hit"
			return replay[T](ctx, c, d, rec, OutcomeReplayed)
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

// lead runs the protocol for one key: claim, then replay or run and record.
func lead[T any](ctx context.Context, g *Guard, c *config, d derived, fkey string, f *flight, fn func(context.Context) (T, error)) (v T, out Outcome, err error) {
	claim, existing, err := g.acquire(ctx, c, d)
	if err != nil {
		land(g, fkey, f, nil, v, false, err)
		return v, 0, err
	}
	if existing != nil {
		// land settles f: followers learn it is not executing with its
		// outcome.
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

func typeName(v any) string {
	return strings.TrimPrefix(fmt.Sprintf("%T", v), "*")
}
