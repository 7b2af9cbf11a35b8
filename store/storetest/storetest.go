// Package storetest is the conformance suite for [store.Store]
// implementations: every store runs the same tests of the contract in package
// store.
//
// Call [Run] from a test in the store's package, with a function that returns
// a fresh, empty store (its own table or key space) for each subtest. The
// suite is best run under the race detector (go test -race); its claim races
// are written for it.
//
// Run also tests the optional interfaces of package store that the store
// implements, probed with a type assertion as the guard probes them. For an
// interface the store does not implement, the subtest named after it
// (BatchGetter, Admin, Purger, KeyLimiter, Watcher) is skipped with a message that
// says so. A [store.KeyLimiter] is held to its word where that is cheap: a
// key of exactly the length it states, which does not compress, goes
// through every method.
//
// A [store.Watcher] is held to its ordering rule (a caller that watches,
// then reads a claim still in progress, is notified of its completion),
// to its sharing (with [WithWatchProbe]: many watches of a key, one server
// subscription) and to its losses (with the probe: a connection dropped
// by the server ends every watch with [store.ErrWatchLost], and the store
// subscribes again); once every watch is stopped, its goroutines must end.
// Given [WithNewerFormat], a way to mark a stored record as written in a
// newer format than the store reads, Run checks the store's answer to
// such records (subtest NewerFormat); without it that subtest is skipped.
//
// # Linearizability
//
// [RunLinearizable] checks a store's histories instead of chosen cases: it
// drives the store with concurrent clients on a few hot keys, at times of
// a logical clock it moves on so that leases lapse and records expire
// within the run, records every operation with its call and return times,
// and checks the history with Porcupine against a sequential model of the
// contract for one key, where an operation whose answer was lost counts as
// possibly applied. Put the store behind a fault proxy to check it under
// delays, lost answers and cut connections. A history that is not
// linearizable is reported with Porcupine's visualisation, written to a
// file the failure names (in the directory IDEMGUARD_LINZ_DIR names, or
// the system's temporary directory), and its minimal failing operations.
package storetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemguard/idemguard/internal/testing/linz"
	"github.com/idemguard/idemguard/store"
)

// MakeStore returns a fresh, empty store for one subtest. It registers any
// cleanup with t.Cleanup.
type MakeStore func(t *testing.T) store.Store

// Option adjusts the suites to what a store can do.
type Option func(*config)

type config struct {
	tooLarge   int
	precision  linz.Precision
	ops        int
	faults     float64
	watchProbe *WatchProbe
	markFormat func(t *testing.T, s store.Store, key string, format int)
}

func newConfig(opts []Option) config {
	var c config
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	return c
}

// WithTooLarge tells [Run] that the store refuses a record whose Result
// is n incompressible bytes with [store.ErrTooLarge]; the suite then checks
// that refusal and that nothing was written. Stores without a size limit
// leave it out.
func WithTooLarge(n int) Option { return func(c *config) { c.tooLarge = n } }

// WithPrecision tells [RunLinearizable] how finely the store keeps a
// record's times, as the store contract allows: ExpiresAt rounded up,
// never down, to a multiple of expiry, and LeaseExpiresAt to within lease
// (a second and a millisecond for DynamoDB and Redis, a microsecond each
// for PostgreSQL). The checker then accepts either answer inside those
// windows. Both must divide a second. Without it the store must keep times
// exactly, as the memory store does.
func WithPrecision(expiry, lease time.Duration) Option {
	return func(c *config) { c.precision = linz.Precision{Expiry: expiry, Lease: lease} }
}

// WithOps sets about how many operations [RunLinearizable] records
// (default 1,500), within a minute at most.
func WithOps(n int) Option { return func(c *config) { c.ops = n } }

// WithFaults makes [RunLinearizable] fault a share of the operations
// itself, on top of whatever the store's connection does: a third fail
// before reaching the store, a third lose their answer after it ran, a
// third are delayed. For a store with no connection to put a fault proxy
// in front of, such as one kept in memory.
func WithFaults(rate float64) Option { return func(c *config) { c.faults = rate } }

// opTimeout bounds every store call, so a hung store fails its test instead
// of hanging the run.
const opTimeout = 30 * time.Second

// Run runs the conformance suite against the stores newStore makes.
func Run(t *testing.T, newStore MakeStore, opts ...Option) {
	cfg := newConfig(opts)
	tests := []struct {
		name string
		fn   func(t *testing.T, h *harness)
	}{
		{"AcquireNew", testAcquireNew},
		{"ConflictReturnsExisting", testConflictReturnsExisting},
		{"ConflictWithCompleted", testConflictWithCompleted},
		{"ExpiredRecordReplaced", testExpiredRecordReplaced},
		{"LeaseTakeoverFencesOldHolder", testLeaseTakeover},
		{"TakeoverReported", testTakeoverReported},
		{"ClaimRaceOverLapsed", testClaimRaceOverLapsed},
		{"ZeroLeaseHoldsUntilExpiry", testZeroLease},
		{"ClaimRace", testClaimRace},
		{"ClaimRaceFreshKeys", testClaimRaceFreshKeys},
		{"ClaimRaceOverExpired", testClaimRaceOverExpired},
		{"CompleteFenced", testCompleteFenced},
		{"ExtendFenced", testExtendFenced},
		{"ReleaseFenced", testReleaseFenced},
		{"ReleaseLeavesCompleted", testReleaseLeavesCompleted},
		{"CompleteAgainUnderSameToken", testCompleteAgain},
		{"ResultRoundTrip", testResultRoundTrip},
		{"ResultKinds", testResultKinds},
		{"NotFound", testNotFound},
		{"KeysIndependent", testKeysIndependent},
		{"ContextCancelled", testContextCancelled},
		{"CompletedUnderSameToken", testCompletedUnderSameToken},
		{"InProgressUnderSameToken", testInProgressUnderSameToken},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.fn(t, newHarness(t, newStore(t)))
		})
	}
	if cfg.tooLarge > 0 {
		t.Run("TooLarge", func(t *testing.T) {
			testTooLarge(t, newHarness(t, newStore(t)), cfg.tooLarge)
		})
	}
	runBatchGetter(t, newStore, cfg)
	runAdmin(t, newStore)
	runPurger(t, newStore)
	runKeyLimiter(t, newStore)
	runWatcher(t, newStore, cfg)
	runNewerFormat(t, newStore, cfg)
}

type harness struct {
	s   store.Store
	ctx context.Context
	// t0 is a base time a day ahead, on a whole second, so that stores with a
	// TTL sweeper never delete the suite's records and coarse time
	// precisions round-trip exactly.
	t0 time.Time
}

func newHarness(t *testing.T, s store.Store) *harness {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	t.Cleanup(cancel)
	return &harness{s: s, ctx: ctx, t0: time.Now().Truncate(time.Second).Add(24 * time.Hour)}
}

var tokenSeq struct {
	sync.Mutex
	n int
}

func newToken() string {
	tokenSeq.Lock()
	defer tokenSeq.Unlock()
	tokenSeq.n++
	return fmt.Sprintf("tok-%d-%d", time.Now().UnixNano(), tokenSeq.n)
}

// claim builds an in-progress record for key with a lease of lease and a
// life of one hour from h.t0.
func (h *harness) claim(key string, lease time.Duration) *store.Record {
	r := &store.Record{
		Key:         key,
		Status:      store.StatusInProgress,
		Token:       newToken(),
		PayloadHash: "ph-" + key,
		ExpiresAt:   h.t0.Add(time.Hour),
	}
	if lease > 0 {
		r.LeaseExpiresAt = h.t0.Add(lease)
	}
	return r
}

// mustAcquire claims rec at now, where no in-progress record with a
// lapsed lease is in the way: Acquire must succeed and report no takeover.
func (h *harness) mustAcquire(t *testing.T, rec *store.Record, now time.Time) {
	t.Helper()
	old, err := h.s.Acquire(h.ctx, rec, now)
	if err != nil || old != nil {
		t.Fatalf("Acquire(%q) at t0%+v = %+v, %v; want success, and no record replaced", rec.Key, now.Sub(h.t0), old, err)
	}
}

// mustTakeOver claims rec at now over the in-progress record want, whose
// lease has lapsed: Acquire must succeed and return want, the record it
// replaced.
func (h *harness) mustTakeOver(t *testing.T, rec, want *store.Record, now time.Time) {
	t.Helper()
	old, err := h.s.Acquire(h.ctx, rec, now)
	switch {
	case err != nil:
		t.Fatalf("Acquire(%q) over a lapsed claim at t0%+v = %v; want success", rec.Key, now.Sub(h.t0), err)
	case old == nil:
		t.Errorf("Acquire(%q) over a lapsed claim at t0%+v returned no record; want the claim it replaced (token %q)", rec.Key, now.Sub(h.t0), want.Token)
	default:
		if d := sameRecord(old, want); d != "" {
			t.Errorf("Acquire(%q) over a lapsed claim returned a record that differs from the one replaced: %s", rec.Key, d)
		}
	}
}

func (h *harness) mustComplete(t *testing.T, rec *store.Record, result []byte) *store.Record {
	t.Helper()
	done := *rec
	done.Status = store.StatusCompleted
	done.Result = result
	done.ExpiresAt = h.t0.Add(2 * time.Hour)
	if err := h.s.Complete(h.ctx, &done); err != nil {
		t.Fatalf("Complete(%q) = %v", rec.Key, err)
	}
	return &done
}

func (h *harness) mustGet(t *testing.T, key string) *store.Record {
	t.Helper()
	r, err := h.s.Get(h.ctx, key)
	if err != nil {
		t.Fatalf("Get(%q) = %v", key, err)
	}
	return r
}

func (h *harness) conflict(t *testing.T, rec *store.Record, now time.Time) *store.Record {
	t.Helper()
	old, err := h.s.Acquire(h.ctx, rec, now)
	if !errors.Is(err, store.ErrConflict) {
		t.Fatalf("Acquire(%q) at t0%+v = %v; want ErrConflict", rec.Key, now.Sub(h.t0), err)
	}
	if old == nil {
		t.Fatalf("Acquire(%q) conflict returned no record", rec.Key)
	}
	return old
}

// sameRecord reports how got differs from want, or "" if it does not.
func sameRecord(got, want *store.Record) string {
	var diffs []string
	if got.Key != want.Key {
		diffs = append(diffs, fmt.Sprintf("Key %q, want %q", got.Key, want.Key))
	}
	if got.Status != want.Status {
		diffs = append(diffs, fmt.Sprintf("Status %v, want %v", got.Status, want.Status))
	}
	if got.Token != want.Token {
		diffs = append(diffs, fmt.Sprintf("Token %q, want %q", got.Token, want.Token))
	}
	if got.PayloadHash != want.PayloadHash {
		diffs = append(diffs, fmt.Sprintf("PayloadHash %q, want %q", got.PayloadHash, want.PayloadHash))
	}
	if got.ResultKind != want.ResultKind {
		diffs = append(diffs, fmt.Sprintf("ResultKind %v, want %v", got.ResultKind, want.ResultKind))
	}
	if !bytes.Equal(got.Result, want.Result) {
		diffs = append(diffs, fmt.Sprintf("Result %d bytes %.40q, want %d bytes %.40q", len(got.Result), got.Result, len(want.Result), want.Result))
	}
	if !got.ExpiresAt.Equal(want.ExpiresAt) {
		diffs = append(diffs, fmt.Sprintf("ExpiresAt %v, want %v", got.ExpiresAt, want.ExpiresAt))
	}
	if !got.LeaseExpiresAt.Equal(want.LeaseExpiresAt) {
		diffs = append(diffs, fmt.Sprintf("LeaseExpiresAt %v, want %v", got.LeaseExpiresAt, want.LeaseExpiresAt))
	}
	if len(diffs) == 0 {
		return ""
	}
	return fmt.Sprint(diffs)
}

func testAcquireNew(t *testing.T, h *harness) {
	rec := h.claim("scope#acquire-new", 30*time.Second)
	h.mustAcquire(t, rec, h.t0)
	if d := sameRecord(h.mustGet(t, rec.Key), rec); d != "" {
		t.Errorf("stored record differs: %s", d)
	}
}

func testConflictReturnsExisting(t *testing.T, h *harness) {
	first := h.claim("scope#conflict", 30*time.Second)
	h.mustAcquire(t, first, h.t0)
	second := h.claim(first.Key, 30*time.Second)
	second.PayloadHash = "other"
	old := h.conflict(t, second, h.t0.Add(time.Second))
	if d := sameRecord(old, first); d != "" {
		t.Errorf("conflict record differs from the holder's: %s", d)
	}
	if got := h.mustGet(t, first.Key); got.Token != first.Token {
		t.Errorf("after a conflict the stored token is %q, want the holder's %q", got.Token, first.Token)
	}
}

func testConflictWithCompleted(t *testing.T, h *harness) {
	rec := h.claim("scope#completed", 30*time.Second)
	h.mustAcquire(t, rec, h.t0)
	done := h.mustComplete(t, rec, []byte(`{"charge":"ch_1"}`))
	// Long after the lease, before the record's expiry: still replayed.
	old := h.conflict(t, h.claim(rec.Key, time.Minute), h.t0.Add(90*time.Minute))
	if d := sameRecord(old, done); d != "" {
		t.Errorf("conflict record differs from the completed one: %s", d)
	}
}

func testExpiredRecordReplaced(t *testing.T, h *harness) {
	rec := h.claim("scope#expired", 30*time.Second)
	h.mustAcquire(t, rec, h.t0)
	h.mustComplete(t, rec, []byte(`1`)) // expires at t0+2h
	h.conflict(t, h.claim(rec.Key, time.Minute), h.t0.Add(2*time.Hour-time.Second))
	next := h.claim(rec.Key, time.Minute)
	next.ExpiresAt = h.t0.Add(3 * time.Hour)
	h.mustAcquire(t, next, h.t0.Add(2*time.Hour))
	if d := sameRecord(h.mustGet(t, rec.Key), next); d != "" {
		t.Errorf("replacing record differs: %s", d)
	}
}

func testLeaseTakeover(t *testing.T, h *harness) {
	zombie := h.claim("scope#takeover", 10*time.Second)
	h.mustAcquire(t, zombie, h.t0)
	h.conflict(t, h.claim(zombie.Key, time.Minute), h.t0.Add(9*time.Second))

	holder := h.claim(zombie.Key, time.Minute)
	h.mustTakeOver(t, holder, zombie, h.t0.Add(10*time.Second))

	late := *zombie
	late.Status = store.StatusCompleted
	late.Result = []byte(`"zombie"`)
	if err := h.s.Complete(h.ctx, &late); !errors.Is(err, store.ErrTokenMismatch) {
		t.Errorf("zombie Complete = %v, want ErrTokenMismatch", err)
	}
	if err := h.s.Extend(h.ctx, zombie.Key, zombie.Token, h.t0.Add(time.Hour), h.t0.Add(time.Hour)); !errors.Is(err, store.ErrTokenMismatch) {
		t.Errorf("zombie Extend = %v, want ErrTokenMismatch", err)
	}
	if err := h.s.Release(h.ctx, zombie.Key, zombie.Token); !errors.Is(err, store.ErrTokenMismatch) {
		t.Errorf("zombie Release = %v, want ErrTokenMismatch", err)
	}
	if d := sameRecord(h.mustGet(t, zombie.Key), holder); d != "" {
		t.Errorf("the zombie's calls changed the new holder's record: %s", d)
	}
	done := h.mustComplete(t, holder, []byte(`"holder"`))
	if d := sameRecord(h.conflict(t, h.claim(zombie.Key, time.Minute), h.t0.Add(time.Minute)), done); d != "" {
		t.Errorf("replayed record is not the new holder's: %s", d)
	}
}

// testTakeoverReported: an Acquire that replaces an in-progress record
// whose lease lapsed (its holder crashed, hung or lost the store) returns
// that record with a nil error, so that the caller can count a stuck claim
// taken over. A claim on a fresh key, over an expired record (completed or
// in progress, with or without a lease) or after a release replaced no
// claim and returns (nil, nil).
func testTakeoverReported(t *testing.T, h *harness) {
	h.mustAcquire(t, h.claim("scope#takeover-fresh", time.Minute), h.t0)

	zombie := h.claim("scope#takeover-lapsed", 10*time.Second)
	h.mustAcquire(t, zombie, h.t0)
	taker := h.claim(zombie.Key, 10*time.Second)
	taker.LeaseExpiresAt = h.t0.Add(30 * time.Second)
	h.mustTakeOver(t, taker, zombie, h.t0.Add(10*time.Second))
	if d := sameRecord(h.mustGet(t, zombie.Key), taker); d != "" {
		t.Errorf("after the takeover the stored record differs from the taker's: %s", d)
	}
	// The taker dies too: the next claim replaces, and reports, the taker's.
	h.mustTakeOver(t, h.claim(zombie.Key, time.Minute), taker, h.t0.Add(31*time.Second))

	// An in-progress record past its expiry is expired, not a lapsed claim:
	// nothing to report, whether it had a lease or not.
	for _, lease := range []time.Duration{10 * time.Second, 0} {
		old := h.claim(fmt.Sprintf("scope#takeover-expired-%v", lease), lease)
		h.mustAcquire(t, old, h.t0)
		h.mustAcquire(t, h.claim(old.Key, time.Minute), old.ExpiresAt)
	}

	// Over a completed record that expired: not a takeover.
	done := h.claim("scope#takeover-completed", 10*time.Second)
	h.mustAcquire(t, done, h.t0)
	h.mustComplete(t, done, []byte(`1`)) // expires at t0+2h
	h.mustAcquire(t, h.claim(done.Key, time.Minute), h.t0.Add(2*time.Hour))

	// After a release the key is free: not a takeover either.
	released := h.claim("scope#takeover-released", 10*time.Second)
	h.mustAcquire(t, released, h.t0)
	if err := h.s.Release(h.ctx, released.Key, released.Token); err != nil {
		t.Fatalf("Release = %v", err)
	}
	h.mustAcquire(t, h.claim(released.Key, time.Minute), h.t0.Add(20*time.Second))
}

// testClaimRaceOverLapsed races claims on keys held by a claim whose lease
// lapsed: one claim takes it over and reports the record it replaced, in
// the same atomic step as its write; the losers see the winner's claim.
func testClaimRaceOverLapsed(t *testing.T, h *harness) {
	for r := range raceRounds {
		key := fmt.Sprintf("scope#race-lapsed-%d", r)
		zombie := h.claim(key, 10*time.Second)
		h.mustAcquire(t, zombie, h.t0)
		at := h.t0.Add(10 * time.Second)
		_, replaced := h.raceReport(t, key, at, raceClaimants, func() *store.Record {
			rec := h.claim(key, time.Minute)
			rec.LeaseExpiresAt = at.Add(time.Minute)
			return rec
		})
		if replaced == nil {
			t.Errorf("%s: the winner took over a lapsed claim and returned no record", key)
		} else if d := sameRecord(replaced, zombie); d != "" {
			t.Errorf("%s: the winner reported a record that differs from the lapsed claim: %s", key, d)
		}
	}
}

func testZeroLease(t *testing.T, h *harness) {
	rec := h.claim("scope#zero-lease", 0)
	h.mustAcquire(t, rec, h.t0)
	h.conflict(t, h.claim(rec.Key, time.Minute), h.t0.Add(59*time.Minute))
	h.mustAcquire(t, h.claim(rec.Key, time.Minute), h.t0.Add(time.Hour))
}

func testClaimRace(t *testing.T, h *harness) {
	key := "scope#race"
	winner := h.race(t, key, h.t0, 32, func() *store.Record { return h.claim(key, time.Minute) })
	if got := h.mustGet(t, key); got.Token != winner.Token {
		t.Errorf("stored token %q, want the winner's %q", got.Token, winner.Token)
	}
}

// raceRounds and raceClaimants size the repeated claim races: a store
// that reads the record it lost to from a snapshot older than the
// winner's write (PostgreSQL's INSERT … ON CONFLICT with a read in the
// same statement) loses that record in some rounds only, so the races run
// many times, each on its own key.
const (
	raceRounds    = 25
	raceClaimants = 12
)

// race runs n concurrent Acquires of key at now, records built by mk,
// checks that exactly one won and that every other one got ErrConflict
// with the winner's record, and returns the winner's record. Nothing
// deletes the winner's record during the race, so a loser with a nil
// record is a store that could not read the record it lost to.
func (h *harness) race(t *testing.T, key string, now time.Time, n int, mk func() *store.Record) *store.Record {
	t.Helper()
	rec, replaced := h.raceReport(t, key, now, n, mk)
	if replaced != nil {
		t.Errorf("%s: the winner's Acquire returned a record it replaced (token %q, status %v); no lapsed claim was there", key, replaced.Token, replaced.Status)
	}
	return rec
}

// raceReport is race, and returns also what the winner's Acquire returned:
// the record its claim replaced, if it took a lapsed claim over.
func (h *harness) raceReport(t *testing.T, key string, now time.Time, n int, mk func() *store.Record) (winner, replaced *store.Record) {
	t.Helper()
	recs := make([]*store.Record, n)
	for i := range recs {
		recs[i] = mk()
	}
	olds := make([]*store.Record, len(recs))
	errs := make([]error, len(recs))
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range recs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			olds[i], errs[i] = h.s.Acquire(h.ctx, recs[i], now)
		}()
	}
	close(start)
	wg.Wait()
	won := -1
	for i, err := range errs {
		switch {
		case err == nil && won >= 0:
			t.Fatalf("%s: two winners, claims %d and %d", key, won, i)
		case err == nil:
			won = i
		case !errors.Is(err, store.ErrConflict):
			t.Fatalf("%s: claim %d: %v, want nil or ErrConflict", key, i, err)
		}
	}
	if won < 0 {
		t.Fatalf("%s: no claim won", key)
	}
	for i, old := range olds {
		switch {
		case i == won:
		case old == nil:
			t.Errorf("%s: claim %d lost with no record; want the winner's", key, i)
		case old.Token != recs[won].Token:
			t.Errorf("%s: claim %d lost to token %q, want the winner's %q (status %v, expires t0%+v)",
				key, i, old.Token, recs[won].Token, old.Status, old.ExpiresAt.Sub(h.t0))
		}
	}
	return recs[won], olds[won]
}

// testClaimRaceFreshKeys races claims on keys that have no record: the
// losers must see the record the winner has just written.
func testClaimRaceFreshKeys(t *testing.T, h *harness) {
	for r := range raceRounds {
		key := fmt.Sprintf("scope#race-fresh-%d", r)
		h.race(t, key, h.t0, raceClaimants, func() *store.Record { return h.claim(key, time.Minute) })
	}
}

// testClaimRaceOverExpired races claims on keys whose record has expired:
// one claim replaces it, and the losers must see the replacement, never
// the expired record.
func testClaimRaceOverExpired(t *testing.T, h *harness) {
	for r := range raceRounds {
		key := fmt.Sprintf("scope#race-expired-%d", r)
		old := h.claim(key, time.Minute)
		h.mustAcquire(t, old, h.t0)
		h.mustComplete(t, old, []byte(`"expired"`)) // expires at t0+2h
		at := h.t0.Add(2 * time.Hour)
		h.race(t, key, at, raceClaimants, func() *store.Record {
			rec := h.claim(key, time.Minute)
			rec.ExpiresAt, rec.LeaseExpiresAt = at.Add(time.Hour), at.Add(time.Minute)
			return rec
		})
	}
}

func testCompleteFenced(t *testing.T, h *harness) {
	rec := h.claim("scope#complete-fenced", time.Minute)
	h.mustAcquire(t, rec, h.t0)
	stale := *rec
	stale.Token = "not-the-token"
	stale.Status = store.StatusCompleted
	stale.Result = []byte(`"stale"`)
	if err := h.s.Complete(h.ctx, &stale); !errors.Is(err, store.ErrTokenMismatch) {
		t.Errorf("Complete with a stale token = %v, want ErrTokenMismatch", err)
	}
	if d := sameRecord(h.mustGet(t, rec.Key), rec); d != "" {
		t.Errorf("a fenced Complete changed the record: %s", d)
	}
	absent := h.claim("scope#complete-absent", time.Minute)
	absent.Status = store.StatusCompleted
	if err := h.s.Complete(h.ctx, absent); !errors.Is(err, store.ErrTokenMismatch) {
		t.Errorf("Complete of an absent record = %v, want ErrTokenMismatch", err)
	}
	if _, err := h.s.Get(h.ctx, absent.Key); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Complete of an absent record created it: Get = %v", err)
	}
	// Completing after the lease lapsed, while nobody took over, still works:
	// the token is what fences, not the clock.
	done := h.mustComplete(t, rec, []byte(`"late but ours"`))
	if d := sameRecord(h.mustGet(t, rec.Key), done); d != "" {
		t.Errorf("completed record differs: %s", d)
	}
}

func testExtendFenced(t *testing.T, h *harness) {
	rec := h.claim("scope#extend", 10*time.Second)
	h.mustAcquire(t, rec, h.t0)
	newLease, newExpiry := h.t0.Add(40*time.Second), h.t0.Add(3*time.Hour)
	if err := h.s.Extend(h.ctx, rec.Key, rec.Token, newLease, newExpiry); err != nil {
		t.Fatalf("Extend = %v", err)
	}
	got := h.mustGet(t, rec.Key)
	if !got.LeaseExpiresAt.Equal(newLease) || !got.ExpiresAt.Equal(newExpiry) {
		t.Errorf("after Extend lease %v expiry %v, want %v %v", got.LeaseExpiresAt, got.ExpiresAt, newLease, newExpiry)
	}
	// The extended lease blocks a claim that the old one would have allowed.
	h.conflict(t, h.claim(rec.Key, time.Minute), h.t0.Add(20*time.Second))
	if err := h.s.Extend(h.ctx, rec.Key, "not-the-token", h.t0.Add(time.Hour), h.t0.Add(time.Hour)); !errors.Is(err, store.ErrTokenMismatch) {
		t.Errorf("Extend with a stale token = %v, want ErrTokenMismatch", err)
	}
	if err := h.s.Extend(h.ctx, "scope#extend-absent", "t", h.t0.Add(time.Hour), h.t0.Add(time.Hour)); !errors.Is(err, store.ErrTokenMismatch) {
		t.Errorf("Extend of an absent record = %v, want ErrTokenMismatch", err)
	}
	if _, err := h.s.Get(h.ctx, "scope#extend-absent"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Extend of an absent record created it: Get = %v", err)
	}
	done := h.mustComplete(t, rec, []byte(`1`))
	if err := h.s.Extend(h.ctx, rec.Key, rec.Token, h.t0.Add(time.Hour), h.t0.Add(time.Hour)); !errors.Is(err, store.ErrTokenMismatch) {
		t.Errorf("Extend of a completed record = %v, want ErrTokenMismatch", err)
	}
	if d := sameRecord(h.mustGet(t, rec.Key), done); d != "" {
		t.Errorf("Extend changed a completed record: %s", d)
	}
}

func testReleaseFenced(t *testing.T, h *harness) {
	rec := h.claim("scope#release", time.Minute)
	h.mustAcquire(t, rec, h.t0)
	if err := h.s.Release(h.ctx, rec.Key, "not-the-token"); !errors.Is(err, store.ErrTokenMismatch) {
		t.Errorf("Release with a stale token = %v, want ErrTokenMismatch", err)
	}
	h.mustGet(t, rec.Key)
	if err := h.s.Release(h.ctx, rec.Key, rec.Token); err != nil {
		t.Fatalf("Release = %v", err)
	}
	if _, err := h.s.Get(h.ctx, rec.Key); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("after Release, Get = %v, want ErrNotFound", err)
	}
	if err := h.s.Release(h.ctx, rec.Key, rec.Token); !errors.Is(err, store.ErrTokenMismatch) {
		t.Errorf("second Release = %v, want ErrTokenMismatch", err)
	}
	// Released: the next caller acquires at once, well inside the old lease.
	h.mustAcquire(t, h.claim(rec.Key, time.Minute), h.t0.Add(time.Second))
}

func testResultRoundTrip(t *testing.T, h *harness) {
	binary := make([]byte, 256)
	for i := range binary {
		binary[i] = byte(i)
	}
	large := make([]byte, 256<<10)
	rand.Read(large)
	cases := []struct {
		name   string
		result []byte
	}{
		{"empty", []byte{}},
		{"json", []byte(`{"amount":4200,"currency":"EUR","note":"caf\u00e9 ☕"}`)},
		{"json-string", []byte(`"ch_3NqF"`)},
		{"text-not-json", []byte("plain text, not JSON")},
		{"binary", binary},
		{"large-incompressible", large},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec := h.claim("scope#result-"+c.name, time.Minute)
			h.mustAcquire(t, rec, h.t0)
			h.mustComplete(t, rec, c.result)
			for _, got := range []*store.Record{h.mustGet(t, rec.Key), h.conflict(t, h.claim(rec.Key, time.Minute), h.t0)} {
				if !bytes.Equal(got.Result, c.result) {
					t.Errorf("Result = %d bytes %.40q, want %d bytes %.40q", len(got.Result), got.Result, len(c.result), c.result)
				}
				if got.PayloadHash != rec.PayloadHash {
					t.Errorf("PayloadHash = %q, want %q", got.PayloadHash, rec.PayloadHash)
				}
			}
		})
	}
}

func testResultKinds(t *testing.T, h *harness) {
	for _, c := range []struct {
		kind   store.ResultKind
		result []byte
	}{
		{store.ResultValue, []byte(`{"ok":true}`)},
		{store.ResultError, []byte(`{"message":"card declined"}`)},
		{store.ResultUnavailable, nil},
	} {
		rec := h.claim("scope#kind-"+c.kind.String(), time.Minute)
		h.mustAcquire(t, rec, h.t0)
		done := *rec
		done.Status = store.StatusCompleted
		done.ResultKind = c.kind
		done.Result = c.result
		if err := h.s.Complete(h.ctx, &done); err != nil {
			t.Fatalf("Complete(kind %v) = %v", c.kind, err)
		}
		got := h.conflict(t, h.claim(rec.Key, time.Minute), h.t0)
		if got.ResultKind != c.kind || !bytes.Equal(got.Result, c.result) || got.Status != store.StatusCompleted {
			t.Errorf("kind %v: got status %v kind %v result %q", c.kind, got.Status, got.ResultKind, got.Result)
		}
	}
}

func testNotFound(t *testing.T, h *harness) {
	if r, err := h.s.Get(h.ctx, "scope#never-written"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Get of a missing key = %v, %v; want ErrNotFound", r, err)
	}
}

func testKeysIndependent(t *testing.T, h *harness) {
	a := h.claim("scope-a#same-hash", time.Minute)
	b := h.claim("scope-b#same-hash", time.Minute)
	c := h.claim("scope a/ü#odd key: \"quoted\" & spaced", time.Minute)
	for _, r := range []*store.Record{a, b, c} {
		h.mustAcquire(t, r, h.t0)
	}
	h.mustComplete(t, a, []byte(`"a"`))
	if got := h.mustGet(t, b.Key); got.Status != store.StatusInProgress || got.Token != b.Token {
		t.Errorf("completing %q changed %q: %+v", a.Key, b.Key, got)
	}
	if got := h.mustGet(t, c.Key); got.Key != c.Key || got.Token != c.Token {
		t.Errorf("odd key did not round-trip: %+v", got)
	}
}

func testContextCancelled(t *testing.T, h *harness) {
	rec := h.claim("scope#cancelled", time.Minute)
	h.mustAcquire(t, rec, h.t0)
	ctx, cancel := context.WithCancel(h.ctx)
	cancel()
	check := func(op string, err error) {
		t.Helper()
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s with a cancelled context = %v, want context.Canceled", op, err)
		}
	}
	_, err := h.s.Acquire(ctx, h.claim("scope#cancelled-new", time.Minute), h.t0)
	check("Acquire", err)
	done := *rec
	done.Status = store.StatusCompleted
	check("Complete", h.s.Complete(ctx, &done))
	check("Extend", h.s.Extend(ctx, rec.Key, rec.Token, h.t0.Add(time.Hour), h.t0.Add(time.Hour)))
	check("Release", h.s.Release(ctx, rec.Key, rec.Token))
	_, err = h.s.Get(ctx, rec.Key)
	check("Get", err)
	if d := sameRecord(h.mustGet(t, rec.Key), rec); d != "" {
		t.Errorf("cancelled calls changed the record: %s", d)
	}
	if _, err := h.s.Get(h.ctx, "scope#cancelled-new"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a cancelled Acquire wrote a record: Get = %v", err)
	}
}

func testTooLarge(t *testing.T, h *harness, n int) {
	rec := h.claim("scope#too-large", time.Minute)
	h.mustAcquire(t, rec, h.t0)
	big := make([]byte, n)
	rand.Read(big)
	done := *rec
	done.Status = store.StatusCompleted
	done.Result = big
	if err := h.s.Complete(h.ctx, &done); !errors.Is(err, store.ErrTooLarge) {
		t.Fatalf("Complete with %d incompressible bytes = %v, want ErrTooLarge", n, err)
	}
	if d := sameRecord(h.mustGet(t, rec.Key), rec); d != "" {
		t.Errorf("a refused Complete changed the record: %s", d)
	}
	done.Result = nil
	done.ResultKind = store.ResultUnavailable
	if err := h.s.Complete(h.ctx, &done); err != nil {
		t.Fatalf("Complete without a body after ErrTooLarge = %v", err)
	}
}

// A claim made again under the token of a record that has completed (a
// claimant with a fixed token, adapt.WithClaimToken) is a conflict that
// returns the completed record, never a fresh claim.
func testCompletedUnderSameToken(t *testing.T, h *harness) {
	rec := h.claim("scope#same-token", time.Minute)
	h.mustAcquire(t, rec, h.t0)
	done := h.mustComplete(t, rec, []byte(`"once"`))
	again := *rec
	if d := sameRecord(h.conflict(t, &again, h.t0.Add(time.Second)), done); d != "" {
		t.Errorf("conflict record differs from the completed one: %s", d)
	}
}

// A claim made again under the token of a live in-progress record (a
// claimant with a fixed token repeating its claim, or a retried write whose
// first attempt succeeded) is a conflict that returns the record as stored,
// with the lease end that was written, never a report of a write that did
// not happen.
func testInProgressUnderSameToken(t *testing.T, h *harness) {
	rec := h.claim("scope#same-token-held", time.Minute)
	h.mustAcquire(t, rec, h.t0)
	again := *rec
	again.LeaseExpiresAt = rec.LeaseExpiresAt.Add(30 * time.Second)
	again.ExpiresAt = rec.ExpiresAt.Add(30 * time.Second)
	if d := sameRecord(h.conflict(t, &again, h.t0.Add(time.Second)), rec); d != "" {
		t.Errorf("conflict record differs from the stored claim: %s", d)
	}
	if d := sameRecord(h.mustGet(t, rec.Key), rec); d != "" {
		t.Errorf("the repeated claim changed the record: %s", d)
	}
}

// Release deletes only a claim in progress: a completed record is an
// outcome that must be replayed, even under the token that completed it.
// A holder that releases after its completion landed unseen (a commit
// whose answer was lost, a retried write) must not delete it, or the next
// call would run the function again.
func testReleaseLeavesCompleted(t *testing.T, h *harness) {
	rec := h.claim("scope#release-completed", time.Minute)
	h.mustAcquire(t, rec, h.t0)
	done := h.mustComplete(t, rec, []byte(`"charged"`))
	if err := h.s.Release(h.ctx, rec.Key, rec.Token); !errors.Is(err, store.ErrTokenMismatch) {
		t.Errorf("Release of a completed record under its token = %v, want ErrTokenMismatch", err)
	}
	if d := sameRecord(h.mustGet(t, rec.Key), done); d != "" {
		t.Errorf("Release changed the completed record: %s", d)
	}
}

// Complete replaces a completed record held under its token: a retried
// completion whose first attempt landed unseen must succeed, and the guard
// retires a step of a call whose result was filtered out by completing it
// again as already expired, after which the key is free.
func testCompleteAgain(t *testing.T, h *harness) {
	rec := h.claim("scope#complete-again", time.Minute)
	h.mustAcquire(t, rec, h.t0)
	h.mustComplete(t, rec, []byte(`"first"`))
	retired := *rec
	retired.Status, retired.ResultKind, retired.Result = store.StatusCompleted, store.ResultUnavailable, nil
	retired.ExpiresAt, retired.LeaseExpiresAt = h.t0.Add(-time.Hour), time.Time{}
	if err := h.s.Complete(h.ctx, &retired); err != nil {
		t.Fatalf("Complete of a completed record under its token = %v", err)
	}
	next := h.claim(rec.Key, time.Minute)
	if old, err := h.s.Acquire(h.ctx, next, h.t0.Add(time.Second)); err != nil {
		t.Errorf("Acquire after the record was completed again as expired = %v, %v; want the key free", old, err)
	}
	other := *rec
	other.Token = newToken()
	other.Status = store.StatusCompleted
	if err := h.s.Complete(h.ctx, &other); !errors.Is(err, store.ErrTokenMismatch) {
		t.Errorf("Complete under another token = %v; want ErrTokenMismatch", err)
	}
}
