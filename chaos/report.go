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
	fmt.Fprintf(w, "chaos run %s (seed %d): %s\n", r.RunID, r.Seed, status)
	fmt.Fprintf(w, "  operations:        %d guarded activity executions in %d/%d completed workflows, %d keys\n",
		r.Operations, r.WorkflowsCompleted, r.Workflows, r.Keys)
	fmt.Fprintf(w, "  kills:             %d SIGKILLs of %d workers (%d worker processes started), %d pauses past the lease, %d unexpected exits\n",
		r.Kills, r.Workers, r.WorkerStarts, r.Pauses, r.UnexpectedExits)
	if r.Store == StorePostgres || r.Store == StoreDynamoDBTx {
		if r.Store == StorePostgres {
			fmt.Fprintf(w, "  store:             PostgreSQL, transactional bodies (guard.DoTx); no fault proxy: the faults are the kills and pauses\n")
		} else {
			fmt.Fprintf(w, "  store:             DynamoDB, transactional bodies (guard.DoTx, one TransactWriteItems), through the fault proxy\n")
			fmt.Fprintf(w, "  faults injected:   %d of %d store requests (rate %.1f%%): %s\n",
				r.FaultsTotal, r.Requests, 100*r.FaultRate, r.Faults)
		}
		fmt.Fprintf(w, "  tx bodies:         %d committed rows; %d runs reached the window between the row and the commit, %d rolled back there: %d by a kill, %d by a pause, %d reported lease lost, %d other\n",
			r.TxEffects, r.TxWindowRuns, r.TxRolledBack, r.TxRolledBackByKill, r.TxRolledBackByPause, r.TxRolledBackByLease, r.TxRolledBackOther)
		fmt.Fprintf(w, "  lost transfers:    %d (must be 0: completed operations without their committed row)\n", r.LostTransfers)
	} else {
		if r.Store == StoreRedis {
			fmt.Fprintf(w, "  store:             Redis (store/redis), keyed and plain bodies, through the TCP fault proxy; requests are commands\n")
		}
		fmt.Fprintf(w, "  faults injected:   %d of %d store requests (rate %.1f%%): %s\n",
			r.FaultsTotal, r.Requests, 100*r.FaultRate, r.Faults)
		fmt.Fprintf(w, "  keyed bodies:      %d effects, %d re-runs closed downstream by the key\n", r.KeyedEffects, r.KeyedRerunsDeduped)
		fmt.Fprintf(w, "  plain bodies:      %d effects, %d re-runs in the documented window: %d after a kill, %d after a pause, %d reported lease lost / not recorded; %d unexplained\n",
			r.PlainEffects, r.PlainReruns, r.RerunsByKill, r.RerunsByPause, r.RerunsByWindow, r.RerunsUnexplained)
	}
	fmt.Fprintf(w, "  duplicate effects: %d (must be 0)\n", r.DuplicateEffects)
	fmt.Fprintf(w, "  stuck records:     %d (must be 0; checked %s after the workers stopped), %d missing, %d result mismatches\n",
		r.StuckRecords, r.LeaseWait, r.MissingRecords, r.ResultMismatches)
	fmt.Fprintf(w, "  elapsed:           %.1fs (load %.1fs)\n", r.Elapsed.Seconds(), r.LoadElapsed.Seconds())
	for _, v := range r.Violations {
		fmt.Fprintf(w, "  VIOLATION: %s\n", v)
	}
	if !r.OK() {
		fmt.Fprintf(w, "  work dir (worker logs, done files): %s\n", r.WorkDir)
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
