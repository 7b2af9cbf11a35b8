package chaos

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemguard/idemguard/activity"
	"github.com/idemguard/idemguard/store"
)

// lease is the chaos workers' lease (the heartbeat timeout), and skew the
// guard's clock-skew tolerance, in the scenarios below.
const (
	lease = 2 * time.Second
	skew  = time.Second
)

// scenario builds the evidence of a one-workflow run: its operations, the
// workflow's results, the records, the ledger, the done files and the
// workers' calls logs, with times relative to t0.
type scenario struct {
	t      *testing.T
	ev     evidence
	t0     time.Time
	keyed  Op
	plain  Op
	tokens int
}

func newScenario(t *testing.T) *scenario {
	s := &scenario{t: t, t0: time.Now().Add(-time.Minute)}
	s.ev = evidence{
		plan:    map[string]*opPlan{},
		results: map[string]wfResult{"wf0": {}},
		records: map[string]*store.Record{},
	}
	s.ev.workflows = []plannedWorkflow{{id: "wf0"}}
	s.keyed = s.op(KeyedActivity, Op{ID: "w0-k00"})
	s.plain = s.op(PlainActivity, Op{ID: "w0-p01"})
	return s
}

func (s *scenario) at(d time.Duration) time.Time { return s.t0.Add(d) }

// op adds op, run by the workflow as kind.
func (s *scenario) op(kind string, op Op) Op {
	k, err := expectedKey(kind, op)
	if err != nil {
		s.t.Fatal(err)
	}
	if p, ok := s.ev.plan[op.ID]; ok {
		p.conflict = op.Payload
	} else {
		s.ev.plan[op.ID] = &opPlan{id: op.ID, kind: kind, key: k, workflows: []string{"wf0"}, payload: op.Payload}
	}
	w := &s.ev.workflows[0]
	w.input.Calls = append(w.input.Calls, Call{Activity: kind, Op: op})
	res := s.ev.results["wf0"]
	res.out.Results = append(res.out.Results, OpResult{})
	s.ev.results["wf0"] = res
	return op
}

func (s *scenario) key(op Op) string { return s.ev.plan[op.ID].key }

// result sets what the workflow got for the i-th call of op (by payload
// for explicitly keyed ones).
func (s *scenario) result(op Op, res OpResult) {
	for i, c := range s.ev.workflows[0].input.Calls {
		if c.Op.ID == op.ID && c.Op.Payload == op.Payload {
			s.ev.results["wf0"].out.Results[i] = res
		}
	}
}

// record stores res as the completed record of key.
func (s *scenario) record(key string, res any, codec func(any) ([]byte, error)) {
	data, err := codec(res)
	if err != nil {
		s.t.Fatal(err)
	}
	s.ev.records[key] = &store.Record{Key: key, Status: store.StatusCompleted, Result: data}
}

// complete records op's result as effect: in the workflow's output and in
// a COMPLETED record.
func (s *scenario) complete(op Op, effect string) {
	res := OpResult{Op: op.ID, Key: s.key(op), EffectID: effect, Payload: op.Payload}
	s.result(op, res)
	s.record(s.key(op), res, activity.PayloadCodec{}.Marshal)
}

// effect adds a ledger entry for a run of op by pid at d.
func (s *scenario) effect(kind string, op Op, effect string, pid int, d time.Duration) {
	id := kind + "#" + effect
	if kind == EntryKeyed {
		id = kind + "#" + s.key(op)
	}
	s.ev.entries = append(s.ev.entries, Entry{ID: id, Kind: kind, Op: op.ID, Key: s.key(op), Effect: effect, PID: pid, At: s.at(d), Payload: op.Payload})
}

// done notes that pid was told effect was recorded for op at d.
func (s *scenario) done(op Op, effect string, pid int, d time.Duration) {
	s.ev.done = append(s.ev.done, doneLine{kind: "done", op: op.ID, effect: effect, pid: pid, at: s.at(d)})
}

// claimBuilder writes the calls log of one claim.
type claimBuilder struct {
	s     *scenario
	pid   int
	key   string
	token string
}

// claim adds a claim of key by pid acquired at d (the store told the time
// less the skew tolerance), with a lease to d+lease.
func (s *scenario) claim(pid int, key string, d time.Duration) *claimBuilder {
	s.tokens++
	c := &claimBuilder{s: s, pid: pid, key: key, token: fmt.Sprintf("tok%02d", s.tokens)}
	s.ev.calls = append(s.ev.calls, storeCall{pid: pid, call: callAcquire, key: key, token: c.token,
		start: s.at(d), end: s.at(d + time.Millisecond), now: s.at(d - skew), lease: s.at(d + lease), result: resOK})
	return c
}

func (c *claimBuilder) add(call string, d time.Duration, took time.Duration, result string, leaseEnd time.Time) *claimBuilder {
	c.s.ev.calls = append(c.s.ev.calls, storeCall{pid: c.pid, call: call, key: c.key, token: c.token,
		start: c.s.at(d), end: c.s.at(d + took), lease: leaseEnd, result: result})
	return c
}

// keep extends the lease every third of a lease from from until until.
func (c *claimBuilder) keep(from, until time.Duration) *claimBuilder {
	for d := from + lease/3; d < until; d += lease / 3 {
		c.add(callExtend, d, time.Millisecond, resOK, c.s.at(d+lease))
	}
	return c
}

func (c *claimBuilder) extend(d time.Duration, took time.Duration, result string) *claimBuilder {
	return c.add(callExtend, d, took, result, c.s.at(d+lease))
}

func (c *claimBuilder) complete(d time.Duration, result string) *claimBuilder {
	return c.add(callComplete, d, time.Millisecond, result, time.Time{})
}

func (c *claimBuilder) release(d time.Duration) *claimBuilder {
	return c.add(callRelease, d, time.Millisecond, resOK, time.Time{})
}

// run is a run of op by pid that claims at d, makes effect 10 ms later
// and completes 100 ms after the claim.
func (s *scenario) run(kind string, op Op, effect string, pid int, d time.Duration) *claimBuilder {
	c := s.claim(pid, s.key(op), d)
	s.effect(kind, op, effect, pid, d+10*time.Millisecond)
	return c.complete(d+100*time.Millisecond, resOK)
}

// happy is a run where each op ran once, completed, and its process was
// told so.
func (s *scenario) happy() *scenario {
	s.run(EntryKeyed, s.keyed, "ek", 1, 0)
	s.complete(s.keyed, "ek")
	s.done(s.keyed, "ek", 1, 101*time.Millisecond)
	s.run(EntryPlain, s.plain, "ep", 1, 0)
	s.complete(s.plain, "ep")
	s.done(s.plain, "ep", 1, 101*time.Millisecond)
	return s
}

// lostRun is a plain run by pid 7 at -10 s whose claim is cut short: its
// effect at -9.99 s, its lease (as acquired) to -8 s, then another run by
// pid 1 took the key over legally, after the lease and the skew, and made
// the recorded effect ("ep").
func (s *scenario) lostRun() *claimBuilder {
	c := s.claim(7, s.key(s.plain), -10*time.Second)
	s.effect(EntryPlain, s.plain, "ep0", 7, -10*time.Second+10*time.Millisecond)
	return c
}

func verify(t *testing.T, s *scenario) *Report {
	t.Helper()
	return s.ev.verify()
}

func TestVerifyPasses(t *testing.T) {
	r := verify(t, newScenario(t).happy())
	if !r.OK() || r.Operations != 2 || r.KeyedEffects != 1 || r.PlainEffects != 1 || r.Claims != 2 || r.ExtraRuns != 0 || r.LeasesLost != 0 {
		t.Fatalf("report %+v", r)
	}
}

// A body longer than its lease, whose lease the keeper extended: one claim,
// extended, nothing lost.
func TestVerifyLongBodyExtended(t *testing.T) {
	s := newScenario(t)
	s.claim(1, s.key(s.plain), 0).keep(0, 4*time.Second).complete(4*time.Second, resOK)
	s.effect(EntryPlain, s.plain, "ep", 1, 4*time.Second-100*time.Millisecond)
	s.complete(s.plain, "ep")
	s.run(EntryKeyed, s.keyed, "ek", 1, 0)
	s.complete(s.keyed, "ek")
	r := verify(t, s)
	if !r.OK() || r.ExtendedClaims != 1 || r.Extensions == 0 || r.LeasesLost != 0 {
		t.Fatalf("report %+v", r)
	}
}

// The lease keeper's extension still in flight when the function fails and
// the guard releases the key: the release lands first, and the extension
// finds the token gone. The claim was given back, not taken over.
func TestVerifyExtensionRacesRelease(t *testing.T) {
	s := newScenario(t).happy()
	s.claim(3, s.key(s.plain), -10*time.Second).extend(-10*time.Second+700*time.Millisecond, 35*time.Millisecond, resMismatch).
		release(-10*time.Second + 710*time.Millisecond)
	if r := verify(t, s); !r.OK() || r.LeasesLost != 0 {
		t.Fatalf("report %+v", r)
	}
}

// A claim that came back from the store after its first extension was due
// (a slow claim) lost its lease to the slow store call.
func TestVerifySlowClaim(t *testing.T) {
	s := newScenario(t).happy()
	s.claim(7, s.key(s.plain), -10*time.Second)
	s.ev.calls[len(s.ev.calls)-1].end = s.at(-10*time.Second + 1700*time.Millisecond)
	s.effect(EntryPlain, s.plain, "ep0", 7, -10*time.Second+1710*time.Millisecond)
	if r := verify(t, s); !r.OK() || r.LeasesLostByFault != 1 || r.ExtraRunsByFault != 1 {
		t.Fatalf("report %+v", r)
	}
}

// A plain re-run after the first run's process was killed before its lease
// end is the documented window: counted as explained, not a violation.
func TestVerifyPlainRerunAfterKill(t *testing.T) {
	s := newScenario(t).happy()
	s.lostRun()
	s.ev.kills = []Kill{{PID: 7, At: s.at(-9*time.Second - 900*time.Millisecond)}}
	r := verify(t, s)
	if !r.OK() || r.PlainReruns != 1 || r.ExtraRuns != 1 || r.ExtraRunsByKill != 1 || r.LeasesLostByKill != 1 || r.DuplicateEffects != 0 {
		t.Fatalf("report %+v", r)
	}
}

// A plain re-run after the first run's process was paused across its lease
// end (a zombie) is explained by the pause; the zombie's completion, sent
// when it resumed after the key was taken over and completed, was refused.
func TestVerifyPlainRerunAfterPause(t *testing.T) {
	s := newScenario(t)
	s.run(EntryKeyed, s.keyed, "ek", 1, 0)
	s.complete(s.keyed, "ek")
	// pid 7 paused at -9.9 s for 6 s; pid 1 takes over at -7 s (the lease
	// end plus the skew) and completes; pid 7 resumes and is fenced.
	s.lostRun().complete(-3*time.Second, resMismatch)
	s.ev.pauses = []Pause{{PID: 7, At: s.at(-9900 * time.Millisecond), For: 6 * time.Second}}
	s.run(EntryPlain, s.plain, "ep", 1, -7*time.Second)
	s.complete(s.plain, "ep")
	r := verify(t, s)
	if !r.OK() || r.ExtraRunsByPause != 1 || r.LeasesLostByPause != 1 || r.Zombies != 1 || r.ZombiesOutrun != 1 || r.ZombiesFenced != 1 {
		t.Fatalf("report %+v", r)
	}
}

// An extension that failed before the lease end (a fault injected on the
// way to the store) explains the loss of that lease, and the re-run.
func TestVerifyPlainRerunAfterFaultedExtension(t *testing.T) {
	s := newScenario(t).happy()
	s.lostRun().extend(-10*time.Second+700*time.Millisecond, 5*time.Millisecond, resError).
		extend(-10*time.Second+1400*time.Millisecond, 5*time.Millisecond, resError).
		extend(-8*time.Second-50*time.Millisecond, 300*time.Millisecond, resOK) // too late
	r := verify(t, s)
	if !r.OK() || r.ExtraRunsByFault != 1 || r.LeasesLostByFault != 1 || r.ExtensionsFailed != 3 {
		t.Fatalf("report %+v", r)
	}
}

// An extension sent before the lease end that never came back (the
// process was killed after the lease end, the extension still waiting for
// its answer) is a slowed extension: it explains the loss.
func TestVerifyExtensionNeverAnswered(t *testing.T) {
	s := newScenario(t).happy()
	s.lostRun().add(callExtend, -10*time.Second+700*time.Millisecond, 0, resSent, s.at(-8*time.Second+700*time.Millisecond))
	s.ev.calls[len(s.ev.calls)-1].end = time.Time{}
	s.ev.kills = []Kill{{PID: 7, At: s.at(-7 * time.Second)}}
	if r := verify(t, s); !r.OK() || r.LeasesLostByFault != 1 || r.ExtraRunsByFault != 1 {
		t.Fatalf("report %+v", r)
	}
	// The calls log keeps the sent line only of a call never answered.
	calls := foldSent([]storeCall{
		{pid: 1, call: callExtend, token: "a", start: s.t0, result: resSent},
		{pid: 1, call: callExtend, token: "a", start: s.t0, end: s.t0.Add(time.Millisecond), result: resOK},
		{pid: 1, call: callExtend, token: "a", start: s.t0.Add(time.Second), result: resSent},
	})
	if len(calls) != 2 || calls[0].result != resOK || calls[1].result != resSent {
		t.Errorf("foldSent kept %+v", calls)
	}
}

// A lease-lost report is matched to the lost claim of the reporting
// process, though a retry of the same op in that process has claimed the
// key again by the time the report is written.
func TestVerifyLeaseLostReportAfterRetry(t *testing.T) {
	s := newScenario(t).happy()
	s.lostRun().complete(-3*time.Second, resMismatch)
	s.ev.pauses = []Pause{{PID: 7, At: s.at(-9 * time.Second), For: 5 * time.Second}}
	s.claim(7, s.key(s.plain), -3100*time.Millisecond).release(-2 * time.Second)
	s.ev.entries = append(s.ev.entries, Entry{ID: "event#1", Kind: EntryEvent, Op: s.plain.ID, PID: 7, At: s.at(-2900 * time.Millisecond), Event: activity.ErrorTypeLeaseLost})
	if r := verify(t, s); !r.OK() || r.LeaseLostReportsExplained != 1 {
		t.Fatalf("report %+v", r)
	}
}

// The guard's report of a lost lease, explained by a pause of the
// reporting process across the lease end of its claim.
func TestVerifyLeaseLostReportExplained(t *testing.T) {
	s := newScenario(t).happy()
	s.lostRun().complete(-3*time.Second, resMismatch)
	s.ev.pauses = []Pause{{PID: 7, At: s.at(-9 * time.Second), For: 5 * time.Second}}
	s.ev.entries = append(s.ev.entries, Entry{ID: "event#1", Kind: EntryEvent, Op: s.plain.ID, PID: 7, At: s.at(-3 * time.Second), Event: activity.ErrorTypeLeaseLost})
	r := verify(t, s)
	if !r.OK() || r.LeaseLostReports != 1 || r.LeaseLostReportsExplained != 1 {
		t.Fatalf("report %+v", r)
	}
}

// Explicitly keyed ops: the conflicting twin was refused, and never ran.
func TestVerifyPayloadConflictRefused(t *testing.T) {
	s := newScenario(t).happy()
	orig := s.op(ExplicitActivity, Op{ID: "w0-e06", Payload: payloadOriginal})
	twin := s.op(ExplicitActivity, Op{ID: "w0-e06", Payload: payloadConflict})
	s.run(EntryExplicit, orig, "ee", 1, 0)
	s.complete(orig, "ee")
	s.result(twin, OpResult{Op: twin.ID, Payload: twin.Payload, Refused: activity.ErrorTypePayloadMismatch})
	r := verify(t, s)
	if !r.OK() || r.PayloadConflicts != 1 || r.PayloadRefusals != 1 || r.Operations != 4 {
		t.Fatalf("report %+v", r)
	}
}

// A stepped op whose first attempt failed after step a: step a ran once and
// was replayed, step b ran once.
func TestVerifyStepsDeliberateFailure(t *testing.T) {
	s := newScenario(t).happy()
	op := s.op(StepsActivity, Op{ID: "w0-s08"})
	ka, kb := "ChaosSteps#step-a", "ChaosSteps#step-b"
	s.claim(1, s.key(op), 0).release(200 * time.Millisecond)
	s.claim(1, ka, 20*time.Millisecond).complete(120*time.Millisecond, resOK)
	s.ev.entries = append(s.ev.entries, Entry{ID: "step#ea", Kind: EntryStep, Op: op.ID, Key: ka, Step: "a", Effect: "ea", PID: 1, At: s.at(30 * time.Millisecond)})
	s.ev.done = append(s.ev.done, doneLine{kind: "fail", op: op.ID, effect: "-", pid: 1, at: s.at(150 * time.Millisecond), key: s.key(op)})
	s.claim(2, s.key(op), time.Second).complete(time.Second+500*time.Millisecond, resOK)
	s.claim(2, kb, time.Second+50*time.Millisecond).complete(time.Second+200*time.Millisecond, resOK)
	s.ev.entries = append(s.ev.entries, Entry{ID: "step#eb", Kind: EntryStep, Op: op.ID, Key: kb, Step: "b", Effect: "eb", PID: 2, At: s.at(time.Second + 60*time.Millisecond)})
	steps := map[string]string{"a": "ea", "b": "eb"}
	res := OpResult{Op: op.ID, Key: s.key(op), EffectID: "steps:a=ea,b=eb", PID: 2, Steps: steps}
	s.result(op, res)
	s.record(s.key(op), res, activity.PayloadCodec{}.Marshal)
	s.record(ka, "ea", json.Marshal)
	s.record(kb, "eb", json.Marshal)
	r := verify(t, s)
	if !r.OK() || r.StepEffects != 2 || r.StepReruns != 0 || r.DeliberateFailures != 1 || r.StepKeys != 2 {
		t.Fatalf("report %+v", r)
	}
}

// A keyed body's zombie: its worker was paused past the lease mid-run,
// another run took the key over and recorded the result, and the zombie,
// resumed, reached the ledger (which deduplicated it) before it learnt its
// lease was lost. Explained by the pause, not a violation.
func TestVerifyKeyedZombieAfterRecord(t *testing.T) {
	s := newScenario(t).happy()
	s.claim(7, s.key(s.keyed), -10*time.Second).complete(-3*time.Second+100*time.Millisecond, resMismatch)
	s.ev.entries = append(s.ev.entries, Entry{ID: "dedup#z", Kind: EntryDedup, Op: s.keyed.ID, Key: s.key(s.keyed), Effect: "ek", PID: 7, At: s.at(-3 * time.Second)})
	s.ev.pauses = []Pause{{PID: 7, At: s.at(-9500 * time.Millisecond), For: 6500 * time.Millisecond}}
	r := verify(t, s)
	if !r.OK() || r.KeyedRerunsDeduped != 1 || r.ExtraRunsByPause != 1 {
		t.Fatalf("report %+v", r)
	}
}

// The checks must catch each of these.
func TestVerifyFindsViolations(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(s *scenario)
		want  string
		check func(r *Report) bool
	}{
		{"unexplained plain re-run", func(s *scenario) {
			s.lostRun()
		}, "is not explained", func(r *Report) bool {
			return r.DuplicateEffects == 1 && r.ExtraRunsUnexplained == 1 && r.LeasesLostUnexplained == 1
		}},
		// The lease keeper disabled: a body runs past its lease with no
		// extension, and nothing else happened to its process.
		{"lease lapsed while the process ran", func(s *scenario) {
			s.claim(3, s.key(s.keyed), -10*time.Second).complete(-7*time.Second, resOK)
		}, "its lease ran out with no kill, pause or failed store call", func(r *Report) bool { return r.LeasesLostUnexplained == 1 }},
		// A lease-lost report is not explained by the mere report, nor by
		// a kill or pause of another process, nor by a pause that ended
		// well before the lease end.
		{"lease-lost report without a cause", func(s *scenario) {
			s.lostRun().complete(-3*time.Second, resMismatch)
			s.ev.entries = append(s.ev.entries, Entry{ID: "event#1", Kind: EntryEvent, Op: s.plain.ID, PID: 7, At: s.at(-3 * time.Second), Event: activity.ErrorTypeLeaseLost})
			s.ev.kills = []Kill{{PID: 8, At: s.at(-9 * time.Second)}}
			s.ev.pauses = []Pause{{PID: 9, At: s.at(-9 * time.Second), For: 5 * time.Second}, {PID: 7, At: s.at(-30 * time.Second), For: 5 * time.Second}}
		}, "no pause or fault of its own", func(r *Report) bool {
			return r.LeaseLostReportsUnexplained == 1 && r.ExtraRunsUnexplained == 1
		}},
		{"kill after the lease end", func(s *scenario) {
			s.lostRun()
			s.ev.kills = []Kill{{PID: 7, At: s.at(-7 * time.Second)}}
		}, "is not explained", func(r *Report) bool { return r.DuplicateEffects == 1 }},
		// A store whose claim takes over a live lease.
		{"takeover of a live claim", func(s *scenario) {
			s.claim(7, s.key(s.plain), -10*time.Second).keep(-10*time.Second, -5*time.Second).complete(-5*time.Second, resMismatch)
			s.effect(EntryPlain, s.plain, "ep0", 7, -8*time.Second)
			s.ev.calls[len(s.ev.calls)-1].result = resMismatch // the last extension found the key taken
			s.ev.calls = append(s.ev.calls, storeCall{pid: 1, call: callAcquire, key: s.key(s.plain), token: "thief", start: s.at(-6 * time.Second),
				end: s.at(-6 * time.Second), now: s.at(-7 * time.Second), lease: s.at(-4 * time.Second), result: resOK})
		}, "was taken over by pid 1", func(r *Report) bool { return r.IllegalTakeovers == 1 }},
		// A completion that ignores the claim token: the zombie's
		// completion landed after the key was taken over.
		{"fenced completion accepted", func(s *scenario) {
			s.lostRun().complete(-3*time.Second, resOK)
			s.ev.pauses = []Pause{{PID: 7, At: s.at(-9 * time.Second), For: 5 * time.Second}}
			s.run(EntryPlain, s.plain, "ep-taker", 1, -7*time.Second)
		}, "the store accepted a complete", func(r *Report) bool { return r.FencedWritesAccepted >= 1 }},
		// Two processes told different results were recorded, whichever
		// write landed last.
		{"two results told", func(s *scenario) {
			s.lostRun()
			s.ev.kills = []Kill{{PID: 7, At: s.at(-9 * time.Second)}}
			s.done(s.plain, "ep0", 7, -9*time.Second)
		}, "processes were told different results", func(r *Report) bool { return r.ConflictingResults == 1 }},
		{"a run without a claim", func(s *scenario) {
			s.effect(EntryPlain, s.plain, "ep9", 5, -5*time.Second)
		}, "holds no claim", nil},
		{"two keyed effects", func(s *scenario) {
			s.ev.entries = append(s.ev.entries, Entry{ID: "keyed#other", Kind: EntryKeyed, Op: s.keyed.ID, Key: s.key(s.keyed), Effect: "ek2", PID: 2, At: s.t0})
		}, "2 effects", func(r *Report) bool { return r.DuplicateEffects == 1 }},
		{"keyed re-run without cause", func(s *scenario) {
			s.claim(2, s.key(s.keyed), -10*time.Second)
			s.ev.entries = append(s.ev.entries, Entry{ID: "dedup#1", Kind: EntryDedup, Op: s.keyed.ID, Key: s.key(s.keyed), Effect: "ek", PID: 2, At: s.at(-9 * time.Second)})
		}, "nothing explains it", func(r *Report) bool { return r.ExtraRunsUnexplained == 1 && r.DuplicateEffects == 0 }},
		{"conflicting payload not refused", func(s *scenario) {
			orig := s.op(ExplicitActivity, Op{ID: "w0-e06", Payload: payloadOriginal})
			twin := s.op(ExplicitActivity, Op{ID: "w0-e06", Payload: payloadConflict})
			s.run(EntryExplicit, orig, "ee", 1, 0)
			s.complete(orig, "ee")
			s.result(twin, OpResult{Op: twin.ID, Key: s.key(twin), EffectID: "ee", Payload: payloadOriginal})
		}, "got the result of a run with payload", func(r *Report) bool { return r.PayloadViolations >= 2 }},
		{"conflicting payload ran", func(s *scenario) {
			orig := s.op(ExplicitActivity, Op{ID: "w0-e06", Payload: payloadOriginal})
			twin := s.op(ExplicitActivity, Op{ID: "w0-e06", Payload: payloadConflict})
			s.run(EntryExplicit, orig, "ee", 1, 0)
			s.complete(orig, "ee")
			s.result(twin, OpResult{Op: twin.ID, Payload: twin.Payload, Refused: activity.ErrorTypePayloadMismatch})
			s.claim(2, s.key(twin), time.Second)
			s.effect(EntryExplicit, twin, "ee-twin", 2, time.Second+10*time.Millisecond)
		}, "is not explained", func(r *Report) bool { return r.DuplicateEffects >= 1 && r.IllegalTakeovers == 1 }},
		{"the recorded payload refused", func(s *scenario) {
			orig := s.op(ExplicitActivity, Op{ID: "w0-e06", Payload: payloadOriginal})
			s.op(ExplicitActivity, Op{ID: "w0-e06", Payload: payloadConflict})
			s.run(EntryExplicit, orig, "ee", 1, 0)
			s.record(s.key(orig), OpResult{Op: orig.ID, Key: s.key(orig), EffectID: "ee", Payload: payloadOriginal}, activity.PayloadCodec{}.Marshal)
			s.result(orig, OpResult{Op: orig.ID, Payload: orig.Payload, Refused: activity.ErrorTypePayloadMismatch})
		}, "the recorded payload", func(r *Report) bool { return r.PayloadViolations >= 1 }},
		{"wrong key", func(s *scenario) {
			s.ev.entries[0].Key = "ChaosKeyed#0000"
		}, "ran under key", nil},
		{"stuck record", func(s *scenario) {
			s.ev.records[s.key(s.plain)].Status = store.StatusInProgress
		}, "stuck", func(r *Report) bool { return r.StuckRecords == 1 }},
		{"missing record", func(s *scenario) {
			delete(s.ev.records, s.key(s.keyed))
		}, "no idempotency record", func(r *Report) bool { return r.MissingRecords == 1 }},
		{"result differs from the store", func(s *scenario) {
			s.ev.results["wf0"].out.Results[1].EffectID = "ep-other"
		}, "the store holds", func(r *Report) bool { return r.ResultMismatches > 0 }},
		{"failed workflow", func(s *scenario) {
			s.ev.results["wf0"] = wfResult{err: errTest}
		}, "did not complete", nil},
		{"worker died by itself", func(s *scenario) {
			s.ev.unexpected = []string{"worker slot 0 pid 9 ended by itself: exit status 66"}
		}, "ended by itself", func(r *Report) bool { return r.UnexpectedExits == 1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newScenario(t).happy()
			tc.setup(s)
			r := verify(t, s)
			if r.OK() {
				t.Fatalf("no violation found; report %+v", r)
			}
			if !strings.Contains(strings.Join(r.Violations, "\n"), tc.want) {
				t.Errorf("violations %q, want one mentioning %q", r.Violations, tc.want)
			}
			if tc.check != nil && !tc.check(r) {
				t.Errorf("counts wrong: %+v", r)
			}
		})
	}
}

// In a control run nothing may run twice and no lease may be lost, even
// for a reason that would explain it in a chaos run.
func TestVerifyControl(t *testing.T) {
	s := newScenario(t).happy()
	s.ev.control = true
	if r := verify(t, s); !r.OK() {
		t.Fatalf("a clean control run failed: %v", r.Violations)
	}
	s.lostRun().extend(-10*time.Second+700*time.Millisecond, time.Millisecond, resError)
	r := verify(t, s)
	if r.OK() || r.ExtraRuns != 1 || r.LeasesLost != 1 || !strings.Contains(strings.Join(r.Violations, "\n"), "control run") {
		t.Fatalf("an extra run and a lost lease in a control run: %+v", r)
	}
}

type testError string

func (e testError) Error() string { return string(e) }

const errTest = testError("workflow timed out")

// txScenario is a transactional scenario's evidence: one workflow with one
// transactional operation, completed with effect e1.
func txScenario(t *testing.T) (*scenario, Op) {
	s := &scenario{t: t, t0: time.Now().Add(-time.Minute)}
	s.ev = evidence{plan: map[string]*opPlan{}, results: map[string]wfResult{"wf0": {}}, records: map[string]*store.Record{}}
	s.ev.workflows = []plannedWorkflow{{id: "wf0"}}
	op := s.op(TxActivity, Op{ID: "w0-t00"})
	s.complete(op, "e1")
	return s, op
}

func (s *scenario) row(op Op, effect string, pid int) {
	s.ev.entries = append(s.ev.entries, Entry{ID: "tx#" + effect, Kind: EntryTx, Op: op.ID, Key: s.key(op), Effect: effect, PID: pid, At: s.t0})
}

func (s *scenario) window(op Op, effect string, pid int, d time.Duration) {
	s.ev.done = append(s.ev.done, doneLine{kind: "window", op: op.ID, effect: effect, pid: pid, at: s.at(d), key: s.key(op)})
}

func TestVerifyTx(t *testing.T) {
	commit := func(c *claimBuilder, d time.Duration) {
		c.add(callTxComplete, d, time.Millisecond, resOK, time.Time{})
		c.add(callCommit, d+time.Millisecond, time.Millisecond, resOK, time.Time{})
	}
	// One committed row, and a run killed in the window and rolled back.
	s, op := txScenario(t)
	s.claim(1, s.key(op), -5*time.Second)
	s.window(op, "e0", 1, -5*time.Second+20*time.Millisecond)
	s.ev.kills = []Kill{{PID: 1, At: s.at(-5*time.Second + 50*time.Millisecond)}}
	commit(s.claim(2, s.key(op), 0), 100*time.Millisecond)
	s.window(op, "e1", 2, 20*time.Millisecond)
	s.row(op, "e1", 2)
	s.done(op, "e1", 2, 103*time.Millisecond)
	r := verify(t, s)
	if !r.OK() || r.TxEffects != 1 || r.TxWindowRuns != 2 || r.TxRolledBack != 1 || r.TxRolledBackByKill != 1 || r.ExtraRunsByKill != 1 {
		t.Errorf("a rolled-back run and a committed one: %+v", r)
	}

	// A run rolled back with nothing to explain it.
	s, op = txScenario(t)
	s.claim(1, s.key(op), -5*time.Second).release(-5*time.Second + 100*time.Millisecond)
	s.window(op, "e0", 1, -5*time.Second+20*time.Millisecond)
	commit(s.claim(2, s.key(op), 0), 100*time.Millisecond)
	s.row(op, "e1", 2)
	if r := verify(t, s); r.OK() || r.TxRolledBackUnexplained != 1 {
		t.Errorf("an unexplained rollback was not caught: %+v", r)
	}

	// Two committed rows: a duplicate, whatever explains the first.
	s, op = txScenario(t)
	s.row(op, "e0", 1)
	s.row(op, "e1", 2)
	s.ev.kills = []Kill{{PID: 1, At: s.at(time.Millisecond)}}
	if r := verify(t, s); r.OK() || r.DuplicateEffects != 1 || !strings.Contains(strings.Join(r.Violations, "\n"), "2 committed rows") {
		t.Errorf("two committed rows for one op were not caught: %+v", r)
	}

	// No committed row for a completed operation: a lost transfer.
	s, _ = txScenario(t)
	if r := verify(t, s); r.OK() || r.LostTransfers != 1 {
		t.Errorf("a completed op without its row was not caught: %+v", r)
	}

	// The committed row is not the result the workflow got.
	s, op = txScenario(t)
	s.row(op, "e9", 1)
	if r := verify(t, s); r.OK() || r.ResultMismatches == 0 {
		t.Errorf("a result that is not the committed row was not caught: %+v", r)
	}
}

// The calls log round-trips its lines, and skips a line cut short.
func TestCallLine(t *testing.T) {
	now := time.Now()
	c := storeCall{call: callExtend, key: "ChaosPlain#ab", token: "t1", start: now, end: now.Add(time.Millisecond), lease: now.Add(lease), result: resOK}
	got, ok := parseCall(7, c.line())
	c.pid = 7
	if !ok || got.call != c.call || got.key != c.key || got.token != c.token || !got.start.Equal(c.start) || !got.end.Equal(c.end) ||
		!got.now.IsZero() || !got.lease.Equal(c.lease) || got.result != c.result || got.pid != 7 {
		t.Fatalf("parseCall(%q) = %+v, %v", c.line(), got, ok)
	}
	if _, ok := parseCall(7, strings.TrimSuffix(c.line(), " ok\n")); ok {
		t.Error("a cut line parsed")
	}
}

// A transactional run rolled back because Temporal ended its activity
// attempt: its heartbeat was answered that the attempt had timed out on
// the server (its process had not heartbeated in time on a loaded
// machine), so the SDK cancelled the attempt's context, a store call of
// the body failed, and the call released its key. Its process noted the
// cancelled attempt ("cancel") once the guard returned: that explains the
// rollback, and nothing else of the run's process does.
func TestVerifyTxRolledBackByCancelledAttempt(t *testing.T) {
	rolledBack := func(cancelAt time.Duration) *Report {
		s, op := txScenario(t)
		s.claim(1, s.key(op), -5*time.Second).release(-5*time.Second + 400*time.Millisecond)
		s.window(op, "e0", 1, -5*time.Second+20*time.Millisecond)
		if cancelAt != 0 {
			s.ev.done = append(s.ev.done, doneLine{kind: "cancel", op: op.ID, effect: "-", pid: 1, at: s.at(cancelAt), key: "-"})
		}
		c := s.claim(2, s.key(op), 0)
		c.add(callTxComplete, 100*time.Millisecond, time.Millisecond, resOK, time.Time{})
		c.add(callCommit, 101*time.Millisecond, time.Millisecond, resOK, time.Time{})
		s.row(op, "e1", 2)
		return verify(t, s)
	}
	if r := rolledBack(-5*time.Second + 402*time.Millisecond); !r.OK() || r.TxRolledBackByCancel != 1 || r.ExtraRunsByCancel != 1 || r.TxRolledBackUnexplained != 0 {
		t.Errorf("a run rolled back by its cancelled attempt: %+v", r)
	}
	// A cancelled attempt of the process before the run, or long after
	// its claim was given back (another attempt's), explains nothing.
	for _, at := range []time.Duration{-6 * time.Second, -5*time.Second + 3*time.Second} {
		if r := rolledBack(at); r.OK() || r.TxRolledBackUnexplained != 1 {
			t.Errorf("a cancel at %v explained a rollback: %+v", at, r)
		}
	}
}

// readDone reads the "cancel" lines of a worker's done file.
func TestReadDoneCancel(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "done-7.log"), []byte("cancel w0-t00 - 1700000000123 -\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := readDone(dir)
	if err != nil || len(got) != 1 || got[0].kind != "cancel" || got[0].op != "w0-t00" || got[0].pid != 7 || got[0].at.UnixMilli() != 1700000000123 {
		t.Fatalf("readDone = %+v, %v", got, err)
	}
}

// A transactional run rolled back because a step of its body met the
// step's key held by another live claim (an earlier attempt's, whose
// holder was cut short with its lease still running) is explained; the
// same rollback without that refused claim of the step is not.
func TestVerifyTxRolledBackByHeldStep(t *testing.T) {
	rolledBack := func(heldAt time.Duration) *Report {
		s, op := txScenario(t)
		step := s.key(op) + "/b"
		// The step's key is the op's: a window of it says so.
		s.ev.done = append(s.ev.done, doneLine{kind: "window", op: op.ID, effect: "s1", pid: 2, at: s.at(20 * time.Millisecond), key: step})
		s.claim(1, s.key(op), -5*time.Second).release(-5*time.Second + 400*time.Millisecond)
		s.window(op, "e0", 1, -5*time.Second+20*time.Millisecond)
		if heldAt != 0 {
			s.ev.calls = append(s.ev.calls, storeCall{pid: 1, call: callAcquire, key: step, token: "t-step",
				start: s.at(heldAt - time.Millisecond), end: s.at(heldAt), result: resConflict})
		}
		c := s.claim(2, s.key(op), 0)
		c.add(callTxComplete, 100*time.Millisecond, time.Millisecond, resOK, time.Time{})
		c.add(callCommit, 101*time.Millisecond, time.Millisecond, resOK, time.Time{})
		s.row(op, "e1", 2)
		return verify(t, s)
	}
	if r := rolledBack(-5*time.Second + 390*time.Millisecond); r.TxRolledBackByStepHeld != 1 || r.ExtraRunsByStepHeld != 1 || r.TxRolledBackUnexplained != 0 {
		t.Errorf("a run rolled back after its step met a live claim: %+v", r)
	}
	// No refused step, or one before the run or after the release (another
	// attempt's), explains nothing.
	for _, at := range []time.Duration{0, -6 * time.Second, -5*time.Second + 2*time.Second} {
		if r := rolledBack(at); r.TxRolledBackUnexplained != 1 {
			t.Errorf("a refused step at %v explained a rollback: %+v", at, r)
		}
	}
}
