package main

import (
	"fmt"
	"io"
)

// MaxHotKeyRequests bounds the requests of one hot-key burst.
const MaxHotKeyRequests = 3

// Timing is a guarded scenario's timing target against its baseline; a
// zero field is no target.
type Timing struct {
	// MinThroughput is the least throughput accepted, guarded/baseline.
	MinThroughput float64
	// MaxCPU is the most CPU time per operation accepted, guarded/baseline.
	MaxCPU float64
	// MaxCPUDeltaMicros is the most CPU time per operation accepted over
	// the baseline's, in µs.
	MaxCPUDeltaMicros float64
}

// timingTargets are the timing targets: DynamoDB's against the raw SDK;
// PostgreSQL's throughput and the HTTP middleware's CPU against the
// hand-written baselines. The instruction targets of PostgreSQL and Redis
// against those baselines are bench/callgrind.sh's, which counts
// instructions rather than time (docs/benchmarks.md).
var timingTargets = map[string]Timing{
	MissGuarded:            {MinThroughput: 0.95, MaxCPU: 1.05},
	ReplayGuarded:          {MinThroughput: 0.95, MaxCPU: 1.05},
	ReplayCachedGuarded:    {MinThroughput: 0.95, MaxCPU: 1.05},
	TxReplayGuarded:        {MinThroughput: 0.95, MaxCPU: 1.05},
	TxReplayCachedGuarded:  {MinThroughput: 0.95, MaxCPU: 1.05},
	PgMissGuarded:          {MinThroughput: 0.8},
	PgReplayGuarded:        {MinThroughput: 0.8},
	PgReplayCachedGuarded:  {MinThroughput: 0.8},
	RedisHTTPGuardedFirst:  {MaxCPUDeltaMicros: 20},
	RedisHTTPGuardedReplay: {MaxCPUDeltaMicros: 20},
}

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
	PgMissHand:            2, // the claim's statement, the completion's UPDATE
	PgMissRaw:             2, // the claim's batch, the completion's batch
	PgMissStore:           2,
	PgMissGuarded:         2,
	PgReplayHand:          1, // the claim's statement, returning the result
	PgReplayRaw:           1, // the claim's batch, returning the completed row
	PgReplayStore:         1,
	PgReplayGuarded:       1,
	PgReplayCachedGuarded: 0,
	PgTxRaw:               3, // BEGIN, the business INSERT, COMMIT
	PgTxGuarded:           5, // the claim's batch, BEGIN, the INSERT, the completion's UPDATE, COMMIT
	// Redis: round trips (a command, or a pipeline).
	RedisMissHand:            2, // SET NX GET, SET
	RedisMissRaw:             2, // EVALSHA of the claim script, EVALSHA of the completion script
	RedisMissStore:           2,
	RedisMissGuarded:         2,
	RedisReplayHand:          1, // SET NX GET, returning the result
	RedisReplayRaw:           1, // the claim script, returning the completed record
	RedisReplayStore:         1,
	RedisReplayGuarded:       1,
	RedisReplayCachedGuarded: 0,
	RedisHTTPHandFirst:       2,
	RedisHTTPGuardedFirst:    2,
	RedisHTTPHandReplay:      1,
	RedisHTTPGuardedReplay:   1,
}

// runsEveryOp are the scenarios whose every operation runs the function.
var runsEveryOp = map[string]bool{MissRaw: true, MissGuarded: true, TxRaw: true, TxProtocolRaw: true, TxGuarded: true,
	PgMissHand: true, PgMissRaw: true, PgMissStore: true, PgMissGuarded: true, PgTxRaw: true, PgTxGuarded: true,
	RedisMissHand: true, RedisMissRaw: true, RedisMissStore: true, RedisMissGuarded: true, RedisHTTPHandFirst: true, RedisHTTPGuardedFirst: true}

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
	// Others, such as the transactional guards (round trips more than the
	// plain transaction by design: the claim, and on PostgreSQL the
	// completion) and the raw and store scenarios, have figures, not
	// targets.
	t := timingTargets[r.Scenario]
	if t.MinThroughput > 0 && r.ThroughputRatio != nil && *r.ThroughputRatio < t.MinThroughput {
		soft("throughput %.3f× %s; want ≥ %.2f", *r.ThroughputRatio, r.Baseline, t.MinThroughput)
	}
	if t.MaxCPU > 0 && r.CPURatio != nil && *r.CPURatio > t.MaxCPU {
		soft("CPU per op %.3f× %s (+%.1f µs/op); want ≤ %.2f", *r.CPURatio, r.Baseline, *r.CPUDeltaMicros, t.MaxCPU)
	}
	if t.MaxCPUDeltaMicros > 0 && r.CPUDeltaMicros != nil && *r.CPUDeltaMicros > t.MaxCPUDeltaMicros {
		soft("CPU per op +%.1f µs over %s; want ≤ +%.0f µs", *r.CPUDeltaMicros, r.Baseline, t.MaxCPUDeltaMicros)
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
