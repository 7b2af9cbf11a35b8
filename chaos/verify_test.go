package chaos

import (
	"strings"
	"testing"
	"time"

	"github.com/idemguard/idemguard/activity"
	"github.com/idemguard/idemguard/store"
)

// scenario builds the evidence of a one-workflow run with one keyed and
// one plain operation, both completed with the effects named, and lets the
// test add ledger entries, kills and done lines.
type scenario struct {
	t     *testing.T
	ev    evidence
	keyed Op
	plain Op
	t0    time.Time
}

func newScenario(t *testing.T) *scenario {
	s := &scenario{t: t, keyed: Op{ID: "w0-k00"}, plain: Op{ID: "w0-p01"}, t0: time.Now().Add(-time.Minute)}
	s.ev = evidence{
		plan:    map[string]*opPlan{},
		results: map[string]wfResult{},
		records: map[string]*store.Record{},
		window:  10 * time.Second,
	}
	for _, x := range []struct {
		kind string
		op   Op
	}{{KeyedActivity, s.keyed}, {PlainActivity, s.plain}} {
		k, err := expectedKey(x.kind, x.op)
		if err != nil {
			t.Fatal(err)
		}
		s.ev.plan[x.op.ID] = &opPlan{id: x.op.ID, kind: x.kind, key: k, workflows: []string{"wf0"}}
	}
	s.ev.workflows = []plannedWorkflow{{id: "wf0", input: WorkflowInput{Keyed: []Op{s.keyed}, Plain: []Op{s.plain}}}}
	return s
}

func (s *scenario) key(op Op) string { return s.ev.plan[op.ID].key }

// complete records op's result as effect: in the workflow's output and in
// a COMPLETED record.
func (s *scenario) complete(op Op, effect string) {
	res := OpResult{Op: op.ID, Key: s.key(op), EffectID: effect}
	out := s.ev.results["wf0"].out
	if s.ev.plan[op.ID].kind == KeyedActivity {
		out.Keyed = []OpResult{res}
	} else {
		out.Plain = []OpResult{res}
	}
	s.ev.results["wf0"] = wfResult{out: out}
	data, err := (activity.PayloadCodec{}).Marshal(res)
	if err != nil {
		s.t.Fatal(err)
	}
	s.ev.records[s.key(op)] = &store.Record{Key: s.key(op), Status: store.StatusCompleted, Result: data}
}

func (s *scenario) effect(kind string, op Op, effect string, pid int, at time.Duration) {
	id := kind + "#" + effect
	if kind == EntryKeyed {
		id = kind + "#" + s.key(op)
	}
	s.ev.entries = append(s.ev.entries, Entry{ID: id, Kind: kind, Op: op.ID, Key: s.key(op), Effect: effect, PID: pid, At: s.t0.Add(at)})
}

// happy is a run where each op ran once.
func (s *scenario) happy() *scenario {
	s.effect(EntryKeyed, s.keyed, "ek", 1, 0)
	s.complete(s.keyed, "ek")
	s.effect(EntryPlain, s.plain, "ep", 1, 0)
	s.complete(s.plain, "ep")
	return s
}

func TestVerifyPasses(t *testing.T) {
	r := newScenario(t).happy().ev.verify()
	if !r.OK() || r.Operations != 2 || r.KeyedEffects != 1 || r.PlainEffects != 1 {
		t.Fatalf("report %+v", r)
	}
}

// A plain re-run after its first run's worker was killed is the
// documented window: counted, not a violation.
func TestVerifyPlainRerunAfterKill(t *testing.T) {
	s := newScenario(t).happy()
	s.effect(EntryPlain, s.plain, "ep0", 7, -5*time.Second)
	s.ev.kills = []Kill{{PID: 7, At: s.t0.Add(-5*time.Second + 30*time.Millisecond)}}
	r := s.ev.verify()
	if !r.OK() || r.PlainReruns != 1 || r.RerunsByKill != 1 || r.DuplicateEffects != 0 {
		t.Fatalf("report %+v", r)
	}
}

// The guard's own report of the window (lease lost, not recorded) also
// explains a re-run.
func TestVerifyPlainRerunAfterLeaseLost(t *testing.T) {
	s := newScenario(t).happy()
	s.effect(EntryPlain, s.plain, "ep0", 7, -5*time.Second)
	s.ev.entries = append(s.ev.entries, Entry{ID: "event#1", Kind: EntryEvent, Op: s.plain.ID, PID: 7, At: s.t0.Add(-4 * time.Second), Event: activity.ErrorTypeLeaseLost})
	r := s.ev.verify()
	if !r.OK() || r.RerunsByWindow != 1 {
		t.Fatalf("report %+v", r)
	}
}

// A plain re-run after its first run's worker was paused past its lease
// (a zombie) is the documented window too.
func TestVerifyPlainRerunAfterPause(t *testing.T) {
	s := newScenario(t).happy()
	s.effect(EntryPlain, s.plain, "ep0", 7, -5*time.Second)
	s.ev.pauses = []Pause{{PID: 7, At: s.t0.Add(-5*time.Second + 10*time.Millisecond), For: 3 * time.Second}}
	r := s.ev.verify()
	if !r.OK() || r.RerunsByPause != 1 || r.Pauses != 1 {
		t.Fatalf("report %+v", r)
	}
}

// A keyed body's zombie: its worker was paused past the lease mid-run,
// another run took the key over and recorded the result, and the zombie,
// resumed, reached the ledger (which deduplicated it) before it learnt its
// lease was lost. Explained by the pause, not a violation.
func TestVerifyKeyedZombieAfterRecord(t *testing.T) {
	s := newScenario(t).happy()
	s.ev.done = []doneLine{{kind: "done", op: s.keyed.ID, effect: "ek", pid: 1, at: s.t0.Add(100 * time.Millisecond)}}
	s.ev.entries = append(s.ev.entries, Entry{ID: "dedup#z", Kind: EntryDedup, Op: s.keyed.ID, Key: s.key(s.keyed), Effect: "ek", PID: 7, At: s.t0.Add(2 * time.Second)})
	s.ev.pauses = []Pause{{PID: 7, At: s.t0.Add(-3 * time.Second), For: 4500 * time.Millisecond}}
	r := s.ev.verify()
	if !r.OK() || r.KeyedRerunsDeduped != 1 || r.RerunsUnexplained != 0 {
		t.Fatalf("report %+v", r)
	}
}

// A keyed body whose result is recorded within the millisecond of its
// effect: done files keep milliseconds, and a ledger may keep nanoseconds
// (Redis's, as JSON), so the recording's time, cut to its millisecond,
// reads as before the effect it records. That is one run, not a run after
// the recording.
func TestVerifyKeyedRecordedInTheSameMillisecond(t *testing.T) {
	s := newScenario(t)
	s.t0 = time.UnixMilli(s.t0.UnixMilli()).Add(174 * time.Microsecond)
	s.happy()
	s.ev.done = []doneLine{{kind: "done", op: s.keyed.ID, effect: "ek", pid: 1, at: time.UnixMilli(s.t0.Add(500 * time.Microsecond).UnixMilli())}}
	if r := s.ev.verify(); !r.OK() || r.RerunsUnexplained != 0 {
		t.Fatalf("report %+v", r)
	}
}

func TestVerifyFindsViolations(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(s *scenario)
		want  string
		check func(r *Report) bool
	}{
		{"unexplained plain re-run", func(s *scenario) {
			s.effect(EntryPlain, s.plain, "ep0", 7, -5*time.Second)
		}, "not explained", func(r *Report) bool { return r.DuplicateEffects == 1 && r.RerunsUnexplained == 1 }},
		{"kill long after the effect", func(s *scenario) {
			s.effect(EntryPlain, s.plain, "ep0", 7, -30*time.Second)
			s.ev.kills = []Kill{{PID: 7, At: s.t0.Add(-5 * time.Second)}}
		}, "not explained", func(r *Report) bool { return r.DuplicateEffects == 1 }},
		{"plain re-run after a recorded completion", func(s *scenario) {
			s.effect(EntryPlain, s.plain, "ep0", 7, -5*time.Second)
			s.ev.done = []doneLine{{op: s.plain.ID, effect: "ep0", pid: 7, at: s.t0.Add(-4 * time.Second)}}
			s.ev.kills = []Kill{{PID: 7, At: s.t0.Add(-3 * time.Second)}}
		}, "was recorded as the result", func(r *Report) bool { return r.DuplicateEffects == 1 }},
		{"two keyed effects", func(s *scenario) {
			s.ev.entries = append(s.ev.entries, Entry{ID: "keyed#other", Kind: EntryKeyed, Op: s.keyed.ID, Key: s.key(s.keyed), Effect: "ek2", PID: 2, At: s.t0})
		}, "2 effects", func(r *Report) bool { return r.DuplicateEffects == 1 }},
		{"keyed re-run without cause", func(s *scenario) {
			s.ev.entries = append(s.ev.entries, Entry{ID: "dedup#1", Kind: EntryDedup, Op: s.keyed.ID, Key: s.key(s.keyed), Effect: "ek", PID: 2, At: s.t0.Add(time.Second)})
		}, "no kill", func(r *Report) bool { return r.RerunsUnexplained == 1 && r.DuplicateEffects == 0 }},
		{"keyed re-run after a recorded result", func(s *scenario) {
			s.ev.done = []doneLine{{kind: "done", op: s.keyed.ID, effect: "ek", pid: 1, at: s.t0.Add(100 * time.Millisecond)}}
			s.ev.entries = append(s.ev.entries, Entry{ID: "dedup#1", Kind: EntryDedup, Op: s.keyed.ID, Key: s.key(s.keyed), Effect: "ek", PID: 2, At: s.t0.Add(2 * time.Second)})
			s.ev.kills = []Kill{{PID: 2, At: s.t0.Add(2100 * time.Millisecond)}}
		}, "after its first run's result was recorded", func(r *Report) bool { return r.RerunsUnexplained == 1 }},
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
			res := s.ev.results["wf0"]
			res.out.Plain[0].EffectID = "ep-other"
			s.ev.results["wf0"] = res
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
			r := s.ev.verify()
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

type testError string

func (e testError) Error() string { return string(e) }

const errTest = testError("workflow timed out")

// txScenario is the postgres scenario's evidence: one workflow with one
// transactional operation.
func txScenario(t *testing.T) (*evidence, Op, string) {
	op := Op{ID: "w0-t00"}
	k, err := expectedKey(TxActivity, op)
	if err != nil {
		t.Fatal(err)
	}
	ev := &evidence{
		plan:      map[string]*opPlan{op.ID: {id: op.ID, kind: TxActivity, key: k, workflows: []string{"wf0"}}},
		workflows: []plannedWorkflow{{id: "wf0", input: WorkflowInput{Tx: []Op{op}}}},
		records:   map[string]*store.Record{},
		window:    10 * time.Second,
	}
	res := OpResult{Op: op.ID, Key: k, EffectID: "e1"}
	ev.results = map[string]wfResult{"wf0": {out: WorkflowOutput{Tx: []OpResult{res}}}}
	data, err := (activity.PayloadCodec{}).Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	ev.records[k] = &store.Record{Key: k, Status: store.StatusCompleted, Result: data}
	return ev, op, k
}

func TestVerifyTx(t *testing.T) {
	t0 := time.Now().Add(-time.Minute)
	row := func(op Op, key, effect string, pid int) Entry {
		return Entry{ID: "tx#" + effect, Kind: EntryTx, Op: op.ID, Key: key, Effect: effect, PID: pid, At: t0}
	}

	// One committed row, and a run killed in the window and rolled back.
	ev, op, k := txScenario(t)
	ev.entries = []Entry{row(op, k, "e1", 2)}
	ev.done = []doneLine{
		{kind: "window", op: op.ID, effect: "e0", pid: 1, at: t0.Add(-time.Second)},
		{kind: "window", op: op.ID, effect: "e1", pid: 2, at: t0},
		{kind: "done", op: op.ID, effect: "e1", pid: 2, at: t0.Add(time.Second)},
	}
	ev.kills = []Kill{{PID: 1, At: t0.Add(-900 * time.Millisecond)}}
	r := ev.verify()
	if !r.OK() || r.TxEffects != 1 || r.TxWindowRuns != 2 || r.TxRolledBack != 1 || r.TxRolledBackByKill != 1 {
		t.Errorf("a rolled-back run and a committed one: %+v", r)
	}

	// Two committed rows: a duplicate, whatever explains the first.
	ev, op, k = txScenario(t)
	ev.entries = []Entry{row(op, k, "e0", 1), row(op, k, "e1", 2)}
	ev.kills = []Kill{{PID: 1, At: t0.Add(time.Millisecond)}}
	if r := ev.verify(); r.OK() || r.DuplicateEffects != 1 || !strings.Contains(strings.Join(r.Violations, "\n"), "2 committed rows") {
		t.Errorf("two committed rows for one op were not caught: %+v", r)
	}

	// No committed row for a completed operation: a lost transfer.
	ev, _, _ = txScenario(t)
	if r := ev.verify(); r.OK() || r.LostTransfers != 1 {
		t.Errorf("a completed op without its row was not caught: %+v", r)
	}

	// The committed row is not the result the workflow got.
	ev, op, k = txScenario(t)
	ev.entries = []Entry{row(op, k, "e9", 1)}
	if r := ev.verify(); r.OK() || r.ResultMismatches == 0 {
		t.Errorf("a result that is not the committed row was not caught: %+v", r)
	}
}
