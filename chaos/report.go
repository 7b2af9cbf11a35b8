package chaos

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
)

// Print writes the report as human-readable lines followed by one JSON
// line (prefixed by nothing, so `tail -1 | jq` reads it).
func (r *Report) Print(w io.Writer) {
	status := "PASS"
	if !r.OK() {
		status = "FAIL"
	}
	control := ""
	if r.Control {
		control = " (control run: no kills, pauses or faults)"
	}
	fmt.Fprintf(w, "chaos run %s (seed %d): %s%s\n", r.RunID, r.Seed, status, control)
	fmt.Fprintf(w, "  operations:        %d guarded activity executions in %d/%d completed workflows, %d keys and %d step keys; %d bodies longer than the lease\n",
		r.Operations, r.WorkflowsCompleted, r.Workflows, r.Keys, r.StepKeys, r.LongOps)
	fmt.Fprintf(w, "  kills:             %d SIGKILLs of %d workers (%d in the window after a side effect; %d worker processes started), %d pauses past the lease (%d in the window), %d unexpected exits\n",
		r.Kills, r.Workers, r.KillsInWindow, r.WorkerStarts, r.Pauses, r.PausesInWindow, r.UnexpectedExits)
	switch r.Store {
	case StorePostgres:
		fmt.Fprintf(w, "  store:             PostgreSQL, transactional bodies (guard.DoTx); no fault proxy: the faults are the kills and pauses\n")
	case StoreDynamoDBTx:
		fmt.Fprintf(w, "  store:             DynamoDB, transactional bodies (guard.DoTx, one TransactWriteItems), through the fault proxy\n")
	case StoreRedis:
		fmt.Fprintf(w, "  store:             Redis (store/redis), keyed and plain bodies, through the TCP fault proxy; requests are commands\n")
	}
	if r.Store != StorePostgres {
		fmt.Fprintf(w, "  faults injected:   %d of %d store requests (rate %.1f%%): %s\n",
			r.FaultsTotal, r.Requests, 100*r.FaultRate, r.Faults)
	}
	fmt.Fprintf(w, "  leases:            %d claims, %d extended before they completed (%d extensions, %d failed or late); %d lost: %d by a kill, %d by a pause, %d by a faulted or slow store call; %d unexplained\n",
		r.Claims, r.ExtendedClaims, r.Extensions, r.ExtensionsFailed, r.LeasesLost, r.LeasesLostByKill, r.LeasesLostByPause, r.LeasesLostByFault, r.LeasesLostUnexplained)
	fmt.Fprintf(w, "  zombies:           %d paused holders whose key was taken over before they resumed (%d also completed by the taker); %d of them refused by the fencing token\n",
		r.Zombies, r.ZombiesOutrun, r.ZombiesFenced)
	fmt.Fprintf(w, "  extra runs:        %d: %d explained (%d by a kill, %d by a pause, %d by a faulted or slow store call, %d by an attempt Temporal cancelled, %d by a step held by an earlier attempt, %d deliberate failures), %d unexplained\n",
		r.ExtraRuns, r.ExtraRunsExplained, r.ExtraRunsByKill, r.ExtraRunsByPause, r.ExtraRunsByFault, r.ExtraRunsByCancel, r.ExtraRunsByStepHeld, r.ExtraRunsDeliberate, r.ExtraRunsUnexplained)
	fmt.Fprintf(w, "  lease lost:        %d reports (IdempotencyLeaseLost, IdempotencyNotRecorded): %d explained, %d unexplained\n",
		r.LeaseLostReports, r.LeaseLostReportsExplained, r.LeaseLostReportsUnexplained)
	if r.Store == StorePostgres || r.Store == StoreDynamoDBTx {
		fmt.Fprintf(w, "  tx bodies:         %d committed rows; %d runs reached the window between a row and the commit, %d rolled back there: %d by a kill, %d by a pause, %d by a faulted or slow store call, %d by an attempt Temporal cancelled, %d by a step held by an earlier attempt, %d deliberately; %d unexplained\n",
			r.TxEffects, r.TxWindowRuns, r.TxRolledBack, r.TxRolledBackByKill, r.TxRolledBackByPause, r.TxRolledBackByFault, r.TxRolledBackByCancel, r.TxRolledBackByStepHeld, r.TxRolledBackDeliberate, r.TxRolledBackUnexplained)
		fmt.Fprintf(w, "  lost transfers:    %d (must be 0: completed operations without their committed row)\n", r.LostTransfers)
	} else {
		fmt.Fprintf(w, "  keyed bodies:      %d effects, %d re-runs closed downstream by the key\n", r.KeyedEffects, r.KeyedRerunsDeduped)
		fmt.Fprintf(w, "  plain bodies:      %d effects (%d re-runs); explicitly keyed: %d effects (%d re-runs)\n", r.PlainEffects, r.PlainReruns, r.ExplicitEffects, r.ExplicitReruns)
	}
	fmt.Fprintf(w, "  steps:             %d step effects (%d re-runs), %d deliberate failures after a first step\n", r.StepEffects, r.StepReruns, r.DeliberateFailures)
	fmt.Fprintf(w, "  payloads:          %d conflicting twins, %d executions refused; %d violations (must be 0)\n", r.PayloadConflicts, r.PayloadRefusals, r.PayloadViolations)
	fmt.Fprintf(w, "  fencing:           %d illegal takeovers, %d fenced writes accepted after a takeover, %d ops told two results (each must be 0)\n",
		r.IllegalTakeovers, r.FencedWritesAccepted, r.ConflictingResults)
	fmt.Fprintf(w, "  duplicate effects: %d (must be 0)\n", r.DuplicateEffects)
	fmt.Fprintf(w, "  stuck records:     %d (must be 0; checked %s after the workers stopped), %d missing, %d result mismatches\n",
		r.StuckRecords, r.LeaseWait, r.MissingRecords, r.ResultMismatches)
	fmt.Fprintf(w, "  elapsed:           %.1fs (load %.1fs)\n", r.Elapsed.Seconds(), r.LoadElapsed.Seconds())
	for _, v := range r.Violations {
		fmt.Fprintf(w, "  VIOLATION: %s\n", v)
	}
	if !r.OK() {
		fmt.Fprintf(w, "  work dir (worker logs, done files, calls logs): %s\n", r.WorkDir)
		names := make([]string, 0, len(r.WorkerLogTails))
		for n := range r.WorkerLogTails {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			fmt.Fprintf(w, "  --- tail of %s ---\n%s\n", n, r.WorkerLogTails[n])
		}
	}
	b, _ := json.Marshal(r.jsonForm())
	fmt.Fprintf(w, "%s\n", b)
}

// jsonForm is the report with durations in seconds.
func (r *Report) jsonForm() any {
	type alias Report
	return struct {
		*alias
		OK             bool    `json:"ok"`
		ElapsedSeconds float64 `json:"elapsed_seconds"`
		LoadSeconds    float64 `json:"load_seconds"`
	}{(*alias)(r), r.OK(), round(r.Elapsed.Seconds()), round(r.LoadElapsed.Seconds())}
}

func round(x float64) float64 { return float64(int64(x*10+0.5)) / 10 }
