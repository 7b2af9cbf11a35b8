package main

import (
	"fmt"
	"io"
)

// Targets of issue 7.
const (
	// MinThroughputRatio is the least guarded/raw throughput accepted.
	MinThroughputRatio = 0.95
	// MaxCPURatio is the most guarded/raw CPU time per operation accepted.
	MaxCPURatio = 1.05
	// MaxHotKeyRequests bounds the requests of one hot-key burst.
	MaxHotKeyRequests = 3
)

// wantRequestsPerOp is the exact request count per operation of each miss
// and replay scenario.
var wantRequestsPerOp = map[string]float64{
	MissRaw:               2,
	MissGuarded:           2,
	ReplayRaw:             1,
	ReplayGuarded:         1,
	ReplayCachedGuarded:   0,
	TxRaw:                 1, // TransactWriteItems with the business write
	TxProtocolRaw:         2, // the claim, TransactWriteItems with the business write and the completion
	TxGuarded:             2, // the claim, TransactWriteItems with the business write and the completion
	TxReplayGuarded:       1, // the claim, failing with the completed record: no transaction
	TxReplayCachedGuarded: 0,
	// PostgreSQL: round trips (a statement, or a pipelined batch).
	PgMissRaw:             2, // the claim's batch, the completion's batch
	PgMissGuarded:         2,
	PgReplayRaw:           1, // the claim's batch, returning the completed row
	PgReplayGuarded:       1,
	PgReplayCachedGuarded: 0,
	PgTxRaw:               3, // BEGIN, the business INSERT, COMMIT
	PgTxGuarded:           5, // the claim's batch, BEGIN, the INSERT, the completion's UPDATE, COMMIT
	// Redis: round trips (a command, or a pipeline).
	RedisMissRaw:             2, // EVALSHA of the claim script, EVALSHA of the completion script
	RedisMissStore:           2,
	RedisMissGuarded:         2,
	RedisReplayRaw:           1, // the claim script, returning the completed record
	RedisReplayStore:         1,
	RedisReplayGuarded:       1,
	RedisReplayCachedGuarded: 0,
}

// runsEveryOp are the scenarios whose every operation runs the function.
var runsEveryOp = map[string]bool{MissRaw: true, MissGuarded: true, TxRaw: true, TxProtocolRaw: true, TxGuarded: true, PgMissRaw: true, PgMissGuarded: true, PgTxRaw: true, PgTxGuarded: true,
	RedisMissRaw: true, RedisMissStore: true, RedisMissGuarded: true}

// Problem is a target a result missed.
type Problem struct {
	Scenario string
	// Hard is true for the deterministic targets (request counts, function
	// runs, errors), false for the timing ones (throughput, CPU).
	Hard bool
	Msg  string
}

// Problems returns the targets r misses.
func Problems(r Result) []Problem {
	var ps []Problem
	hard := func(format string, args ...any) {
		ps = append(ps, Problem{r.Scenario, true, fmt.Sprintf(format, args...)})
	}
	soft := func(format string, args ...any) {
		ps = append(ps, Problem{r.Scenario, false, fmt.Sprintf(format, args...)})
	}
	if want, ok := wantRequestsPerOp[r.Scenario]; ok {
		if r.Requests != int(want)*r.Ops {
			hard("%d requests for %d ops (%.4g/op); want %g/op", r.Requests, r.Ops, r.RequestsPerOp, want)
		}
		if r.Errors != 0 {
			hard("%d errors; want 0 (first: %v)", r.Errors, r.firstErr)
		}
		wantRuns := int64(0)
		if runsEveryOp[r.Scenario] {
			wantRuns = int64(r.Ops)
		}
		if r.BodyRuns != wantRuns {
			hard("the function ran %d times; want %d", r.BodyRuns, wantRuns)
		}
	}
	if isHot(r.Scenario) {
		if r.MaxRequestsPerBurst > MaxHotKeyRequests {
			hard("a burst sent %d requests; want at most %d", r.MaxRequestsPerBurst, MaxHotKeyRequests)
		}
		if r.MaxBodyRunsPerBurst != 1 || r.MinBodyRunsPerBurst != 1 {
			hard("the function ran %d to %d times per burst; want once", r.MinBodyRunsPerBurst, r.MaxBodyRunsPerBurst)
		}
		switch {
		case r.Scenario == HotKeyWait && r.Errors != 0:
			hard("%d errors; want 0 in wait mode (first: %v)", r.Errors, r.firstErr)
		case r.Scenario == HotKeyReject && r.Errors != r.InProgress:
			hard("%d errors other than ErrInProgress (first: %v)", r.Errors-r.InProgress, r.firstErr)
		}
	}
	if r.Scenario == PgTxGuarded || r.Scenario == TxGuarded {
		// Round trips more than the plain transaction by design (the claim,
		// and on PostgreSQL the completion): its ratios are figures, not
		// targets.
		return ps
	}
	if r.ThroughputRatio != nil && *r.ThroughputRatio < MinThroughputRatio {
		soft("throughput %.3f× %s; want ≥ %.2f", *r.ThroughputRatio, r.Baseline, MinThroughputRatio)
	}
	if r.CPURatio != nil && *r.CPURatio > MaxCPURatio {
		soft("CPU per op %.3f× %s (+%.1f µs/op); want ≤ %.2f", *r.CPURatio, r.Baseline, *r.CPUDeltaMicros, MaxCPURatio)
	}
	return ps
}

// Check writes which targets results meet to w and returns the number of
// hard (deterministic) and soft (timing) targets missed.
func Check(results []Result, w io.Writer) (hard, soft int) {
	for _, r := range results {
		ps := Problems(r)
		if len(ps) == 0 {
			fmt.Fprintf(w, "target  ok    %s\n", r.Scenario)
		}
		for _, p := range ps {
			kind := "MISS(timing)"
			if p.Hard {
				kind = "MISS"
				hard++
			} else {
				soft++
			}
			fmt.Fprintf(w, "target  %s  %s: %s\n", kind, p.Scenario, p.Msg)
		}
	}
	return hard, soft
}
