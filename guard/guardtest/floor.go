package guardtest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/storetest"
)

// Counter counts the round trips a store's client makes: a request, a
// pipeline or a batch of statements counts one. A Counter that is also a
// [fmt.Stringer] says what was sent in [RunRequestFloor]'s failure
// messages, and can be held to it with [Sent].
type Counter interface {
	// Reset sets the count to zero.
	Reset()
	// Total returns the round trips counted since the last Reset.
	Total() int
}

// Sent holds the request floor's steps to the operations they send on a
// store, not just to their number: after each step, the Counter's String
// (the Counter must be a [fmt.Stringer]) must be what Sent says, for
// example FirstCall: "2 round trips: PutItem=1 UpdateItem=1". A step left
// empty is held to its count alone. The steps that repeat a first call (a
// first call through a caching guard, or shared by 1,000 duplicates) are
// held to what the first call sent, and a replay with a cold cache to what
// the replay sent.
type Sent struct {
	FirstCall     string // a first call
	Replay        string // its replay
	BatchFirstRun string // a batch of 100 new items
	BatchReplay   string // its replay
}

// step names a measured step of RunRequestFloor.
type step string

// The steps of RunRequestFloor that send something.
const (
	firstCall            step = "first call"
	replayCall           step = "replay"
	coldCacheReplay      step = "replay with a cold cache"
	cachedFirstCall      step = "first call through a caching guard"
	concurrentDuplicates step = "1,000 concurrent duplicates"
	batchFirstRun        step = "first run of a batch of 100 new items"
	batchReplay          step = "replay of a batch of 100 completed items"
)

type floorConfig struct {
	sent map[step]string // from Sent
	seen map[step]string // what each step that passed sent
}

// sameAs pairs a step with the one it must send the same as: a first call
// through a caching guard, or shared by 1,000 duplicates, is still a first
// call; a replay with a cold cache is still a replay.
var sameAs = map[step]step{
	cachedFirstCall:      firstCall,
	concurrentDuplicates: firstCall,
	coldCacheReplay:      replayCall,
}

// floorDuplicates is how many callers the concurrent case starts at once.
const floorDuplicates = 1000

// floorBatch is how many items the batch case holds.
const floorBatch = 100

// RunRequestFloor holds the guard, over the stores newStore makes, to its
// round-trip floor, counting with n the round trips of the client those
// stores share:
//
//   - a first call costs 2 (the claim and the completion), its replay 1
//     (the claim, which finds the completed record);
//   - through a guard with [guard.WithCache], a replay costs 1 while the
//     cache is cold, then 0; a first call costs 2, then its replay 0;
//   - 1,000 concurrent duplicates in one process, waiting ([guard.WithWait])
//     rather than rejected, cost what one call does: 2;
//   - a [guard.DoBatch] of 100 new items costs one bulk lookup
//     ([store.BatchGetter]), then a claim and a completion per item: 201;
//     its replay costs the bulk lookup alone: 1.
//
// sent holds the steps to the operations they send (see [Sent]). Each
// case runs on a fresh store; n is reset before each measured step, after
// the store is made, so what making it sends does not count.
func RunRequestFloor(t *testing.T, newStore storetest.MakeStore, n Counter, sent Sent) {
	cfg := &floorConfig{sent: map[step]string{}, seen: map[step]string{}}
	for st, want := range map[step]string{firstCall: sent.FirstCall, replayCall: sent.Replay, batchFirstRun: sent.BatchFirstRun, batchReplay: sent.BatchReplay} {
		if want != "" {
			cfg.sent[st] = want
		}
	}
	if _, ok := n.(fmt.Stringer); !ok && len(cfg.sent) > 0 {
		t.Fatalf("Sent needs a Counter that is a fmt.Stringer; %T is not", n)
	}
	runCases(t, func(ctx context.Context, t *testing.T) *floor {
		return &floor{s: newStore(t), n: n, cfg: cfg, ctx: ctx}
	}, []testCase[*floor]{
		{"FirstCallAndReplay", floorFirstCall},
		{"CachedReplay", floorCachedReplay},
		{"CachedFirstCall", floorCachedFirstCall},
		{"ConcurrentDuplicates", floorConcurrent},
		{"Batch", floorBatchCase},
	})
}

// testCase is a case of a suite whose fixture is F.
type testCase[F any] struct {
	name string
	fn   func(t *testing.T, f F)
}

// runCases runs each case as a subtest, with a fresh fixture and a
// context that ends after two minutes.
func runCases[F any](t *testing.T, fixture func(ctx context.Context, t *testing.T) F, cases []testCase[F]) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			c.fn(t, fixture(ctx, t))
		})
	}
}

// floor is one case of RunRequestFloor: a fresh store, the counter, and
// the runs of the guarded function.
type floor struct {
	s    store.Store
	n    Counter
	cfg  *floorConfig
	ctx  context.Context
	runs atomic.Int32
}

// sent describes what n counted: its String, or the bare count.
func sent(n Counter) string {
	if s, ok := n.(fmt.Stringer); ok {
		return s.String()
	}
	return roundTrips(n.Total())
}

// check fails the test if st sent other than want round trips (why says
// which), or, with a Counter that describes itself, other than Sent says or
// than the step it must send the same as ([sameAs]) sent when that one
// passed.
func (f *floor) check(t *testing.T, st step, want int, why string) {
	t.Helper()
	got := sent(f.n)
	w, pinned := f.cfg.sent[st]
	if ref, ok := sameAs[st]; ok && !pinned {
		if w, pinned = f.cfg.seen[ref]; pinned {
			why += ", as the " + string(ref) + " sent"
		}
	}
	switch {
	case f.n.Total() == want && (!pinned || got == w):
		if _, ok := f.n.(fmt.Stringer); ok {
			f.cfg.seen[st] = got
		}
	case pinned:
		t.Errorf("%s sent %s; want %s (%s)", st, got, w, why)
	default:
		t.Errorf("%s sent %s; want %s (%s)", st, got, roundTrips(want), why)
	}
}

func roundTrips(n int) string {
	if n == 1 {
		return "1 round trip"
	}
	return fmt.Sprintf("%d round trips", n)
}

// checkRuns fails the test unless the guarded function ran want times in
// all.
func (f *floor) checkRuns(t *testing.T, want int32, after string) {
	t.Helper()
	if got := f.runs.Load(); got != want {
		t.Fatalf("after %s the function ran %d times, want %d", after, got, want)
	}
}

func (f *floor) newGuard(t *testing.T, opts ...guard.Option) *guard.Guard {
	t.Helper()
	g, err := guard.New(f.s, opts...)
	if err != nil {
		t.Fatalf("guard.New: %v", err)
	}
	return g
}

// call resets the counter and charges order through g, failing the test
// unless it returns order's charge.
func (f *floor) call(t *testing.T, g *guard.Guard, order int) {
	t.Helper()
	f.n.Reset()
	want := fmt.Sprintf("ch_%d", order)
	v, err := guard.Do(f.ctx, g, "charge", map[string]any{"order": order, "amount": 4200}, func(context.Context) (string, error) {
		f.runs.Add(1)
		return want, nil
	})
	if err != nil || v != want {
		t.Fatalf("Do(order %d) = %q, %v; want %q", order, v, err, want)
	}
}

func floorFirstCall(t *testing.T, f *floor) {
	g := f.newGuard(t)
	f.call(t, g, 1)
	f.checkRuns(t, 1, "the first call")
	f.check(t, firstCall, 2, "the claim and the completion")
	f.call(t, g, 1)
	f.checkRuns(t, 1, "the replay")
	f.check(t, replayCall, 1, "the claim, which finds the completed record")
}

func floorCachedReplay(t *testing.T, f *floor) {
	f.call(t, f.newGuard(t), 1)
	cached := f.newGuard(t, guard.WithCache(64, 0))
	f.call(t, cached, 1)
	f.check(t, coldCacheReplay, 1, "the claim, which fills the cache")
	for i := range 3 {
		f.call(t, cached, 1)
		if got := f.n.Total(); got != 0 {
			t.Errorf("cached replay %d sent %s; want none", i, sent(f.n))
		}
	}
	f.checkRuns(t, 1, "the replays")
}

func floorCachedFirstCall(t *testing.T, f *floor) {
	cached := f.newGuard(t, guard.WithCache(64, 0))
	f.call(t, cached, 2)
	f.check(t, cachedFirstCall, 2, "the claim and the completion")
	f.call(t, cached, 2)
	if got := f.n.Total(); got != 0 {
		t.Errorf("replay of a call this guard completed sent %s; want none", sent(f.n))
	}
	f.checkRuns(t, 1, "the first call and its replay")
}

func floorConcurrent(t *testing.T, f *floor) {
	// Waiting duplicates share the one execution; in the default Reject
	// mode they would get ErrInProgress instead.
	g := f.newGuard(t, guard.WithWait(30*time.Second))
	release := make(chan struct{})
	body := func(context.Context) (int, error) {
		f.runs.Add(1)
		<-release
		return 42, nil
	}
	f.n.Reset()
	var (
		wg           sync.WaitGroup
		entered, bad atomic.Int32
		firstBad     atomic.Value // the first wrong answer
		start        = make(chan struct{})
		input        = map[string]string{"day": "2030-01-01"}
	)
	for range floorDuplicates {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			entered.Add(1)
			v, err := guard.Do(f.ctx, g, "report", input, body)
			if err != nil || v != 42 {
				bad.Add(1)
				firstBad.CompareAndSwap(nil, fmt.Sprintf("%d, %v", v, err))
			}
		}()
	}
	close(start)
	// Let every caller reach the one execution before it finishes: one
	// that came after would replay, a round trip more.
	for entered.Load() < floorDuplicates {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(time.Second)
	close(release)
	wg.Wait()
	if b := bad.Load(); b != 0 {
		t.Errorf("%d of %d callers did not get 42, the first: %v", b, floorDuplicates, firstBad.Load())
	}
	f.checkRuns(t, 1, fmt.Sprintf("%d concurrent duplicates", floorDuplicates))
	f.check(t, concurrentDuplicates, 2, "those of one call: the claim and the completion")
}

// floorItem is an item of the batch case.
type floorItem struct {
	ID string `json:"id"`
	N  int    `json:"n"`
}

func floorBatchCase(t *testing.T, f *floor) {
	if _, ok := f.s.(store.BatchGetter); !ok {
		t.Fatalf("%T does not implement store.BatchGetter: a batch would claim its items one by one", f.s)
	}
	g := f.newGuard(t)
	in := make([]floorItem, floorBatch)
	for i := range in {
		in[i] = floorItem{ID: fmt.Sprintf("item-%03d", i), N: i}
	}
	fn := func(_ context.Context, it floorItem) (string, error) {
		f.runs.Add(1)
		return "done-" + it.ID, nil
	}
	batch := func(want guard.Outcome) {
		t.Helper()
		f.n.Reset()
		for i, r := range guard.DoBatch(f.ctx, g, "send", in, fn) {
			if r.Err != nil || r.Value != "done-"+in[i].ID || r.Outcome != want {
				t.Fatalf("item %d = %q, %v, %v; want %q, %v", i, r.Value, r.Outcome, r.Err, "done-"+in[i].ID, want)
			}
		}
	}
	batch(guard.OutcomeExecuted)
	f.checkRuns(t, floorBatch, "the first run")
	f.check(t, batchFirstRun, 1+2*floorBatch, "the bulk lookup, then a claim and a completion per item")
	batch(guard.OutcomeReplayed)
	f.checkRuns(t, floorBatch, "the replay")
	f.check(t, batchReplay, 1, "the bulk lookup alone")
}
