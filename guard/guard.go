package guard

import (
	"cmp"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/idemguard/idemguard/internal/guardhook"
	"github.com/idemguard/idemguard/internal/instrument"
	"github.com/idemguard/idemguard/internal/killswitch"
	"github.com/idemguard/idemguard/store"
)

// Guard runs functions at most once per idempotency key, keeping a record of
// each call in a [store.Store]. A Guard is safe for concurrent use; build one
// per store and share it.
type Guard struct {
	store    store.Store
	cfg      config // the call defaults
	txCfg    config // the defaults of transactional calls: cfg, with a key required unless New said otherwise
	clock    timeSource
	sysClock bool // clock is the system clock: lease timers are reset, not remade
	skew     time.Duration
	secret   []byte   // HMAC key of key hashes; nil for plain SHA-256
	previous [][]byte // earlier secrets, looked up while rotating
	disabled bool
	cache    *cache // nil when the cache is off
	maxKey   int    // the longest key the store holds (store.KeyLimiter); 0: no limit
	tel      *instrument.Set

	unguarded unguardedLog // when calls that ran unguarded were last logged

	flights flights // calls in progress in this process
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
	if err := cmp.Or(st.err, st.calls.err); err != nil {
		return nil, err
	}
	switch {
	case st.calls.hasKey:
		// Only an adapter's lifted option gets here (guardhook.AsOption).
		return nil, invalidOption("WithKey names one call and cannot be a guard's default")
	case st.calls.claimToken != "":
		return nil, invalidOption("WithClaimToken names one claimant and cannot be a guard's default")
	}
	g := &Guard{store: s, cfg: st.calls, txCfg: st.calls, clock: st.clock, skew: st.skew, secret: st.secret, previous: st.previous}
	if st.calls.set&setRequireKey == 0 {
		// A transactional call promises exactly once: without a key it
		// could not keep the promise.
		g.txCfg.requireKey = true
	}
	_, g.sysClock = st.clock.(systemClock)
	g.maxKey = maxKeyBytes(s)
	if st.cacheSize > 0 {
		g.cache = newCache(st.cacheSize, st.cacheAge)
	}
	g.disabled, _ = strconv.ParseBool(os.Getenv(guardhook.DisableEnv))
	g.disabled = g.disabled || st.disabled
	g.tel = instrument.New(st.tracerProvider, st.meterProvider, st.logger, storeName(s))
	return g, nil
}

// The project's suites run disabled guards beside enabled ones, in tests
// that may run in parallel, without the process environment.
func init() { killswitch.Disable = guardOption(func(s *settings) { s.disabled = true }) }

// Store returns the guard's store.
func (g *Guard) Store() store.Store { return g.store }

// ClockSkew returns the guard's clock-skew tolerance ([WithClockSkew]): a
// claim whose lease ended at t may be taken over from t plus this on.
func (g *Guard) ClockSkew() time.Duration { return g.skew }

// Now returns the time on the guard's clock (the system clock unless a test set one), the clock its
// leases and expiries are computed on.
func (g *Guard) Now() time.Time { return g.clock.Now() }

// Disabled reports whether the guard is a pass-through (IDEMGUARD_DISABLED).
func (g *Guard) Disabled() bool { return g.disabled }

// with returns the guard's call defaults overridden by opts.
func (g *Guard) with(scope string, opts []CallOption) (*config, error) {
	return g.over(&g.cfg, scope, opts)
}

// withTx is with for a transactional call ([DoTx]), whose defaults
// require a key.
func (g *Guard) withTx(scope string, opts []CallOption) (*config, error) {
	return g.over(&g.txCfg, scope, opts)
}

// over returns the defaults base overridden by opts.
func (g *Guard) over(base *config, scope string, opts []CallOption) (*config, error) {
	if scope == "" {
		return nil, invalidOption("empty scope")
	}
	if len(opts) == 0 {
		return base, nil
	}
	c := *base
	c.callSet = 0 // what New set gives way to the call's options
	for _, o := range opts {
		o.applyCall(&c)
	}
	if c.err != nil {
		return nil, c.err
	}
	return &c, nil
}

func typeName(v any) string {
	return strings.TrimPrefix(fmt.Sprintf("%T", v), "*")
}

// storeName names a store for the idemguard.store attribute: its Name method
// if it has one, else its type.
func storeName(s store.Store) string {
	if n, ok := s.(interface{ Name() string }); ok {
		return n.Name()
	}
	return typeName(s)
}

// maxKeyBytes returns the longest key s can hold, or 0 for no limit.
func maxKeyBytes(s store.Store) int {
	if l, ok := s.(store.KeyLimiter); ok {
		return max(l.MaxKeyBytes(), 0)
	}
	return 0
}
