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
// selection>", as README.md documents it — the whole input, or for the
// explicitly keyed activities its ID (guard.WithKeyPath("op")) —
// computed here independently with the RFC 8785 reference implementation.
func expectedKey(kind string, op Op) (string, error) {
	var sel any = op
	if explicitKeyed(kind) {
		sel = op.ID
	}
	b, err := json.Marshal(sel)
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
	calls      []storeCall // the workers' calls logs
	kills      []Kill
	pauses     []Pause
	unexpected []string
	started    int
	checkedAt  time.Time
	// stopAt is when the driver began to stop the workers, after the load.
	stopAt time.Time
	// control: a run without kills, pauses or faults, in which nothing may
	// run twice and no lease may be lost.
	control bool
}

// Report is the outcome of a chaos run.
type Report struct {
	RunID   string `json:"run_id"`
	Seed    uint64 `json:"seed"`
	Store   string `json:"store"`
	Control bool   `json:"control"`

	Workflows          int `json:"workflows"`
	WorkflowsCompleted int `json:"workflows_completed"`
	// Operations counts the guarded activity executions of the completed
	// workflows (a twin's count too); Keys the distinct idempotency keys
	// of the operations, StepKeys those of their steps.
	Operations int `json:"operations"`
	Keys       int `json:"keys"`
	StepKeys   int `json:"step_keys"`
	// LongOps: operations whose body works for longer than its lease.
	LongOps int `json:"long_ops"`

	Workers         int `json:"workers"`
	Kills           int `json:"kills"`
	Pauses          int `json:"pauses"`
	KillsInWindow   int `json:"kills_in_window"`  // timed into the window after a side effect
	PausesInWindow  int `json:"pauses_in_window"` // timed into the window after a side effect
	WorkerStarts    int `json:"worker_starts"`
	UnexpectedExits int `json:"unexpected_worker_exits"`

	Requests    int64       `json:"store_requests"`
	FaultRate   float64     `json:"fault_rate"`
	Faults      FaultCounts `json:"faults"`
	FaultsTotal int64       `json:"faults_total"`

	// Claims, from the workers' calls logs: the claims the guards made,
	// their lease extensions (and those that failed or came back after
	// the lease end), the claims extended before they completed, and the
	// leases lost — a claim whose lease end passed before it completed or
	// was released, or whose token a fenced call found gone — by what
	// explains the loss: a kill of its process before the lease end (the
	// driver stopping the workers counts), a pause across it, an extension
	// or completion sent before it that failed or came back after it; or
	// nothing.
	Claims                int `json:"claims"`
	Extensions            int `json:"extensions"`
	ExtensionsFailed      int `json:"extensions_failed"`
	ExtendedClaims        int `json:"extended_claims"`
	LeasesLost            int `json:"leases_lost"`
	LeasesLostByKill      int `json:"leases_lost_by_kill"`
	LeasesLostByPause     int `json:"leases_lost_by_pause"`
	LeasesLostByFault     int `json:"leases_lost_by_fault"`
	LeasesLostUnexplained int `json:"leases_lost_unexplained"`
	// Zombies: claims lost to a pause whose key another process took over
	// before the pause ended; ZombiesOutrun: those whose taker also
	// completed before it ended; ZombiesFenced: those whose own fenced
	// call (extension, completion, commit) the store then refused.
	Zombies       int `json:"zombies"`
	ZombiesOutrun int `json:"zombies_outrun"`
	ZombiesFenced int `json:"zombies_fenced"`

	// ExtraRuns: body runs that did not make the recorded outcome (keyed
	// re-runs, plain, explicit and step re-runs, transactions rolled back
	// after the body's write), each explained by what cut its claim short.
	ExtraRuns            int `json:"extra_runs"`
	ExtraRunsExplained   int `json:"extra_runs_explained"`
	ExtraRunsByKill      int `json:"extra_runs_by_kill"`
	ExtraRunsByPause     int `json:"extra_runs_by_pause"`
	ExtraRunsByFault     int `json:"extra_runs_by_fault"`
	ExtraRunsByCancel    int `json:"extra_runs_by_cancel"`
	ExtraRunsByStepHeld  int `json:"extra_runs_by_step_held"`
	ExtraRunsDeliberate  int `json:"extra_runs_deliberate"`
	ExtraRunsUnexplained int `json:"extra_runs_unexplained"`
	// LeaseLostReports: the guard's IdempotencyLeaseLost and
	// IdempotencyNotRecorded reports, each explained by a lost claim of
	// the reporting process that a pause or a fault explains.
	LeaseLostReports            int `json:"lease_lost_reports"`
	LeaseLostReportsExplained   int `json:"lease_lost_reports_explained"`
	LeaseLostReportsUnexplained int `json:"lease_lost_reports_unexplained"`

	// Fencing, from the calls logs and the done files; each must be 0.
	// IllegalTakeovers: keys claimed while another claim's confirmed lease
	// was live, or after its outcome was recorded. FencedWritesAccepted:
	// writes the store accepted under a token after another claim took the
	// key over. ConflictingResults: operations for which two processes
	// were told that different results were recorded.
	IllegalTakeovers     int `json:"illegal_takeovers"`
	FencedWritesAccepted int `json:"fenced_writes_accepted"`
	ConflictingResults   int `json:"conflicting_results"`

	// Body runs, from the ledger.
	KeyedEffects int `json:"keyed_effects"`
	// KeyedRerunsDeduped: keyed bodies that ran again and found their key
	// already in the ledger (the downstream closed the window).
	KeyedRerunsDeduped int `json:"keyed_reruns_deduped"`
	PlainEffects       int `json:"plain_effects"`
	PlainReruns        int `json:"plain_reruns"`
	ExplicitEffects    int `json:"explicit_effects"`
	ExplicitReruns     int `json:"explicit_reruns"`
	// Payload validation: operations with a conflicting twin (the same
	// explicit id, another payload), the executions refused with
	// IdempotencyPayloadMismatch, and PayloadViolations (must be 0): a
	// refusal of the recorded payload, an execution handed a result made
	// for another payload, a conflict nobody refused.
	PayloadConflicts  int `json:"payload_conflicts"`
	PayloadRefusals   int `json:"payload_refusals"`
	PayloadViolations int `json:"payload_violations"`
	// Steps: step effects, re-runs of steps, and the deliberate failures
	// after a first step.
	StepEffects        int `json:"step_effects"`
	StepReruns         int `json:"step_reruns"`
	DeliberateFailures int `json:"deliberate_failures"`

	// The transactional bodies, from the ledger and the done files.
	// TxEffects: committed rows (steps' included). TxWindowRuns: runs that
	// wrote their row and reached the window before the commit;
	// TxRolledBack: those whose row never committed, by what stopped them.
	// LostTransfers must be 0: operations of completed workflows without
	// their committed row.
	TxEffects               int `json:"tx_effects"`
	TxWindowRuns            int `json:"tx_window_runs"`
	TxRolledBack            int `json:"tx_rolled_back"`
	TxRolledBackByKill      int `json:"tx_rolled_back_by_kill"`
	TxRolledBackByPause     int `json:"tx_rolled_back_by_pause"`
	TxRolledBackByFault     int `json:"tx_rolled_back_by_fault"`
	TxRolledBackByCancel    int `json:"tx_rolled_back_by_cancel"`
	TxRolledBackByStepHeld  int `json:"tx_rolled_back_by_step_held"`
	TxRolledBackDeliberate  int `json:"tx_rolled_back_deliberate"`
	TxRolledBackUnexplained int `json:"tx_rolled_back_unexplained"`
	LostTransfers           int `json:"lost_transfers"`

	// DuplicateEffects must be 0: a keyed operation with more than one
	// effect, a committed row too many, a plain, explicit or step effect
	// beyond the recorded one that nothing explains. StuckRecords must be
	// 0: records still INPROGRESS after every lease ran out.
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

// execution is one execution of an operation by a completed workflow.
type execution struct {
	call Call
	res  OpResult
}

// verifier holds what the checks share.
type verifier struct {
	ev       *evidence
	planned  map[string]int // op -> executions planned (every workflow's)
	r        *Report
	cs       *claims
	killsOf  map[int][]time.Time
	failedAt map[procOp][]time.Time // deliberate failures, by process and op
	cancelAt map[procOp][]time.Time // attempts that failed after Temporal ended their context, by process and op
	heldAt   map[procOp][]time.Time // claims of an op's step key that met another live claim, by process and op
}

type procOp struct {
	pid int
	op  string
}

func (ev *evidence) verify() *Report {
	r := &Report{Keys: len(ev.plan), Workflows: len(ev.workflows), Kills: len(ev.kills), Pauses: len(ev.pauses),
		WorkerStarts: ev.started, UnexpectedExits: len(ev.unexpected), Control: ev.control}
	for _, u := range ev.unexpected {
		r.violate("%s", u)
	}
	for _, c := range ev.corrupt {
		r.violate("corrupt idempotency record: %s", c)
	}
	if ev.control && (len(ev.kills) > 0 || len(ev.pauses) > 0) {
		r.violate("control run: %d kills and %d pauses, want none", len(ev.kills), len(ev.pauses))
	}
	v := &verifier{ev: ev, r: r, killsOf: map[int][]time.Time{}, failedAt: map[procOp][]time.Time{}, cancelAt: map[procOp][]time.Time{}, heldAt: map[procOp][]time.Time{}}
	for _, k := range ev.kills {
		v.killsOf[k.PID] = append(v.killsOf[k.PID], k.At)
		if k.InWindow {
			r.KillsInWindow++
		}
	}
	pausesOf := map[int][]Pause{}
	for _, pa := range ev.pauses {
		pausesOf[pa.PID] = append(pausesOf[pa.PID], pa)
		if pa.InWindow {
			r.PausesInWindow++
		}
	}
	v.cs = buildClaims(ev.calls)
	v.cs.analyse(v.killsOf, pausesOf, ev.stopAt)
	v.leases(pausesOf)
	v.cs.takeovers(r)

	// Workflows, and what each operation returned to them.
	got := map[string][]execution{}
	v.planned = map[string]int{}
	for _, pw := range ev.workflows {
		for _, c := range pw.input.Calls {
			v.planned[c.Op.ID]++
		}
	}
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
		if len(res.out.Results) != len(pw.input.Calls) {
			r.violate("workflow %s returned %d results for %d operations", pw.id, len(res.out.Results), len(pw.input.Calls))
			continue
		}
		for i, c := range pw.input.Calls {
			r.Operations++
			got[c.Op.ID] = append(got[c.Op.ID], execution{call: c, res: res.out.Results[i]})
		}
	}

	// The ledger, by operation.
	runs := map[string][]Entry{}   // op -> effects (keyed, dedup, plain, explicit, tx)
	steps := map[string][]Entry{}  // op -> step effects (committed rows, for transactional steps)
	events := map[string][]Entry{} // op -> the guard's reports of a lost lease
	stepKeys := map[string]bool{}
	for _, e := range ev.entries {
		p, ok := ev.plan[e.Op]
		if !ok {
			r.violate("ledger entry %s for an unknown operation %q", e.ID, e.Op)
			continue
		}
		switch e.Kind {
		case EntryKeyed:
			r.KeyedEffects++
		case EntryDedup:
			r.KeyedRerunsDeduped++
		case EntryPlain:
			r.PlainEffects++
		case EntryExplicit:
			r.ExplicitEffects++
		case EntryTx:
			r.TxEffects++
		case EntryStep, EntryTxStep:
			if e.Kind == EntryTxStep {
				r.TxEffects++
			}
			r.StepEffects++
			steps[e.Op] = append(steps[e.Op], e)
			stepKeys[e.Key] = true
			continue
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
		runs[e.Op] = append(runs[e.Op], e)
	}
	doneOf := map[string][]doneLine{}  // op -> the results processes were told were recorded
	windows := map[string][]doneLine{} // key -> transactional runs that reached the window
	for _, d := range ev.done {
		switch d.kind {
		case "window":
			if d.key != "" {
				windows[d.key] = append(windows[d.key], d)
			}
			if stepped(kindOf(ev.plan, d.op)) && d.key != "" {
				stepKeys[d.key] = true
			}
		case "fail":
			r.DeliberateFailures++
			po := procOp{d.pid, d.op}
			v.failedAt[po] = append(v.failedAt[po], d.at)
		case "cancel":
			po := procOp{d.pid, d.op}
			v.cancelAt[po] = append(v.cancelAt[po], d.at)
		case "done":
			doneOf[d.op] = append(doneOf[d.op], d)
		}
	}
	r.StepKeys = len(stepKeys)
	// A step's key belongs to its op (its window lines say which: a key of
	// the op's other than its own); a claim of it that met another live
	// claim refused the step.
	opOfStep := map[string]string{}
	for _, d := range ev.done {
		if p, ok := ev.plan[d.op]; ok && d.kind == "window" && d.key != "" && d.key != p.key {
			opOfStep[d.key] = d.op
		}
	}
	for _, c := range ev.calls {
		if op, ok := opOfStep[c.key]; ok && c.call == callAcquire && c.result == resConflict {
			po := procOp{c.pid, op}
			v.heldAt[po] = append(v.heldAt[po], c.end)
		}
	}

	ops := make([]string, 0, len(ev.plan))
	for id := range ev.plan {
		ops = append(ops, id)
	}
	sort.Strings(ops)
	for _, id := range ops {
		p := ev.plan[id]
		if p.long {
			r.LongOps++
		}
		if p.conflict != "" {
			r.PayloadConflicts++
		}
		effect, completed := v.results(p, got[id])
		v.doneLines(p, effect, doneOf[id])
		rs := runs[id]
		sort.Slice(rs, func(i, j int) bool { return rs[i].At.Before(rs[j].At) })
		switch p.kind {
		case KeyedActivity:
			v.keyed(p, rs, effect, completed)
		case PlainActivity, ExplicitActivity:
			v.plain(p, rs, effect, completed)
		case StepsActivity:
			v.steps(p, steps[id], got[id], completed, false, nil)
		case TxActivity, TxExplicitActivity:
			v.tx(p, p.key, rs, windows[p.key], effect, completed)
		case TxStepsActivity:
			v.steps(p, steps[id], got[id], completed, true, windows)
		}
	}
	v.events(events, steps)

	// Records for keys outside the plan, and stuck records among them.
	planned := map[string]bool{}
	for _, p := range ev.plan {
		planned[p.key] = true
	}
	for k := range stepKeys {
		planned[k] = true
	}
	recKeys := make([]string, 0, len(ev.records))
	for k := range ev.records {
		recKeys = append(recKeys, k)
	}
	sort.Strings(recKeys)
	for _, k := range recKeys {
		if planned[k] {
			continue
		}
		rec := ev.records[k]
		r.violate("idempotency record for a key outside the plan: %s (%s)", k, rec.Status)
		if rec.Status != store.StatusCompleted {
			r.StuckRecords++
		}
	}
	r.ExtraRunsExplained = r.ExtraRuns - r.ExtraRunsUnexplained
	r.LeaseLostReportsExplained = r.LeaseLostReports - r.LeaseLostReportsUnexplained
	return r
}

func kindOf(plan map[string]*opPlan, op string) string {
	if p, ok := plan[op]; ok {
		return p.kind
	}
	return ""
}

// leases counts the claims and their lost leases; a loss nothing explains
// is a violation, and in a control run every loss is.
func (v *verifier) leases(pausesOf map[int][]Pause) {
	r := v.r
	tokens := make([]string, 0, len(v.cs.byToken))
	for t := range v.cs.byToken {
		tokens = append(tokens, t)
	}
	sort.Strings(tokens)
	for _, t := range tokens {
		cl := v.cs.byToken[t]
		r.Claims++
		r.Extensions += cl.extended
		r.ExtensionsFailed += cl.failedExt
		if cl.extended > 0 && !cl.completed.IsZero() && !cl.lost {
			r.ExtendedClaims++
		}
		if !cl.lost {
			continue
		}
		r.LeasesLost++
		switch cl.cause {
		case causeKill, causeStop:
			r.LeasesLostByKill++
		case causePause:
			r.LeasesLostByPause++
			v.zombie(cl, pausesOf[cl.pid])
		case causeFault:
			r.LeasesLostByFault++
		default:
			r.LeasesLostUnexplained++
			r.violate("key %s: lease lost: %s", cl.key, cl.describe())
			continue
		}
		if v.ev.control {
			r.violate("control run: key %s: lease lost (%s): %s", cl.key, cl.cause, cl)
		}
	}
}

// zombie counts a claim lost to a pause whose key another claim took over
// while the process was paused.
func (v *verifier) zombie(cl *claim, pauses []Pause) {
	var pa *Pause
	for i := range pauses {
		if !pauses[i].At.After(cl.leaseEnd.Add(leaseTolerance)) && pauses[i].At.Add(pauses[i].For).After(cl.leaseEnd) {
			pa = &pauses[i]
			break
		}
	}
	if pa == nil {
		return
	}
	end := pa.At.Add(pa.For)
	for _, o := range v.cs.byKey[cl.key] {
		if o != cl && o.acquired.After(cl.acquired) && o.acquired.Before(end) {
			v.r.Zombies++
			if !o.completed.IsZero() && o.completed.Before(end) {
				v.r.ZombiesOutrun++
			}
			if !cl.fenced.IsZero() {
				v.r.ZombiesFenced++
			}
			return
		}
	}
}

// results checks what the workflows got for operation p against each
// other and the store, and returns the recorded effect and whether the
// operation completed.
func (v *verifier) results(p *opPlan, execs []execution) (effect string, completed bool) {
	r := v.r
	var refused, ran []execution
	for _, x := range execs {
		if x.res.Refused != "" {
			refused = append(refused, x)
		} else {
			ran = append(ran, x)
		}
	}
	completed = len(ran) > 0
	for i, x := range ran {
		res := x.res
		if res.Op != p.id || res.Key != p.key {
			r.ResultMismatches++
			r.violate("op %s: a workflow got a result for op %s key %s, want key %s", p.id, res.Op, res.Key, p.key)
		}
		if explicitKeyed(p.kind) && res.Payload != x.call.Op.Payload {
			r.PayloadViolations++
			r.violate("op %s: an execution with payload %q got the result of a run with payload %q (effect %s)", p.id, x.call.Op.Payload, res.Payload, res.EffectID)
		}
		if i == 0 {
			effect = res.EffectID
		} else if res.EffectID != effect {
			r.ResultMismatches++
			r.violate("op %s: workflows got different results: effects %s and %s", p.id, effect, res.EffectID)
		}
	}
	rec := v.ev.records[p.key]
	var stored OpResult
	switch {
	case rec == nil:
		if completed {
			r.MissingRecords++
			r.violate("op %s: no idempotency record for key %s", p.id, p.key)
		}
	case rec.Status != store.StatusCompleted:
		r.StuckRecords++
		r.violate("op %s: record %s is %s with lease until %s, checked at %s (stuck)", p.id, p.key, rec.Status,
			rec.LeaseExpiresAt.Format(time.RFC3339Nano), v.ev.checkedAt.Format(time.RFC3339Nano))
	default:
		if err := (activity.PayloadCodec{}).Unmarshal(rec.Result, &stored); err != nil {
			r.ResultMismatches++
			r.violate("op %s: stored result does not decode: %v", p.id, err)
		} else if completed && stored.EffectID != effect {
			r.ResultMismatches++
			r.violate("op %s: the store holds effect %s, the workflows got %s", p.id, stored.EffectID, effect)
		} else if !completed {
			effect = stored.EffectID
		}
	}
	if !explicitKeyed(p.kind) {
		for _, x := range refused {
			r.violate("op %s: refused with %s, but its activity validates no payload", p.id, x.res.Refused)
		}
		return effect, completed
	}
	// Payload validation: one payload is recorded; every execution with
	// another was refused, none with the recorded one.
	winner := stored.Payload
	if winner == "" && completed {
		winner = ran[0].res.Payload
	}
	for _, x := range ran {
		if x.call.Op.Payload != winner {
			r.PayloadViolations++
			r.violate("op %s: an execution with payload %q was not refused, though payload %q is recorded", p.id, x.call.Op.Payload, winner)
		}
	}
	for _, x := range refused {
		switch {
		case x.res.Refused != activity.ErrorTypePayloadMismatch:
			r.PayloadViolations++
			r.violate("op %s: refused with %s, want %s", p.id, x.res.Refused, activity.ErrorTypePayloadMismatch)
		case x.call.Op.Payload == winner:
			r.PayloadViolations++
			r.violate("op %s: an execution with the recorded payload %q was refused", p.id, winner)
		default:
			r.PayloadRefusals++
		}
	}
	if p.conflict != "" && len(refused) == 0 && len(execs) == v.planned[p.id] {
		r.PayloadViolations++
		r.violate("op %s: payloads %q and %q share an explicit key and neither was refused", p.id, p.payload, p.conflict)
	}
	return effect, completed
}

// doneLines checks what the processes were told was recorded for p: all
// of them the same result, the recorded one.
func (v *verifier) doneLines(p *opPlan, effect string, done []doneLine) {
	seen := map[string][]int{}
	for _, d := range done {
		seen[d.effect] = append(seen[d.effect], d.pid)
	}
	if len(seen) > 1 {
		v.r.ConflictingResults++
		v.r.violate("op %s: processes were told different results were recorded: %v", p.id, seen)
	}
	for e, pids := range seen {
		if effect != "" && e != effect {
			v.r.DuplicateEffects++
			v.r.violate("op %s: effect %s was recorded as the result for pid %v, yet the op's record holds %s", p.id, e, pids, effect)
		}
	}
}

// extraRun accounts for a run of key by pid at `at` that did not make the
// recorded outcome: something must have cut its claim short — its lease
// lost to a kill, a pause or a fault of its process across the lease end,
// or (tx) its transaction rolled back after a deliberate failure or a
// failed commit. It returns the cause, "" when nothing explains the run.
func (v *verifier) extraRun(op string, pid int, key string, at time.Time) (string, *claim) {
	r := v.r
	r.ExtraRuns++
	cl := v.cs.at(pid, key, at)
	cause := ""
	switch {
	case cl == nil:
	case cl.lost:
		cause = cl.cause
	case !cl.released.IsZero():
		for _, t := range v.failedAt[procOp{pid, op}] {
			if !t.Before(at.Add(-time.Millisecond)) {
				cause = causeDeliberate
			}
		}
		for _, x := range cl.calls {
			if cause == "" && (x.call == callCommit || x.call == callTxComplete) && x.result == resError {
				cause = causeFault
			}
		}
		// The attempt's context ended (Temporal timed the attempt out or
		// cancelled it), a store call of the body failed, and the call gave
		// its key back: noted by the process when the call returned, so
		// after the release, and within a second of it (a later attempt's
		// cancel explains nothing of this one).
		for _, t := range v.cancelAt[procOp{pid, op}] {
			if cause == "" && !t.Before(at.Add(-time.Millisecond)) && !t.Before(cl.released.Add(-time.Millisecond)) && t.Before(cl.released.Add(cancelNoted)) {
				cause = causeCancel
			}
		}
		// A step of the body met its key held by another live claim (an
		// earlier attempt's, cut short by a kill, a pause or Temporal,
		// whose lease had not run out): the call failed with
		// ErrInProgress between its run and its release.
		for _, t := range v.heldAt[procOp{pid, op}] {
			if cause == "" && !t.Before(at.Add(-time.Millisecond)) && !t.After(cl.released.Add(time.Millisecond)) {
				cause = causeStepHeld
			}
		}
	}
	switch cause {
	case causeKill, causeStop:
		r.ExtraRunsByKill++
	case causePause:
		r.ExtraRunsByPause++
	case causeFault:
		r.ExtraRunsByFault++
	case causeCancel:
		r.ExtraRunsByCancel++
	case causeStepHeld:
		r.ExtraRunsByStepHeld++
	case causeDeliberate:
		r.ExtraRunsDeliberate++
	default:
		r.ExtraRunsUnexplained++
	}
	if v.ev.control && cause != causeDeliberate && cause != "" {
		r.violate("control run: op %s: pid %d ran key %s again at %s (%s)", op, pid, key, clock(at), cause)
	}
	return cause, cl
}

// why describes a run's claim for a violation.
func why(pid int, key string, at time.Time, cl *claim) string {
	if cl == nil {
		return fmt.Sprintf("pid %d holds no claim of key %s at %s in its calls log", pid, key, clock(at))
	}
	return cl.describe()
}

// keyed checks a keyed operation: one effect, the recorded one; every
// other run (closed downstream by the key) explained.
func (v *verifier) keyed(p *opPlan, rs []Entry, effect string, completed bool) {
	r := v.r
	var keyed []Entry
	for _, x := range rs {
		if x.Kind == EntryKeyed {
			keyed = append(keyed, x)
		}
	}
	if len(keyed) > 1 {
		r.DuplicateEffects += len(keyed) - 1
		r.violate("op %s (keyed): %d effects: %s", p.id, len(keyed), describe(keyed, v.killsOf))
	}
	if completed && len(keyed) == 0 {
		r.violate("op %s (keyed): completed without an effect in the ledger", p.id)
	}
	if len(keyed) == 1 && effect != "" && keyed[0].Effect != effect {
		r.ResultMismatches++
		r.violate("op %s (keyed): the workflows got effect %s, the ledger holds %s", p.id, effect, keyed[0].Effect)
	}
	rec := v.recordedRun(p.key, rs, "")
	for i, x := range rs {
		if i == rec {
			continue
		}
		if cause, cl := v.extraRun(p.id, x.PID, p.key, x.At); cause == "" {
			r.violate("op %s (keyed): the run by pid %d at %s did not make the recorded outcome, and nothing explains it: %s; runs %s",
				p.id, x.PID, clock(x.At), why(x.PID, p.key, x.At, cl), describe(rs, v.killsOf))
		}
	}
}

// recordedRun returns the index of the run among rs that made the
// recorded outcome: the one whose claim completed, else the one whose
// effect is effect (when given), else the last.
func (v *verifier) recordedRun(key string, rs []Entry, effect string) int {
	for i, x := range rs {
		if cl := v.cs.at(x.PID, key, x.At); cl != nil && !cl.completed.IsZero() {
			return i
		}
	}
	for i, x := range rs {
		if effect != "" && x.Effect == effect {
			return i
		}
	}
	return len(rs) - 1
}

// plain checks a plain or explicitly keyed operation: at least one effect
// when completed, the recorded one in the ledger, every other explained.
func (v *verifier) plain(p *opPlan, rs []Entry, effect string, completed bool) {
	r := v.r
	name := "plain"
	if p.kind == ExplicitActivity {
		name = "explicit"
		r.ExplicitReruns += max(len(rs)-1, 0)
	} else {
		r.PlainReruns += max(len(rs)-1, 0)
	}
	if completed && len(rs) == 0 {
		r.violate("op %s (%s): completed without an effect in the ledger", p.id, name)
		return
	}
	winner := -1
	for i := range rs {
		if rs[i].Effect == effect {
			winner = i
		}
	}
	if effect != "" && winner < 0 {
		r.ResultMismatches++
		r.violate("op %s (%s): result effect %s is not in the ledger: %s", p.id, name, effect, describe(rs, v.killsOf))
	}
	for i, x := range rs {
		if i == winner {
			continue
		}
		if cause, cl := v.extraRun(p.id, x.PID, p.key, x.At); cause == "" {
			r.DuplicateEffects++
			r.violate("op %s (%s): effect %s by pid %d at %s is not explained: %s; runs %s",
				p.id, name, x.Effect, x.PID, clock(x.At), why(x.PID, p.key, x.At, cl), describe(rs, v.killsOf))
		}
	}
}

// steps checks a stepped operation: per step, one key, one recorded
// effect that every execution got, every other run explained (tx: one
// committed row, every rolled-back run explained).
func (v *verifier) steps(p *opPlan, es []Entry, execs []execution, completed, tx bool, windows map[string][]doneLine) {
	r := v.r
	byStep := map[string][]Entry{}
	keyOf := map[string]string{}
	for _, e := range es {
		byStep[e.Step] = append(byStep[e.Step], e)
		if k, ok := keyOf[e.Step]; ok && k != e.Key {
			r.violate("op %s: step %s ran under keys %s and %s", p.id, e.Step, k, e.Key)
		}
		keyOf[e.Step] = e.Key
	}
	names := []string{"a", "b"}
	for _, name := range names {
		rs := byStep[name]
		sort.Slice(rs, func(i, j int) bool { return rs[i].At.Before(rs[j].At) })
		key := keyOf[name]
		if key == "" {
			if completed {
				r.violate("op %s: completed without an effect of step %s in the ledger", p.id, name)
			}
			continue
		}
		r.StepReruns += max(len(rs)-1, 0)
		var effect string
		if rec := v.ev.records[key]; rec == nil {
			if completed {
				r.MissingRecords++
				r.violate("op %s: no idempotency record for step %s (key %s)", p.id, name, key)
			}
		} else if rec.Status != store.StatusCompleted {
			r.StuckRecords++
			r.violate("op %s: the record of step %s (key %s) is %s (stuck)", p.id, name, key, rec.Status)
		} else if err := json.Unmarshal(rec.Result, &effect); err != nil {
			r.ResultMismatches++
			r.violate("op %s: the record of step %s does not decode: %v", p.id, name, err)
		}
		for _, x := range execs {
			if x.res.Refused == "" && x.res.Steps[name] != effect {
				r.ResultMismatches++
				r.violate("op %s: an execution got effect %s for step %s, whose record holds %s", p.id, x.res.Steps[name], name, effect)
			}
		}
		if tx {
			v.tx(p, key, rs, windows[key], effect, completed)
			continue
		}
		winner := -1
		for i := range rs {
			if rs[i].Effect == effect {
				winner = i
			}
		}
		if effect != "" && winner < 0 {
			r.ResultMismatches++
			r.violate("op %s: step %s's recorded effect %s is not in the ledger: %s", p.id, name, effect, describe(rs, v.killsOf))
		}
		for i, x := range rs {
			if i == winner {
				continue
			}
			if cause, cl := v.extraRun(p.id, x.PID, key, x.At); cause == "" {
				r.DuplicateEffects++
				r.violate("op %s: step %s's effect %s by pid %d at %s is not explained: %s; runs %s",
					p.id, name, x.Effect, x.PID, clock(x.At), why(x.PID, key, x.At, cl), describe(rs, v.killsOf))
			}
		}
	}
}

// tx checks the committed rows of key (an operation's or a transactional
// step's): exactly one, the recorded one, for a completed operation; every
// run that wrote a row that did not commit is explained.
func (v *verifier) tx(p *opPlan, key string, rs []Entry, windows []doneLine, effect string, completed bool) {
	r := v.r
	switch {
	case len(rs) > 1:
		r.DuplicateEffects += len(rs) - 1
		r.violate("op %s (tx): %d committed rows for key %s: %s", p.id, len(rs), key, describe(rs, v.killsOf))
	case len(rs) == 0 && completed:
		r.LostTransfers++
		r.violate("op %s (tx): completed without a committed row for key %s", p.id, key)
	case len(rs) == 1 && effect != "" && rs[0].Effect != effect:
		r.ResultMismatches++
		r.violate("op %s (tx): the workflows got effect %s, the committed row for key %s is %s", p.id, effect, key, rs[0].Effect)
	}
	committed := map[string]bool{}
	for _, x := range rs {
		committed[x.Effect] = true
	}
	sort.Slice(windows, func(i, j int) bool { return windows[i].at.Before(windows[j].at) })
	for _, w := range windows {
		r.TxWindowRuns++
		if committed[w.effect] {
			continue
		}
		r.TxRolledBack++
		cause, cl := v.extraRun(p.id, w.pid, key, w.at)
		switch cause {
		case causeKill, causeStop:
			r.TxRolledBackByKill++
		case causePause:
			r.TxRolledBackByPause++
		case causeFault:
			r.TxRolledBackByFault++
		case causeCancel:
			r.TxRolledBackByCancel++
		case causeStepHeld:
			r.TxRolledBackByStepHeld++
		case causeDeliberate:
			r.TxRolledBackDeliberate++
		default:
			r.TxRolledBackUnexplained++
			r.violate("op %s (tx): the run by pid %d at %s rolled back its row %s, and nothing explains it: %s",
				p.id, w.pid, clock(w.at), w.effect, why(w.pid, key, w.at, cl))
		}
	}
}

// events checks the guard's reports of a lost lease: each must come with a
// lost claim of the reporting process on the operation's key (or one of
// its steps' keys), acquired in the run that reported it, whose loss a
// pause or a fault explains.
func (v *verifier) events(events map[string][]Entry, steps map[string][]Entry) {
	r := v.r
	ops := make([]string, 0, len(events))
	for op := range events {
		ops = append(ops, op)
	}
	sort.Strings(ops)
	for _, op := range ops {
		p := v.ev.plan[op]
		skeys := map[string]bool{}
		for _, e := range steps[op] {
			skeys[e.Key] = true
		}
		for _, e := range events[op] {
			r.LeaseLostReports++
			// The claim whose loss was reported: the last claim of the
			// reporting process on the op's key or its steps' keys that
			// was lost by the time of the report (an attempt of the same
			// op retried in the same process may have claimed the key
			// again since).
			var lost, c0 *claim
			for _, k := range append([]string{p.key}, sortedKeys(skeys)...) {
				for _, cl := range v.cs.byProc[procKey{e.PID, k}] {
					if cl.acquired.After(e.At.Add(time.Millisecond)) {
						break
					}
					if k == p.key {
						c0 = cl
					}
					if cl.lost && (cl.fencedLive || !cl.leaseEnd.After(e.At.Add(time.Millisecond))) && (lost == nil || cl.acquired.After(lost.acquired)) {
						lost = cl
					}
				}
			}
			cause := ""
			if lost != nil {
				cause, c0 = lost.cause, lost
			}
			if v.ev.control {
				r.violate("control run: op %s: pid %d reported %s at %s", op, e.PID, e.Event, clock(e.At))
			}
			if cause == "" {
				r.LeaseLostReportsUnexplained++
				desc := why(e.PID, p.key, e.At, c0)
				r.violate("op %s: pid %d reported %s at %s, and no pause or fault of its own across its lease end explains it: %s", op, e.PID, e.Event, clock(e.At), desc)
			}
		}
	}
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func describe(es []Entry, kills map[int][]time.Time) string {
	var b strings.Builder
	for i, e := range es {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "[%s pid %d attempt %d at %s effect %s", e.Kind, e.PID, e.Attempt, e.At.Format("15:04:05.000"), e.Effect)
		if e.Payload != "" {
			fmt.Fprintf(&b, " payload %s", e.Payload)
		}
		fmt.Fprintf(&b, " kills of pid %s]", fmtTimes(kills[e.PID]))
	}
	return b.String()
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
