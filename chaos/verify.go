package chaos

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/gowebpki/jcs"

	"github.com/idemguard/idemguard/activity"
	"github.com/idemguard/idemguard/store"
)

// expectedKey is the key the guard must derive for op under the activity
// type kind: "<scope>#<sha256 of the RFC 8785 canonical JSON of the
// input>", as README.md documents it, computed here independently with the
// RFC 8785 reference implementation.
func expectedKey(kind string, op Op) (string, error) {
	b, err := json.Marshal(op)
	if err != nil {
		return "", err
	}
	c, err := jcs.Transform(b)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(c)
	return kind + "#" + hex.EncodeToString(sum[:]), nil
}

// evidence is everything the checks look at after a run.
type evidence struct {
	plan       map[string]*opPlan
	workflows  []plannedWorkflow
	results    map[string]wfResult
	entries    []Entry
	records    map[string]*store.Record
	corrupt    []string
	done       []doneLine
	kills      []Kill
	pauses     []Pause
	unexpected []string
	started    int
	checkedAt  time.Time
	// attribution window: a kill of a run's process this long after its
	// side effect explains a re-run.
	window time.Duration
}

// Report is the outcome of a chaos run.
type Report struct {
	RunID string `json:"run_id"`
	Seed  uint64 `json:"seed"`
	Store string `json:"store"`

	Workflows          int `json:"workflows"`
	WorkflowsCompleted int `json:"workflows_completed"`
	// Operations counts the guarded activity executions of the completed
	// workflows (a twin's count too); Keys the distinct idempotency keys.
	Operations int `json:"operations"`
	Keys       int `json:"keys"`

	Workers         int `json:"workers"`
	Kills           int `json:"kills"`
	Pauses          int `json:"pauses"`
	WorkerStarts    int `json:"worker_starts"`
	UnexpectedExits int `json:"unexpected_worker_exits"`

	Requests    int64       `json:"store_requests"`
	FaultRate   float64     `json:"fault_rate"`
	Faults      FaultCounts `json:"faults"`
	FaultsTotal int64       `json:"faults_total"`

	// Body runs, from the ledger.
	KeyedEffects int `json:"keyed_effects"`
	// KeyedRerunsDeduped: keyed bodies that ran again and found their key
	// already in the ledger (the downstream closed the window).
	KeyedRerunsDeduped int `json:"keyed_reruns_deduped"`
	PlainEffects       int `json:"plain_effects"`
	// PlainReruns: plain effects beyond the first of each operation,
	// split by what explains them: the documented window between the side
	// effect and the completion write, opened by a kill or a pause, or
	// reported by the guard.
	PlainReruns       int `json:"plain_reruns"`
	RerunsByKill      int `json:"reruns_by_kill"`   // the run's worker was SIGKILLed after its effect, before the record completed
	RerunsByPause     int `json:"reruns_by_pause"`  // the run's worker was paused past its lease around its effect (a zombie)
	RerunsByWindow    int `json:"reruns_by_window"` // the guard reported IdempotencyLeaseLost / IdempotencyNotRecorded for the run
	RerunsUnexplained int `json:"reruns_unexplained"`

	// The transactional body (the postgres scenario), from the ledger
	// table and the done files. TxEffects: committed rows. TxWindowRuns:
	// runs that wrote their row and reached the window before the commit;
	// TxRolledBack: those whose row never committed, by what stopped them
	// (a kill of the process, a pause, the guard's lease-lost report, or
	// something else — an activity timeout, say). LostTransfers must be 0:
	// operations of completed workflows without their committed row.
	TxEffects           int `json:"tx_effects"`
	TxWindowRuns        int `json:"tx_window_runs"`
	TxRolledBack        int `json:"tx_rolled_back"`
	TxRolledBackByKill  int `json:"tx_rolled_back_by_kill"`
	TxRolledBackByPause int `json:"tx_rolled_back_by_pause"`
	TxRolledBackByLease int `json:"tx_rolled_back_by_lease_lost"`
	TxRolledBackOther   int `json:"tx_rolled_back_other"`
	LostTransfers       int `json:"lost_transfers"`

	// DuplicateEffects must be 0: keyed operations with more than one
	// effect, plus plain re-runs not explained by a kill or the documented
	// window. StuckRecords must be 0: records still INPROGRESS after every
	// lease ran out.
	DuplicateEffects int `json:"duplicate_effects"`
	StuckRecords     int `json:"stuck_records"`
	MissingRecords   int `json:"missing_records"`
	ResultMismatches int `json:"result_mismatches"`

	LoadElapsed time.Duration `json:"-"`
	Elapsed     time.Duration `json:"-"`
	LeaseWait   time.Duration `json:"-"`

	// Violations describe every failed check (capped); empty on success.
	Violations     []string          `json:"violations,omitempty"`
	WorkDir        string            `json:"-"`
	WorkerLogTails map[string]string `json:"-"`
}

// OK reports whether every check passed.
func (r *Report) OK() bool { return len(r.Violations) == 0 }

const maxViolations = 50

func (r *Report) violate(format string, args ...any) {
	if len(r.Violations) < maxViolations {
		r.Violations = append(r.Violations, fmt.Sprintf(format, args...))
	} else if len(r.Violations) == maxViolations {
		r.Violations = append(r.Violations, "… (more violations not listed)")
	}
}

// run is one body run of an operation, from the ledger.
type run struct {
	e     Entry
	dedup bool
}

func (ev *evidence) verify() *Report {
	if ev.window == 0 {
		ev.window = 10 * time.Second
	}
	r := &Report{Keys: len(ev.plan), Workflows: len(ev.workflows), Kills: len(ev.kills), Pauses: len(ev.pauses), WorkerStarts: ev.started, UnexpectedExits: len(ev.unexpected)}
	for _, u := range ev.unexpected {
		r.violate("%s", u)
	}
	for _, c := range ev.corrupt {
		r.violate("corrupt idempotency record: %s", c)
	}

	// Workflows, and what each operation returned to them.
	got := map[string][]OpResult{} // op -> results seen by completed workflows
	for _, pw := range ev.workflows {
		res, ok := ev.results[pw.id]
		switch {
		case !ok:
			r.violate("workflow %s was never started or awaited", pw.id)
			continue
		case res.err != nil:
			r.violate("workflow %s did not complete: %v", pw.id, res.err)
			continue
		}
		r.WorkflowsCompleted++
		check := func(ops []Op, rs []OpResult) {
			if len(rs) != len(ops) {
				r.violate("workflow %s returned %d results for %d operations", pw.id, len(rs), len(ops))
				return
			}
			for i, op := range ops {
				r.Operations++
				got[op.ID] = append(got[op.ID], rs[i])
			}
		}
		check(pw.input.Keyed, res.out.Keyed)
		check(pw.input.Plain, res.out.Plain)
		check(pw.input.Tx, res.out.Tx)
	}

	// The ledger, by operation.
	runs := map[string][]run{}
	events := map[string][]Entry{} // op -> events
	for _, e := range ev.entries {
		p, ok := ev.plan[e.Op]
		if !ok {
			r.violate("ledger entry %s for an unknown operation %q", e.ID, e.Op)
			continue
		}
		switch e.Kind {
		case EntryKeyed:
			r.KeyedEffects++
			runs[e.Op] = append(runs[e.Op], run{e: e})
		case EntryDedup:
			r.KeyedRerunsDeduped++
			runs[e.Op] = append(runs[e.Op], run{e: e, dedup: true})
		case EntryPlain:
			r.PlainEffects++
			runs[e.Op] = append(runs[e.Op], run{e: e})
		case EntryTx:
			r.TxEffects++
			runs[e.Op] = append(runs[e.Op], run{e: e})
		case EntryEvent:
			events[e.Op] = append(events[e.Op], e)
			continue
		default:
			r.violate("ledger entry %s of unknown kind %q", e.ID, e.Kind)
			continue
		}
		if e.Key != p.key {
			r.violate("op %s ran under key %s, want %s (keys must be derived the same on every run)", e.Op, e.Key, p.key)
		}
	}
	doneAt := map[string]time.Time{}   // effect -> earliest time its process returned it as recorded
	windows := map[string][]doneLine{} // op -> transactional runs that reached the window
	for _, d := range ev.done {
		if d.kind == "window" {
			windows[d.op] = append(windows[d.op], d)
			continue
		}
		if t, ok := doneAt[d.effect]; !ok || d.at.Before(t) {
			doneAt[d.effect] = d.at
		}
	}
	killsOf := map[int][]time.Time{}
	for _, k := range ev.kills {
		killsOf[k.PID] = append(killsOf[k.PID], k.At)
	}
	pausesOf := map[int][]Pause{}
	for _, pa := range ev.pauses {
		pausesOf[pa.PID] = append(pausesOf[pa.PID], pa)
	}
	// explain says why run x of op, which did not complete the record,
	// ran: "kill", "pause", "window", or "" (unexplained).
	explain := func(op string, x Entry) string {
		for _, e := range events[op] {
			if e.PID == x.PID && !e.At.Before(x.At.Add(-time.Second)) {
				return "window"
			}
		}
		for _, k := range killsOf[x.PID] {
			if !k.Before(x.At) && k.Sub(x.At) <= ev.window {
				return "kill"
			}
		}
		for _, pa := range pausesOf[x.PID] {
			// Paused after the effect, before completing; or resumed just
			// before it, a zombie that had not yet seen its lease lost.
			end := pa.At.Add(pa.For)
			if !pa.At.Before(x.At) && pa.At.Sub(x.At) <= ev.window || !end.After(x.At) && x.At.Sub(end) <= 2*time.Second {
				return "pause"
			}
		}
		return ""
	}

	ops := make([]string, 0, len(ev.plan))
	for id := range ev.plan {
		ops = append(ops, id)
	}
	sort.Strings(ops)
	for _, id := range ops {
		p := ev.plan[id]
		results := got[id]
		rs := runs[id]
		sort.Slice(rs, func(i, j int) bool { return rs[i].e.At.Before(rs[j].e.At) })
		completed := len(results) > 0

		// What the workflows got must agree, and be what the store holds.
		var effect string
		for i, res := range results {
			if res.Op != id || res.Key != p.key {
				r.ResultMismatches++
				r.violate("op %s: a workflow got a result for op %s key %s, want key %s", id, res.Op, res.Key, p.key)
			}
			if i == 0 {
				effect = res.EffectID
			} else if res.EffectID != effect {
				r.ResultMismatches++
				r.violate("op %s: workflows got different results: effects %s and %s", id, effect, res.EffectID)
			}
		}
		rec := ev.records[p.key]
		switch {
		case rec == nil:
			if completed {
				r.MissingRecords++
				r.violate("op %s: no idempotency record for key %s", id, p.key)
			}
		case rec.Status != store.StatusCompleted:
			r.StuckRecords++
			r.violate("op %s: record %s is %s with lease until %s, checked at %s (stuck)", id, p.key, rec.Status,
				rec.LeaseExpiresAt.Format(time.RFC3339Nano), ev.checkedAt.Format(time.RFC3339Nano))
		default:
			var stored OpResult
			if err := (activity.PayloadCodec{}).Unmarshal(rec.Result, &stored); err != nil {
				r.ResultMismatches++
				r.violate("op %s: stored result does not decode: %v", id, err)
			} else if completed && stored.EffectID != effect {
				r.ResultMismatches++
				r.violate("op %s: the store holds effect %s, the workflows got %s", id, stored.EffectID, effect)
			} else if !completed {
				effect = stored.EffectID
			}
		}

		switch p.kind {
		case KeyedActivity:
			var keyed []Entry
			for _, x := range rs {
				if !x.dedup {
					keyed = append(keyed, x.e)
				}
			}
			if len(keyed) > 1 {
				r.DuplicateEffects += len(keyed) - 1
				r.violate("op %s (keyed): %d effects: %s", id, len(keyed), describe(keyed, killsOf))
			}
			if completed && len(keyed) == 0 {
				r.violate("op %s (keyed): completed without an effect in the ledger", id)
			}
			if len(keyed) == 1 && completed && keyed[0].Effect != effect {
				r.ResultMismatches++
				r.violate("op %s (keyed): the workflows got effect %s, the ledger holds %s", id, effect, keyed[0].Effect)
			}
			// No run may follow the recording of the result, except a
			// zombie's: a run paused past its lease, which resumed after
			// another run had taken the key over and recorded its result,
			// and whose completion the fencing token then refused (a
			// pause, or the guard's lease-lost report, explains it; as for
			// plain bodies, a kill cannot). The first run's process knows
			// when it returned the effect as recorded.
			recorded, hasDone := doneAt[effectOf(rs)]
			live := rs[:0:0]
			for _, x := range rs {
				// Done times are milliseconds: a run is after the
				// recording only if it is after that whole millisecond (a
				// ledger that keeps nanoseconds puts the recorded run
				// itself within it).
				if hasDone && !x.e.At.Before(recorded.Add(time.Millisecond)) {
					if why := explain(id, x.e); why == "pause" || why == "window" {
						continue
					}
					r.RerunsUnexplained++
					r.violate("op %s (keyed): ran again at %s after its first run's result was recorded at %s: %s", id,
						x.e.At.Format(time.RFC3339Nano), recorded.Format(time.RFC3339Nano), describeRuns(rs, killsOf))
					break
				}
				live = append(live, x)
			}
			// Every other run but the last must have been cut short.
			if len(live) > 1 {
				for _, x := range live[:len(live)-1] {
					if explain(id, x.e) == "" {
						r.RerunsUnexplained++
						r.violate("op %s (keyed): run by pid %d at %s was followed by another, with no kill or lease-lost/not-recorded report to explain it: %s",
							id, x.e.PID, x.e.At.Format(time.RFC3339Nano), describeRuns(rs, killsOf))
					}
				}
			}
		case TxActivity:
			// A row exists only if its transaction committed, and the
			// record's completion committed with it: exactly one row per
			// completed operation, the one the workflows got. No re-run
			// needs explaining, because none can leave a row.
			switch {
			case len(rs) > 1:
				r.DuplicateEffects += len(rs) - 1
				r.violate("op %s (tx): %d committed rows: %s", id, len(rs), describeRuns(rs, killsOf))
			case len(rs) == 0 && completed:
				r.LostTransfers++
				r.violate("op %s (tx): completed without a committed row", id)
			case len(rs) == 1 && effect != "" && rs[0].e.Effect != effect:
				r.ResultMismatches++
				r.violate("op %s (tx): the workflows got effect %s, the committed row is %s", id, effect, rs[0].e.Effect)
			}
			committed := map[string]bool{}
			for _, x := range rs {
				committed[x.e.Effect] = true
			}
			for _, w := range windows[id] {
				r.TxWindowRuns++
				if committed[w.effect] {
					continue
				}
				r.TxRolledBack++
				switch explain(id, Entry{PID: w.pid, At: w.at}) {
				case "kill":
					r.TxRolledBackByKill++
				case "pause":
					r.TxRolledBackByPause++
				case "window":
					r.TxRolledBackByLease++
				default:
					r.TxRolledBackOther++
				}
			}
		case PlainActivity:
			if completed && len(rs) == 0 {
				r.violate("op %s (plain): completed without an effect in the ledger", id)
				continue
			}
			if len(rs) == 0 {
				continue
			}
			r.PlainReruns += len(rs) - 1
			var winner *Entry
			for i := range rs {
				if rs[i].e.Effect == effect {
					winner = &rs[i].e
				}
			}
			if effect != "" && winner == nil {
				r.ResultMismatches++
				r.violate("op %s (plain): result effect %s is not in the ledger: %s", id, effect, describeRuns(rs, killsOf))
			}
			var winnerDone time.Time
			if winner != nil {
				winnerDone = doneAt[winner.Effect]
			}
			for _, x := range rs {
				if winner != nil && x.e.Effect == winner.Effect {
					continue
				}
				if _, ok := doneAt[x.e.Effect]; ok {
					r.DuplicateEffects++
					r.RerunsUnexplained++
					r.violate("op %s (plain): effect %s was recorded as the result, yet the op's record holds %s: %s", id, x.e.Effect, effect, describeRuns(rs, killsOf))
					continue
				}
				why := explain(id, x.e)
				if why == "kill" && !winnerDone.IsZero() && x.e.At.After(winnerDone) {
					why = "" // a kill cannot explain a run after the completion was recorded; a zombie can
				}
				switch why {
				case "kill":
					r.RerunsByKill++
				case "pause":
					r.RerunsByPause++
				case "window":
					r.RerunsByWindow++
				default:
					r.DuplicateEffects++
					r.RerunsUnexplained++
					r.violate("op %s (plain): effect %s by pid %d at %s is not explained by a kill or the documented window: %s",
						id, x.e.Effect, x.e.PID, x.e.At.Format(time.RFC3339Nano), describeRuns(rs, killsOf))
				}
			}
		}
	}

	// Records for keys outside the plan, and stuck records among them.
	planned := map[string]bool{}
	for _, p := range ev.plan {
		planned[p.key] = true
	}
	for k, rec := range ev.records {
		if planned[k] {
			continue
		}
		r.violate("idempotency record for a key outside the plan: %s (%s)", k, rec.Status)
		if rec.Status != store.StatusCompleted {
			r.StuckRecords++
		}
	}
	return r
}

// effectOf returns the effect of an operation's keyed runs: the first
// run's, which every later run found in the ledger.
func effectOf(rs []run) string {
	if len(rs) == 0 {
		return ""
	}
	return rs[0].e.Effect
}

func describe(es []Entry, kills map[int][]time.Time) string {
	var b strings.Builder
	for i, e := range es {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "[%s pid %d attempt %d at %s effect %s kills of pid %s]", e.Kind, e.PID, e.Attempt,
			e.At.Format("15:04:05.000"), e.Effect, fmtTimes(kills[e.PID]))
	}
	return b.String()
}

func describeRuns(rs []run, kills map[int][]time.Time) string {
	es := make([]Entry, len(rs))
	for i, x := range rs {
		es[i] = x.e
	}
	return describe(es, kills)
}

func fmtTimes(ts []time.Time) string {
	if len(ts) == 0 {
		return "none"
	}
	s := make([]string, len(ts))
	for i, t := range ts {
		s[i] = t.Format("15:04:05.000")
	}
	return strings.Join(s, ",")
}
