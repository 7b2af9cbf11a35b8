package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	mathrand "math/rand/v2"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemguard/idemguard/guard"
)

// Result is one scenario's figures over all measured rounds: one JSON line.
type Result struct {
	// Scenario names the scenario (see AllScenarios).
	Scenario string `json:"scenario"`
	// Ops is the number of guarded or raw calls measured.
	Ops int `json:"ops"`
	// Concurrency is the number of concurrent callers: Config.Concurrency,
	// or Config.HotCalls in the hot-key scenarios.
	Concurrency int `json:"concurrency"`
	// Rounds is the number of rounds the calls were spread over.
	Rounds int `json:"rounds"`
	// Seconds is the wall time of the measured calls; OpsPerSec is Ops
	// divided by it.
	Seconds   float64 `json:"seconds"`
	OpsPerSec float64 `json:"ops_per_sec"`
	// Requests counts HTTP requests (attempts, after the SDK's retries),
	// by a middleware in the SDK client; RequestsPerOp divides it by Ops.
	Requests      int     `json:"requests"`
	RequestsPerOp float64 `json:"requests_per_op"`
	// CPUMicrosPerOp is the process's CPU time (user + system, getrusage)
	// over the measured window, per call: the client's CPU, since the
	// server is another process.
	CPUMicrosPerOp float64 `json:"cpu_us_per_op"`
	// AllocsPerOp and AllocBytesPerOp are the heap allocations per call.
	AllocsPerOp     float64 `json:"allocs_per_op"`
	AllocBytesPerOp float64 `json:"alloc_bytes_per_op"`
	// P50Ms and P99Ms are latency percentiles of one call, in ms.
	P50Ms float64 `json:"p50_ms"`
	P99Ms float64 `json:"p99_ms"`
	// BodyRuns counts the runs of the guarded (or raw) function.
	BodyRuns int64 `json:"body_runs"`
	// Errors counts calls that returned an error, of which InProgress
	// returned ErrInProgress (hot key, reject mode).
	Errors     int64 `json:"errors"`
	InProgress int64 `json:"in_progress_errors,omitempty"`

	// Hot-key scenarios: one burst of HotCalls calls with one key per
	// round, and the most requests and the fewest and most function runs
	// of one burst.
	Bursts              int   `json:"bursts,omitempty"`
	MaxRequestsPerBurst int   `json:"max_requests_per_burst,omitempty"`
	MinBodyRunsPerBurst int64 `json:"min_body_runs_per_burst,omitempty"`
	MaxBodyRunsPerBurst int64 `json:"max_body_runs_per_burst,omitempty"`

	// Guarded scenarios: the raw scenario measured in the same rounds, and
	// guarded/raw for throughput (ops/s) and CPU time per call.
	Baseline        string   `json:"baseline,omitempty"`
	ThroughputRatio *float64 `json:"throughput_ratio,omitempty"`
	CPURatio        *float64 `json:"cpu_ratio,omitempty"`
	// CPUDeltaMicros is guarded minus raw CPU time per call.
	CPUDeltaMicros *float64 `json:"cpu_delta_us_per_op,omitempty"`
	// ThroughputRatioMedian and CPURatioMedian are the medians of the
	// ratios of each round, guarded against raw in the same round: less
	// sensitive than the overall ratios to a round that noise hit.
	ThroughputRatioMedian *float64 `json:"throughput_ratio_median,omitempty"`
	CPURatioMedian        *float64 `json:"cpu_ratio_median,omitempty"`

	firstErr error
}

// segment is one scenario's run in one round.
type segment struct {
	ops        int
	wall       time.Duration
	cpu        time.Duration
	allocs     uint64
	allocBytes uint64
	requests   int
	lat        []time.Duration
	bodyRuns   int64
	errors     int64
	inProgress int64
	firstErr   error
}

// Run runs the warm-up pass and the measured rounds of cfg's scenarios,
// writes one JSON line per scenario to out and progress to log, and returns
// the results.
func Run(ctx context.Context, cfg Config, out, log io.Writer) ([]Result, error) {
	if cfg.Concurrency < 1 || cfg.Ops < 1 || cfg.Rounds < 1 || cfg.HotCalls < 1 || cfg.Warmup < 0 {
		return nil, errors.New("concurrency, ops, rounds and hot-calls must be positive, warmup not negative")
	}
	names := cfg.Scenarios
	if len(names) == 0 {
		if cfg.Endpoint != "" {
			names = append(names, DynamoScenarios...)
		}
		if cfg.PostgresURL != "" {
			names = append(names, PgScenarios...)
		}
		if cfg.RedisAddr != "" {
			names = append(names, RedisScenarios...)
		}
	}
	if len(names) == 0 {
		return nil, errors.New("no server: give a DynamoDB endpoint, a PostgreSQL URL or a Redis address")
	}
	cfg.Scenarios = names
	for _, n := range names {
		if !slices.Contains(AllScenarios, n) {
			return nil, fmt.Errorf("unknown scenario %q (have %v)", n, AllScenarios)
		}
	}
	b, err := newBench(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("setting up: %w", err)
	}
	defer func() {
		if err := b.close(); err != nil {
			fmt.Fprintf(log, "load: deleting table %s: %v\n", b.table, err)
		}
	}()
	if b.client != nil {
		fmt.Fprintf(log, "load: DynamoDB %s table %s\n", cfg.Endpoint, b.table)
	}
	if b.pg != nil {
		fmt.Fprintf(log, "load: PostgreSQL table %s\n", b.pg.table)
	}
	if b.rd != nil {
		fmt.Fprintf(log, "load: Redis %s prefix %s\n", b.cfg.RedisAddr, b.rd.prefix)
	}
	fmt.Fprintf(log, "load: GOMAXPROCS %d, %s; concurrency %d, ops %d in %d rounds, hot-key bursts of %d calls\n",
		runtime.GOMAXPROCS(0), runtime.Version(), cfg.Concurrency, cfg.Ops, cfg.Rounds, cfg.HotCalls)
	if err := b.populate(ctx); err != nil {
		return nil, err
	}

	if cfg.Warmup > 0 {
		for _, n := range names {
			ops := cfg.Warmup
			if isHot(n) {
				ops = min(cfg.HotCalls, cfg.Warmup)
			}
			if _, err := b.run(ctx, n, ops); err != nil {
				return nil, fmt.Errorf("warm-up: %w", err)
			}
		}
		fmt.Fprintf(log, "load: warm-up done (%d ops per scenario)\n", cfg.Warmup)
	}

	if cfg.Profile != nil {
		if err := pprof.StartCPUProfile(cfg.Profile); err != nil {
			return nil, err
		}
		defer pprof.StopCPUProfile()
	}
	segs := make(map[string][]segment)
	for r := range cfg.Rounds {
		order := append(slices.Clone(names[r%len(names):]), names[:r%len(names)]...)
		for _, n := range order {
			ops := cfg.Ops / cfg.Rounds
			if r < cfg.Ops%cfg.Rounds {
				ops++
			}
			if isHot(n) {
				ops = cfg.HotCalls
			}
			if ops == 0 {
				continue
			}
			s, err := b.run(ctx, n, ops)
			if err != nil {
				return nil, err
			}
			segs[n] = append(segs[n], s)
			if cfg.Verbose {
				fmt.Fprintf(log, "load: round %d %-22s %5d ops %8.3fs %9.1f ops/s %8.1f µs CPU/op %6d requests\n",
					r+1, n, s.ops, s.wall.Seconds(), float64(s.ops)/s.wall.Seconds(), float64(s.cpu.Microseconds())/float64(s.ops), s.requests)
			}
		}
		fmt.Fprintf(log, "load: round %d/%d done\n", r+1, cfg.Rounds)
	}
	pprof.StopCPUProfile()

	results := make([]Result, 0, len(names))
	byName := make(map[string]*Result)
	for _, n := range AllScenarios {
		if s, ok := segs[n]; ok {
			results = append(results, summarize(n, cfg, s))
			byName[n] = &results[len(results)-1]
		}
	}
	for i := range results {
		r := &results[i]
		base, ok := byName[baselines[r.Scenario]]
		if !ok {
			continue
		}
		r.Baseline = base.Scenario
		r.ThroughputRatio = ratio(r.OpsPerSec, base.OpsPerSec)
		r.CPURatio = ratio(r.CPUMicrosPerOp, base.CPUMicrosPerOp)
		d := round(r.CPUMicrosPerOp-base.CPUMicrosPerOp, 2)
		r.CPUDeltaMicros = &d
		g, raw := segs[r.Scenario], segs[base.Scenario]
		var tput, cpu []float64
		for i := range min(len(g), len(raw)) {
			tput = append(tput, (float64(g[i].ops)/g[i].wall.Seconds())/(float64(raw[i].ops)/raw[i].wall.Seconds()))
			cpu = append(cpu, (float64(g[i].cpu)/float64(g[i].ops))/(float64(raw[i].cpu)/float64(raw[i].ops)))
		}
		r.ThroughputRatioMedian, r.CPURatioMedian = median(tput), median(cpu)
	}
	enc := json.NewEncoder(out)
	for _, r := range results {
		if r.firstErr != nil {
			fmt.Fprintf(log, "load: %s: first error: %v\n", r.Scenario, r.firstErr)
		}
		if err := enc.Encode(r); err != nil {
			return nil, err
		}
	}
	return results, nil
}

func isHot(name string) bool { return name == HotKeyWait || name == HotKeyReject }

func ratio(a, b float64) *float64 {
	if b == 0 {
		return nil
	}
	r := round(a/b, 3)
	return &r
}

// median returns the median of xs, rounded, or nil if there are none.
func median(xs []float64) *float64 {
	if len(xs) == 0 {
		return nil
	}
	xs = slices.Sorted(slices.Values(xs))
	m := xs[len(xs)/2]
	if len(xs)%2 == 0 {
		m = (xs[len(xs)/2-1] + m) / 2
	}
	m = round(m, 3)
	return &m
}

func round(x float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(x*p) / p
}

func summarize(name string, cfg Config, segs []segment) Result {
	r := Result{Scenario: name, Concurrency: cfg.Concurrency, Rounds: len(segs)}
	var wall, cpu time.Duration
	var allocs, allocBytes uint64
	var lat []time.Duration
	for i, s := range segs {
		r.Ops += s.ops
		wall += s.wall
		cpu += s.cpu
		allocs += s.allocs
		allocBytes += s.allocBytes
		r.Requests += s.requests
		r.BodyRuns += s.bodyRuns
		r.Errors += s.errors
		r.InProgress += s.inProgress
		lat = append(lat, s.lat...)
		if r.firstErr == nil {
			r.firstErr = s.firstErr
		}
		if isHot(name) {
			r.MaxRequestsPerBurst = max(r.MaxRequestsPerBurst, s.requests)
			r.MaxBodyRunsPerBurst = max(r.MaxBodyRunsPerBurst, s.bodyRuns)
			if i == 0 || s.bodyRuns < r.MinBodyRunsPerBurst {
				r.MinBodyRunsPerBurst = s.bodyRuns
			}
		}
	}
	if isHot(name) {
		r.Bursts = len(segs)
		r.Concurrency = cfg.HotCalls
	}
	ops := float64(r.Ops)
	r.Seconds = round(wall.Seconds(), 3)
	r.OpsPerSec = round(ops/wall.Seconds(), 1)
	r.RequestsPerOp = round(float64(r.Requests)/ops, 4)
	r.CPUMicrosPerOp = round(float64(cpu.Microseconds())/ops, 2)
	r.AllocsPerOp = round(float64(allocs)/ops, 1)
	r.AllocBytesPerOp = round(float64(allocBytes)/ops, 0)
	slices.Sort(lat)
	r.P50Ms = round(percentile(lat, 0.50).Seconds()*1e3, 3)
	r.P99Ms = round(percentile(lat, 0.99).Seconds()*1e3, 3)
	return r
}

// percentile returns the nearest-rank percentile p of sorted.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// run runs ops operations of one scenario and measures them.
func (b *bench) run(ctx context.Context, name string, ops int) (segment, error) {
	if isHot(name) {
		return b.runHot(ctx, name, ops)
	}
	op, err := b.prepare(name, ops)
	if err != nil {
		return segment{}, err
	}
	s := segment{ops: ops, lat: make([]time.Duration, ops)}
	var next, errs atomic.Int64
	var errOnce sync.Once
	m := b.start()
	pprof.Do(ctx, pprof.Labels("scenario", name), func(ctx context.Context) {
		var wg sync.WaitGroup
		for w := range min(b.cfg.Concurrency, ops) {
			wg.Go(func() {
				for n := 0; ; n++ {
					i := int(next.Add(1) - 1)
					if i >= ops {
						return
					}
					t := time.Now()
					err := op(ctx, i, w, n)
					s.lat[i] = time.Since(t)
					if err != nil {
						errs.Add(1)
						errOnce.Do(func() { s.firstErr = err })
					}
				}
			})
		}
		wg.Wait()
	})
	m.stop(&s)
	s.errors = errs.Load()
	if err := ctx.Err(); err != nil {
		return s, err
	}
	return s, nil
}

// meter measures one segment: wall time, process CPU time, allocations,
// requests and function runs.
type meter struct {
	b          *bench
	wall       time.Time
	cpu        time.Duration
	allocs     uint64
	allocBytes uint64
	bodyRuns   int64
}

// start collects the garbage of what ran before, so that each segment
// pays for its own, and starts measuring.
func (b *bench) start() *meter {
	runtime.GC()
	if b.counter != nil {
		b.counter.Reset()
	}
	if b.pg != nil {
		b.pg.counter.Reset()
	}
	if b.rd != nil {
		b.rd.counter.Reset()
	}
	m := &meter{b: b, bodyRuns: b.bodyRuns.Load()}
	m.allocs, m.allocBytes = readAllocs()
	m.cpu = cpuTime()
	m.wall = time.Now()
	return m
}

func (m *meter) stop(s *segment) {
	s.wall = time.Since(m.wall)
	s.cpu = cpuTime() - m.cpu
	a, ab := readAllocs()
	s.allocs, s.allocBytes = a-m.allocs, ab-m.allocBytes
	if m.b.counter != nil {
		s.requests += m.b.counter.Total()
	}
	if m.b.pg != nil {
		s.requests += m.b.pg.counter.Total()
	}
	if m.b.rd != nil {
		s.requests += m.b.rd.counter.Total()
	}
	s.bodyRuns = m.b.bodyRuns.Load() - m.bodyRuns
}

var allocSamples = []metrics.Sample{{Name: "/gc/heap/allocs:objects"}, {Name: "/gc/heap/allocs:bytes"}}

func readAllocs() (objects, bytes uint64) {
	s := slices.Clone(allocSamples)
	metrics.Read(s)
	return s[0].Value.Uint64(), s[1].Value.Uint64()
}

// operation runs operation i of a scenario, the n-th of worker w.
type operation func(ctx context.Context, i, w, n int) error

// prepare returns the operation of a miss or replay scenario with ops
// operations, with its inputs made before the clock starts.
func (b *bench) prepare(name string, ops int) (operation, error) {
	workers := min(b.cfg.Concurrency, ops)
	if isHTTP(name) {
		return b.rd.http.prepare(name, ops, workers, func() string {
			return fmt.Sprintf("http-first-%s-%d", b.runID, b.seq.Add(1))
		}), nil
	}
	switch name {
	case MissGuarded, MissRaw, PgMissGuarded, PgMissRaw, PgMissStore, PgMissHand, PgTxGuarded, PgTxRaw,
		RedisMissGuarded, RedisMissStore, RedisMissRaw, RedisMissHand, TxGuarded, TxRaw, TxProtocolRaw:
		in := make([]Order, ops)
		keys := make([]string, ops)
		// Keys made before the clock, for the scenarios that take one
		// (raw, store): made for all, they would add their hashing to the
		// others' instruction counts, which callgrind takes over the whole
		// process.
		rawKeys := slices.Contains([]string{MissRaw, TxProtocolRaw, PgMissRaw, PgMissStore, RedisMissRaw, RedisMissStore}, name)
		for i := range in {
			in[i] = newOrder(fmt.Sprintf("miss-%s-%d", b.runID, b.seq.Add(1)))
			if rawKeys {
				// A raw caller's key, of the guard's shape "<scope>#<64 hex>".
				sum := sha256.Sum256([]byte(in[i].OrderID))
				keys[i] = scopeMiss + "#" + hex.EncodeToString(sum[:])
			}
		}
		guarded := func(fn func(context.Context, Order) (Receipt, error)) operation {
			return func(ctx context.Context, i, _, _ int) error { _, err := fn(ctx, in[i]); return err }
		}
		switch name {
		case MissGuarded:
			return guarded(b.missFn), nil
		case PgMissGuarded:
			return guarded(b.pg.missFn), nil
		case PgTxGuarded:
			return guarded(b.pg.txFn), nil
		case TxGuarded:
			return guarded(b.txFn), nil
		case TxRaw:
			return func(ctx context.Context, i, _, _ int) error { return b.rawTx(ctx, in[i]) }, nil
		case TxProtocolRaw:
			return func(ctx context.Context, i, _, _ int) error { return b.rawTxProtocol(ctx, keys[i], in[i]) }, nil
		case RedisMissGuarded:
			return guarded(b.rd.missFn), nil
		case RedisMissRaw:
			return func(ctx context.Context, i, _, _ int) error { return b.rd.rawMiss(ctx, b, keys[i], in[i]) }, nil
		case RedisMissHand:
			return func(ctx context.Context, i, _, _ int) error { return b.rd.handMiss(ctx, b, scopeMiss, in[i]) }, nil
		case PgMissHand:
			return func(ctx context.Context, i, _, _ int) error { return b.pg.handMiss(ctx, b, scopeMiss, in[i]) }, nil
		case RedisMissStore:
			return func(ctx context.Context, i, _, _ int) error { return storeMiss(ctx, b, b.rd.store, keys[i], in[i]) }, nil
		case PgMissStore:
			return func(ctx context.Context, i, _, _ int) error { return storeMiss(ctx, b, b.pg.store, keys[i], in[i]) }, nil
		case MissRaw:
			return func(ctx context.Context, i, _, _ int) error { return b.rawMiss(ctx, keys[i], in[i]) }, nil
		case PgMissRaw:
			return func(ctx context.Context, i, _, _ int) error { return b.pg.rawMiss(ctx, b, keys[i], in[i]) }, nil
		default:
			return func(ctx context.Context, i, _, _ int) error { return b.pg.rawTx(ctx, b, in[i]) }, nil
		}
	case ReplayGuarded, ReplayCachedGuarded, ReplayRaw, PgReplayGuarded, PgReplayCachedGuarded, PgReplayRaw, PgReplayStore, PgReplayHand,
		RedisReplayGuarded, RedisReplayCachedGuarded, RedisReplayStore, RedisReplayRaw, RedisReplayHand, TxReplayGuarded, TxReplayCachedGuarded:
		ins, keys, fn, cached, raw := b.replayIn, b.replayKey, b.replayFn, b.cachedFn, b.rawReplay
		switch {
		case isPg(name):
			ins, keys, fn, cached, raw = b.pg.replayIn, b.pg.replayKey, b.pg.replayFn, b.pg.cachedFn, b.pg.rawReplay
		case isRedis(name):
			ins, keys, fn, cached, raw = b.rd.replayIn, b.rd.replayKey, b.rd.replayFn, b.rd.cachedFn, b.rd.rawReplay
		case name == TxReplayGuarded, name == TxReplayCachedGuarded:
			fn, cached = b.txReplayFn, b.txCachedFn
		}
		// Worker w replays keys w, w+W, w+2W, … (W workers), one at a
		// time, so that no two calls in flight share a key: concurrent
		// calls with one key would share one request in the guard.
		per := max(len(ins)/workers, 1)
		off := mathrand.IntN(per)
		idx := func(w, n int) int { return (w + workers*((off+n)%per)) % len(ins) }
		switch name {
		case ReplayGuarded, PgReplayGuarded, RedisReplayGuarded, TxReplayGuarded:
			return func(ctx context.Context, _, w, n int) error { _, err := fn(ctx, ins[idx(w, n)]); return err }, nil
		case ReplayCachedGuarded, PgReplayCachedGuarded, RedisReplayCachedGuarded, TxReplayCachedGuarded:
			return func(ctx context.Context, _, w, n int) error { _, err := cached(ctx, ins[idx(w, n)]); return err }, nil
		case RedisReplayStore:
			return func(ctx context.Context, _, w, n int) error { return storeReplay(ctx, b.rd.store, keys[idx(w, n)]) }, nil
		case PgReplayStore:
			return func(ctx context.Context, _, w, n int) error { return storeReplay(ctx, b.pg.store, keys[idx(w, n)]) }, nil
		case RedisReplayHand:
			return func(ctx context.Context, _, w, n int) error { return b.rd.handReplay(ctx, scopeReplay, ins[idx(w, n)]) }, nil
		case PgReplayHand:
			return func(ctx context.Context, _, w, n int) error { return b.pg.handReplay(ctx, scopeReplay, ins[idx(w, n)]) }, nil
		default:
			return func(ctx context.Context, _, w, n int) error { return raw(ctx, keys[idx(w, n)]) }, nil
		}
	}
	return nil, fmt.Errorf("unknown scenario %q", name)
}

// burst is the state of one hot-key burst.
type burst struct {
	calls    int64
	reject   bool
	entered  atomic.Int64 // callers that have started their call
	rejected atomic.Int64 // callers that got ErrInProgress
}

// hotBody is the guarded function of the hot-key scenarios. It keeps the
// key held until every other caller has joined: in reject mode until all
// of them have been turned away with ErrInProgress, in wait mode until all
// have started their call, and HotHold more. It waits at most a minute.
func (b *bench) hotBody(ctx context.Context, o Order) (Receipt, error) {
	b.bodyRuns.Add(1)
	bu := b.hot.Load()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	limit := time.After(time.Minute)
	for {
		if bu.reject && bu.rejected.Load() >= bu.calls-1 || !bu.reject && bu.entered.Load() >= bu.calls {
			break
		}
		select {
		case <-tick.C:
		case <-limit:
			return Receipt{}, errors.New("hot key: not every caller joined within a minute")
		case <-ctx.Done():
			return Receipt{}, ctx.Err()
		}
	}
	if !bu.reject {
		select {
		case <-time.After(b.cfg.HotHold):
		case <-ctx.Done():
			return Receipt{}, ctx.Err()
		}
	}
	return charge(o), nil
}

// runHot runs one burst of calls concurrent calls with one fresh key.
func (b *bench) runHot(ctx context.Context, name string, calls int) (segment, error) {
	fn := b.hotWait
	bu := &burst{calls: int64(calls), reject: name == HotKeyReject}
	if bu.reject {
		fn = b.hotRejct
	}
	b.hot.Store(bu)
	in := newOrder(fmt.Sprintf("hot-%s-%d", b.runID, b.seq.Add(1)))
	s := segment{ops: calls, lat: make([]time.Duration, calls)}
	var errs, inProgress atomic.Int64
	var errOnce sync.Once
	release := make(chan struct{})
	var ready, done sync.WaitGroup
	ready.Add(calls)
	pprof.Do(ctx, pprof.Labels("scenario", name), func(ctx context.Context) {
		for i := range calls {
			done.Go(func() {
				ready.Done()
				<-release
				bu.entered.Add(1)
				t := time.Now()
				_, err := fn(ctx, in)
				s.lat[i] = time.Since(t)
				if err != nil {
					if errors.Is(err, guard.ErrInProgress) {
						inProgress.Add(1)
						bu.rejected.Add(1)
					}
					errs.Add(1)
					errOnce.Do(func() { s.firstErr = err })
				}
			})
		}
	})
	ready.Wait()
	m := b.start()
	close(release)
	done.Wait()
	m.stop(&s)
	s.errors, s.inProgress = errs.Load(), inProgress.Load()
	return s, ctx.Err()
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
