package linz

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemguard/idemguard/store"
)

// HistoryConfig shapes the workload [RecordHistory] drives. The zero value
// of each field means its default.
type HistoryConfig struct {
	// Clients is the number of concurrent clients; default 6.
	Clients int
	// Keys is the number of hot keys they share; default 3.
	Keys int
	// Ops stops the run after about this many operations; default 1,500.
	Ops int
	// Duration stops the run after this long, whatever Ops says; default
	// a minute.
	Duration time.Duration
	// OpTimeout is the longest deadline of one operation: each gets one
	// drawn between a quarter of it and all of it, so that slow answers
	// also end in deadlines; default one second.
	OpTimeout time.Duration
	// Tick is the mean step of the recorder's clock per operation;
	// default 10 ms. Leases last 5 to 40 ticks, completed records 30 to
	// 300, so that within a run claims are taken over and records expire
	// and are claimed again.
	Tick time.Duration
	// Faults is the share of operations the recorder itself faults, on
	// top of whatever the store's connection does: a third fail before
	// reaching the store, a third lose their answer after it ran, a third
	// are delayed. For a store with no connection to fault (memory).
	Faults float64
	// AcquireMayRelease says that the store may give back a claim it
	// wrote when it reports an error (store/redis with WithReplicas
	// releases a claim that WAIT did not see replicated): each failed
	// Acquire is then recorded with a Release of its token whose answer
	// was lost.
	AcquireMayRelease bool
	// Prefix starts every key; default a random one, so that runs on a
	// shared store never meet.
	Prefix string
	// Seed seeds the clients' choices; zero means a random seed.
	Seed uint64
	// Base is the time the recorder's clock starts at; default a day from
	// now, so that a store's own expiry (Redis PEXPIREAT, DynamoDB TTL)
	// never removes a record during the run.
	Base time.Time

	// stalls is the chance that a holder stalls past its lease at each
	// point where it may; default 0.3. RunMutants raises it: every broken
	// condition but the claim's shows only in a holder's late write.
	stalls float64
}

func (c *HistoryConfig) defaults() {
	if c.Clients <= 0 {
		c.Clients = 6
	}
	if c.Keys <= 0 {
		c.Keys = 3
	}
	if c.Ops <= 0 {
		c.Ops = 1500
	}
	if c.Duration <= 0 {
		c.Duration = time.Minute
	}
	if c.OpTimeout <= 0 {
		c.OpTimeout = time.Second
	}
	if c.Tick <= 0 {
		c.Tick = 10 * time.Millisecond
	}
	if c.stalls <= 0 {
		c.stalls = 0.3
	}
	if c.Prefix == "" {
		var b [6]byte
		rand.Read(b[:])
		c.Prefix = "linz-" + hex.EncodeToString(b[:]) + "#"
	}
	if c.Seed == 0 {
		var b [8]byte
		rand.Read(b[:])
		for _, x := range b {
			c.Seed = c.Seed<<8 | uint64(x)
		}
	}
	if c.Base.IsZero() {
		c.Base = time.Now().Add(24 * time.Hour)
	}
}

// RecordHistory drives s with cfg.Clients concurrent clients on cfg.Keys
// hot keys and returns the history of what they did and heard, for
// [History.Check]. It stops after cfg.Ops operations, after cfg.Duration,
// or when ctx is done; it returns an error only if it could not start.
//
// Each client plays a guard: it claims a key at the recorder's time,
// sometimes extends its lease, and completes or releases the claim — or
// stalls, so that its lease lapses, another client takes the key over and
// its own late writes must be fenced off; it reads records, repeats
// requests whose answer was lost (as a client library's retry does, with
// the same token and time), and repeats a completion. The recorder's
// clock is logical: every operation moves it forward by about cfg.Tick,
// so leases lapse and records expire within a short run without anyone
// sleeping. The clients' choices are random (cfg.Seed); times are not
// aligned to the stores' precision, so rounding is exercised too.
//
// Run the store's client with its own retries off where it has them
// (aws-sdk-go-v2's RetryMaxAttempts 1, go-redis's MaxRetries -1): a retry
// inside the client that meets its own first attempt is then a retry in
// the history, with both attempts on record.
func RecordHistory(ctx context.Context, s store.Store, cfg HistoryConfig) (*History, error) {
	if s == nil {
		return nil, errors.New("linz: RecordHistory: nil store")
	}
	cfg.defaults()
	h := newHistory(cfg.Base)
	r := &recorder{s: s, h: h, cfg: cfg}
	r.clock.Store(int64(cfg.Base.Sub(h.base))) // Base less its whole second
	ctx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	var wg sync.WaitGroup
	for i := range cfg.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &client{r: r, id: i, rng: mrand.New(mrand.NewPCG(cfg.Seed, uint64(i)+1))}
			c.run(ctx)
		}()
	}
	wg.Wait()
	return h, nil
}

type recorder struct {
	s     store.Store
	h     *History
	cfg   HistoryConfig
	clock atomic.Int64 // the logical time, nanoseconds after h.base
	ops   atomic.Int64 // operations begun
	toks  atomic.Int64
}

// tick moves the clock forward by a random step around cfg.Tick and
// returns the new time.
func (r *recorder) tick(rng *mrand.Rand) int64 {
	return r.clock.Add(rng.Int64N(2*int64(r.cfg.Tick)) + 1)
}

type client struct {
	r   *recorder
	id  int
	rng *mrand.Rand
}

// token returns a fresh token, unique within the run (no other run uses
// its keys).
func (c *client) token() string {
	return fmt.Sprintf("t%d.c%d", c.r.toks.Add(1), c.id)
}

func (c *client) randBytes(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(c.rng.UintN(256))
	}
	return b
}

func (c *client) ticks(lo, hi int) int64 {
	return int64(lo+c.rng.IntN(hi-lo+1)) * int64(c.r.cfg.Tick)
}

// chance reports true with probability p.
func (c *client) chance(p float64) bool { return c.rng.Float64() < p }

// do runs one operation through the recorder's own faults and records
// it. It returns false when the run is over.
func (c *client) do(ctx context.Context, in input, f func(context.Context) (*store.Record, error)) (output, bool) {
	if ctx.Err() != nil || c.r.ops.Add(1) > int64(c.r.cfg.Ops) {
		return output{}, false
	}
	in.client = c.id
	h := c.r.h
	d := c.r.cfg.OpTimeout
	octx, cancel := context.WithTimeout(context.Background(), d/4+time.Duration(c.rng.Int64N(int64(d-d/4)+1)))
	defer cancel()
	fault := 0
	if c.chance(c.r.cfg.Faults) {
		fault = 1 + c.rng.IntN(3)
	}
	call := h.now()
	var (
		rec  *store.Record
		err  error
		over bool // the operation is over, whatever the client heard
	)
	switch fault {
	case 1: // lost before it reached the store
		err, over = errors.New("injected: request lost"), true
	case 2, 3:
		if fault == 3 {
			time.Sleep(time.Duration(c.rng.Int64N(int64(2 * time.Millisecond))))
		}
		rec, err = f(octx)
		if fault == 2 {
			rec, err, over = nil, errors.New("injected: answer lost"), true
		}
	default:
		rec, err = f(octx)
	}
	out := classify(err)
	if rec != nil && (out.res == resConflict || (in.kind != opComplete && out.res == resOK)) {
		out.rec, out.hasRec = h.mrec(rec), true
	}
	h.add(call, in, out, over)
	if in.kind == opAcquire && out.res == resUnknown && c.r.cfg.AcquireMayRelease {
		h.add(call, input{kind: opRelease, key: in.key, client: c.id, token: in.rec.token, synth: true},
			output{res: resUnknown, err: "the store may have released it"}, over)
	}
	return out, true
}

func (c *client) run(ctx context.Context) {
	for {
		key := c.r.cfg.Prefix + fmt.Sprint(c.rng.IntN(c.r.cfg.Keys))
		var ok bool
		if c.chance(0.1) {
			_, ok = c.get(ctx, key)
		} else {
			ok = c.claim(ctx, key)
		}
		if !ok {
			return
		}
	}
}

func (c *client) get(ctx context.Context, key string) (output, bool) {
	return c.do(ctx, input{kind: opGet, key: key}, func(ctx context.Context) (*store.Record, error) {
		return c.r.s.Get(ctx, key)
	})
}

// claim plays one guarded call on key: claim, hold, finish. It returns
// false when the run is over.
func (c *client) claim(ctx context.Context, key string) bool {
	h := c.r.h
	now := c.r.tick(c.rng)
	tok := c.token()
	rec := mrec{status: store.StatusInProgress, token: tok, payload: "p" + fmt.Sprint(c.rng.IntN(3))}
	if !c.chance(0.05) {
		rec.lease = now + c.ticks(5, 40)
	}
	rec.exp = max(rec.lease, now) + c.ticks(1, 60)
	acquire := func(retry bool) (output, bool) {
		return c.do(ctx, input{kind: opAcquire, key: key, rec: rec, now: now, token: tok, retry: retry},
			func(ctx context.Context) (*store.Record, error) {
				return c.r.s.Acquire(ctx, h.record(rec, key), h.abs(now))
			})
	}
	out, ok := acquire(false)
	if !ok {
		return false
	}
	if out.res == resUnknown && c.chance(0.6) {
		if out, ok = acquire(true); !ok {
			return false
		}
	}
	held := out.res == resOK || (out.res == resConflict && out.hasRec && out.rec.token == tok)
	switch {
	case out.res == resConflict && !held:
		// Someone holds it: look again, as a waiting guard polls.
		for c.chance(0.5) {
			if _, ok := c.get(ctx, key); !ok {
				return false
			}
			c.r.tick(c.rng)
		}
		return true
	case out.res == resUnknown && !c.chance(0.3):
		return true // as the guard does: the call fails, nothing more is sent
	}
	// Hold the claim (or, after a lost answer, act as if) while the
	// guarded function runs.
	lease := rec.lease
	if c.chance(0.5) {
		time.Sleep(time.Duration(c.rng.Int64N(int64(2 * time.Millisecond))))
	}
	for c.chance(0.5) {
		if _, ok := c.maybeStall(ctx, key, tok, lease); !ok {
			return false
		}
		t := c.r.tick(c.rng)
		if lease != 0 || c.chance(0.2) {
			lease = t + c.ticks(5, 40)
		}
		exp := max(lease, t) + c.ticks(1, 60)
		if !c.fenced(ctx, input{kind: opExtend, key: key, token: tok, lease: lease, exp: exp}) {
			return false
		}
	}
	stalled, ok := c.maybeStall(ctx, key, tok, lease)
	if !ok {
		return false
	}
	t := c.r.tick(c.rng)
	// A holder that stalled is as likely to give the claim back (its
	// function failed) as to complete it.
	completes := 0.6
	if stalled {
		completes = 0.45
	}
	switch x := c.rng.Float64(); {
	case x < completes:
		done := mrec{status: store.StatusCompleted, token: tok, payload: rec.payload,
			kind: store.ResultKind(c.rng.IntN(3)), exp: t + c.ticks(30, 300)}
		if done.kind != store.ResultUnavailable {
			done.result = string(c.randBytes(c.rng.IntN(24)))
		}
		if c.chance(0.1) {
			done.lease = t + c.ticks(1, 10)
		}
		for i := 0; i == 0 || c.chance(0.15); i++ {
			if !c.fenced(ctx, input{kind: opComplete, key: key, token: tok, rec: done, retry: i > 0}) {
				return false
			}
		}
		if c.chance(0.1) {
			// A completed claim is never given back, even by its holder.
			return c.fenced(ctx, input{kind: opRelease, key: key, token: tok})
		}
	case x < 0.95:
		return c.fenced(ctx, input{kind: opRelease, key: key, token: tok})
	}
	// Or abandon it: the lease lapses.
	return true
}

// maybeStall, now and then, plays a holder that stops for longer than its
// lease (a GC pause, a stopped VM): the clock jumps past the lease, and the
// client waits while the others go on, until it sees another claim in
// progress on the key (it reads the record every millisecond or so) or
// about 20 ms have passed, so that its next write comes late, while the
// one who took the key over holds it, and must be fenced off. It reports
// whether it stalled, and false when the run is over.
func (c *client) maybeStall(ctx context.Context, key, tok string, lease int64) (stalled, ok bool) {
	if lease == 0 || !c.chance(c.r.cfg.stalls) {
		return false, true
	}
	for {
		t := c.r.clock.Load()
		if t > lease || c.r.clock.CompareAndSwap(t, lease+1) {
			break
		}
	}
	for range 20 {
		time.Sleep(time.Duration(200+c.rng.IntN(800)) * time.Microsecond)
		out, ok := c.get(ctx, key)
		if !ok {
			return true, false
		}
		if out.hasRec && out.rec.token != tok && out.rec.status == store.StatusInProgress {
			break
		}
	}
	return true, true
}

// fenced runs a Complete, Extend or Release, repeating it once in a while
// when its answer was lost. It returns false when the run is over.
func (c *client) fenced(ctx context.Context, in input) bool {
	h := c.r.h
	f := func(ctx context.Context) (*store.Record, error) {
		switch in.kind {
		case opComplete:
			return nil, c.r.s.Complete(ctx, h.record(in.rec, in.key))
		case opExtend:
			return nil, c.r.s.Extend(ctx, in.key, in.token, h.abs(in.lease), h.abs(in.exp))
		default:
			return nil, c.r.s.Release(ctx, in.key, in.token)
		}
	}
	out, ok := c.do(ctx, in, f)
	if ok && out.res == resUnknown && c.chance(0.5) {
		in.retry = true
		_, ok = c.do(ctx, in, f)
	}
	return ok
}
