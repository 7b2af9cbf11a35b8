package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/idemguard/idemguard/internal/testing/faultproxy"
	"github.com/idemguard/idemguard/store"
	idemddb "github.com/idemguard/idemguard/store/dynamodb"
	"github.com/idemguard/idemguard/store/postgres"
	idemredis "github.com/idemguard/idemguard/store/redis"
)

// plannedWorkflow is one workflow the driver starts.
type plannedWorkflow struct {
	id    string
	input WorkflowInput
}

// wfResult is how a workflow ended.
type wfResult struct {
	out WorkflowOutput
	err error
}

// Run performs one chaos run against the servers cfg names and returns its
// report. The error reports a run that could not be carried out (servers
// unreachable, tables not created); a run that was carried out and found
// violations returns a report whose Violations are not empty, and no error.
// Every worker process is stopped before Run returns.
func Run(ctx context.Context, cfg Config) (rep *Report, err error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("chaos: %w", err)
	}
	if len(cfg.WorkerCommand) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}
		cfg.WorkerCommand = []string{exe}
	}
	if cfg.Seed == 0 {
		cfg.Seed = rand.Uint64()
	}
	cfg.Faults.Seed = cfg.Seed
	logw := cfg.Log
	if logw == nil {
		logw = io.Discard
	}
	var logMu sync.Mutex
	logf := func(format string, args ...any) {
		logMu.Lock()
		defer logMu.Unlock()
		fmt.Fprintf(logw, "chaos: %s "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, args...)...)
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	began := time.Now()
	rng := rand.New(rand.NewPCG(cfg.Seed, 7))
	runID := fmt.Sprintf("%s-%04x", began.UTC().Format("150405"), rng.Uint32()&0xffff)

	workDir := cfg.WorkDir
	if workDir == "" {
		if workDir, err = os.MkdirTemp("", "idemguard-chaos-"); err != nil {
			return nil, err
		}
		defer func() {
			if rep != nil && rep.OK() {
				os.RemoveAll(workDir)
			}
		}()
	}
	doneDir := filepath.Join(workDir, "done")
	if err := os.MkdirAll(doneDir, 0o755); err != nil {
		return nil, err
	}

	// Tables, created directly (not through the proxy), and the proxy.
	var (
		direct    *dynamodb.Client // DynamoDB
		rdb       *goredis.Client  // Redis, reached directly
		proxy     faultProxy       // DynamoDB, Redis
		pgPool    *pgxpool.Pool    // PostgreSQL
		storeURL  string
		ledgerURL string
		idemTable string // Redis: the idempotency records' key prefix
		ledgerTbl string // Redis: the ledger's key prefix
	)
	pgMode := cfg.Store == StorePostgres
	txMode := pgMode || cfg.Store == StoreDynamoDBTx // transactional bodies
	switch cfg.Store {
	case StorePostgres:
		idemTable, ledgerTbl = "chaos_idem_"+strings.ReplaceAll(runID, "-", "_"), "chaos_ledger_"+strings.ReplaceAll(runID, "-", "_")
		if pgPool, err = pgxpool.New(ctx, cfg.PostgresURL); err != nil {
			return nil, fmt.Errorf("chaos: connecting to PostgreSQL: %w", err)
		}
		defer pgPool.Close()
		if err := postgres.CreateTable(ctx, pgPool, idemTable); err != nil {
			return nil, fmt.Errorf("chaos: creating the idempotency table: %w", err)
		}
		if err := createPgLedger(ctx, pgPool, ledgerTbl); err != nil {
			return nil, err
		}
		if !cfg.KeepTables {
			defer func() {
				dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
				defer dcancel()
				pgPool.Exec(dctx, "DROP TABLE IF EXISTS "+pgx.Identifier{idemTable}.Sanitize()+", "+pgx.Identifier{ledgerTbl}.Sanitize())
			}()
		}
		cfg.Faults.Rate = 0 // no proxy: the faults are the kills and pauses
	case StoreRedis:
		idemTable, ledgerTbl = "chaos-idem:"+runID+":", "chaos-ledger:"+runID+":"
		rdb = redisClient(cfg.RedisAddr, 8, true)
		defer rdb.Close()
		if err := rdb.Ping(ctx).Err(); err != nil {
			return nil, fmt.Errorf("chaos: connecting to Redis at %s: %w", cfg.RedisAddr, err)
		}
		if !cfg.KeepTables {
			defer func() {
				dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
				defer dcancel()
				deleteKeys(dctx, rdb, idemTable)
				deleteKeys(dctx, rdb, ledgerTbl)
			}()
		}
		rp, err := faultproxy.NewRedis(cfg.RedisAddr, cfg.Faults)
		if err != nil {
			return nil, err
		}
		defer rp.Close()
		proxy, storeURL, ledgerURL = rp, rp.Addr(), cfg.RedisAddr
	default:
		direct = dynamodb.New(dynamoOptions(cfg.DynamoDBEndpoint))
		idemTable, ledgerTbl = "chaos-idem-"+runID, "chaos-ledger-"+runID
		if err := idemddb.CreateTable(ctx, direct, idemTable); err != nil && !errors.Is(err, idemddb.ErrTTLNotEnabled) {
			return nil, fmt.Errorf("chaos: creating the idempotency table: %w", err)
		}
		if err := createLedgerTable(ctx, direct, ledgerTbl); err != nil {
			return nil, err
		}
		if !cfg.KeepTables {
			defer func() {
				dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
				defer dcancel()
				for _, t := range []string{idemTable, ledgerTbl} {
					direct.DeleteTable(dctx, &dynamodb.DeleteTableInput{TableName: aws.String(t)})
				}
			}()
		}
		hp, err := faultproxy.NewDynamoDB(cfg.DynamoDBEndpoint, cfg.Faults)
		if err != nil {
			return nil, err
		}
		defer hp.Close()
		proxy, storeURL, ledgerURL = hp, hp.URL(), cfg.DynamoDBEndpoint
	}

	tc, err := client.Dial(client.Options{HostPort: cfg.TemporalAddress, Namespace: "default", Logger: quietLogger()})
	if err != nil {
		return nil, fmt.Errorf("chaos: dialing Temporal at %s: %w", cfg.TemporalAddress, err)
	}
	defer tc.Close()

	taskQueue := "chaos-" + runID
	wcfg := workerConfig{
		TemporalAddress: cfg.TemporalAddress,
		TaskQueue:       taskQueue,
		StoreEndpoint:   storeURL,
		LedgerEndpoint:  ledgerURL,
		IdemTable:       idemTable,
		LedgerTable:     ledgerTbl,
		DoneDir:         doneDir,
		Concurrency:     cfg.WorkerConcurrency,
		BodyWork:        cfg.BodyWork,
		BodyAfter:       cfg.BodyAfter,
		LongWork:        cfg.LongWork,
		Deadline:        began.Add(cfg.Timeout + time.Minute),
		Store:           cfg.Store,
		PostgresURL:     cfg.PostgresURL,
	}
	ws := newWorkers(cfg.WorkerCommand, cfg.Workers, workDir, func(slot int) (string, error) {
		c := wcfg
		c.Slot = slot
		b, err := json.Marshal(c)
		return string(b), err
	})
	defer ws.stop(5 * time.Second)
	for i := range cfg.Workers {
		if err := ws.start(i); err != nil {
			return nil, err
		}
	}
	logf("run %s (seed %d) on %s: %d workers, %d workflows × %d ops, twins every %d, faults %.1f%%; work dir %s",
		runID, cfg.Seed, storeName(cfg.Store), cfg.Workers, cfg.Workflows, cfg.OpsPerWorkflow, cfg.TwinEvery, 100*cfg.Faults.Rate, workDir)

	// The plan: workflows, their ops, the conflicting twins of explicitly
	// keyed ops, and the twin workflows.
	plan, opsOf, err := makePlan(cfg, runID, rng, txMode)
	if err != nil {
		return nil, err
	}

	// The load.
	loadCtx, loadCancel := context.WithCancel(ctx)
	results := make(map[string]wfResult, len(plan))
	var resMu sync.Mutex
	var completed, failed atomic.Int64
	sem := make(chan struct{}, cfg.InFlight)
	var wg sync.WaitGroup
	// windowKills counts the kills timed into a body's window.
	var windowKills atomic.Int64
	minPauses := cfg.MinPauses
	if cfg.PauseRatio == 0 {
		minPauses = 0
	}
	killsDone := func() bool {
		return ws.killCount() >= cfg.MinKills && (cfg.MinKills == 0 || cfg.WindowWait == 0 || windowKills.Load() > 0) && ws.pauseCount() >= minPauses
	}
	loadStart := time.Now()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i, pw := range plan {
			// Hold the last workflows back until MinKills kills have
			// happened (one of them in a transactional body's window), so
			// that they happen while work is in flight; whenever nothing
			// is in flight meanwhile, one more goes, so that there is work
			// for a kill to land in.
			for n := 0; i >= max(len(plan)-cfg.InFlight, 0) && !killsDone() && len(sem) > 0; n++ {
				if n == 0 && i == max(len(plan)-cfg.InFlight, 0) {
					logf("holding the last %d workflows until %d kills and %d pauses have happened", cfg.InFlight, cfg.MinKills, minPauses)
				}
				if !sleepCtx(loadCtx, 100*time.Millisecond) {
					return
				}
			}
			select {
			case sem <- struct{}{}:
			case <-loadCtx.Done():
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				r := runWorkflow(loadCtx, tc, taskQueue, cfg.WorkflowTimeout, pw)
				if r.err != nil {
					failed.Add(1)
					logf("workflow %s: %v", pw.id, r.err)
				} else {
					completed.Add(1)
				}
				resMu.Lock()
				results[pw.id] = r
				resMu.Unlock()
			}()
		}
	}()

	// The killer (none in a control run).
	killerDone := make(chan struct{})
	go func() {
		defer close(killerDone)
		for !cfg.Control {
			if !sleepCtx(loadCtx, uniform(rng, cfg.KillMin, cfg.KillMax)) {
				return
			}
			live := ws.live()
			if len(live) < 2 {
				continue // keep one worker up
			}
			slot := live[rng.IntN(len(live))]
			inWindow := false
			if cfg.WindowWait > 0 {
				// Time the kill or pause: wait until a worker has made a
				// side effect and not completed it (a "window" line in its
				// done file), so that it lands in the crash window; the
				// first worker to do so is the one.
				pids := map[int]int{}
				for _, sl := range live {
					if pid, ok := ws.pid(sl); ok {
						pids[sl] = pid
					}
				}
				if sl, ok := awaitWindow(loadCtx, doneDir, pids, cfg.WindowWait); ok {
					slot, inWindow = sl, true
				}
			}
			if cfg.PauseRatio > 0 && ws.killCount() >= cfg.MinKills && (ws.pauseCount() < minPauses || rng.Float64() < cfg.PauseRatio) {
				if pa, ok := ws.pause(slot, uniform(rng, cfg.PauseMin, cfg.PauseMax), inWindow); ok {
					logf("paused worker slot %d pid %d for %s%s", pa.Slot, pa.PID, pa.For.Round(time.Millisecond), map[bool]string{true: " in the window"}[inWindow])
				}
				continue
			}
			if k, ok := ws.kill(slot, inWindow); ok {
				if inWindow {
					windowKills.Add(1)
				}
				logf("killed worker slot %d pid %d%s", k.Slot, k.PID, map[bool]string{true: " in the window"}[inWindow])
			}
			sleepCtx(context.WithoutCancel(loadCtx), uniform(rng, cfg.RestartMin, cfg.RestartMax))
			if err := ws.start(slot); err != nil {
				logf("restarting worker slot %d: %v", slot, err)
			}
		}
	}()

	// Progress.
	progressDone := make(chan struct{})
	go func() {
		defer close(progressDone)
		t := time.NewTicker(10 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-loadCtx.Done():
				return
			case <-t.C:
				kills, pauses, _, _ := ws.report()
				if proxy == nil {
					logf("%d/%d workflows completed (%d failed), %d kills, %d pauses",
						completed.Load(), len(plan), failed.Load(), len(kills), len(pauses))
					continue
				}
				logf("%d/%d workflows completed (%d failed), %d kills, %d pauses, %d store requests, %d faults",
					completed.Load(), len(plan), failed.Load(), len(kills), len(pauses), proxy.Requests(), proxy.Counts().Total())
			}
		}
	}()

	wg.Wait()
	loadElapsed := time.Since(loadStart)
	loadCancel()
	<-killerDone
	<-progressDone
	stopAt := time.Now()
	ws.stop(5 * time.Second)
	stoppedAt := time.Now()
	logf("load done in %s: %d completed, %d failed; workers stopped", loadElapsed.Round(time.Millisecond), completed.Load(), failed.Load())

	// Wait out the longest lease: the guard's lease is the heartbeat
	// timeout, and nothing extends a lease once the workers are gone.
	leaseWait := cfg.Heartbeat + time.Second
	sleepCtx(ctx, time.Until(stoppedAt.Add(leaseWait)))
	checkedAt := time.Now()

	ev := evidence{plan: opsOf, workflows: plan, results: results, checkedAt: checkedAt, stopAt: stopAt, control: cfg.Control}
	ev.kills, ev.pauses, ev.unexpected, ev.started = ws.report()
	sctx := context.WithoutCancel(ctx)
	sctx, scancel := context.WithTimeout(sctx, 5*time.Minute)
	defer scancel()
	switch cfg.Store {
	case StorePostgres:
		if ev.entries, err = (&pgLedger{pool: pgPool, table: ledgerTbl}).Scan(sctx); err != nil {
			return nil, err
		}
		ps, err := postgres.New(pgPool, postgres.WithTable(idemTable))
		if err != nil {
			return nil, err
		}
		if ev.records, ev.corrupt, err = scanStoreRecords(sctx, ps); err != nil {
			return nil, err
		}
	case StoreRedis:
		if ev.entries, err = (&redisLedger{client: rdb, prefix: ledgerTbl}).Scan(sctx); err != nil {
			return nil, err
		}
		rs, err := idemredis.New(rdb, idemredis.WithPrefix(idemTable), idemredis.WithoutServerCheck())
		if err != nil {
			return nil, err
		}
		if ev.records, ev.corrupt, err = scanStoreRecords(sctx, rs); err != nil {
			return nil, err
		}
	default:
		if ev.entries, err = (&Ledger{Client: direct, Table: ledgerTbl}).Scan(sctx); err != nil {
			return nil, err
		}
		if ev.records, ev.corrupt, err = scanRecords(sctx, direct, idemTable); err != nil {
			return nil, err
		}
	}
	if ev.done, err = readDone(doneDir); err != nil {
		return nil, err
	}
	if ev.calls, err = readCalls(doneDir); err != nil {
		return nil, err
	}
	rep = ev.verify()
	rep.Seed = cfg.Seed
	rep.RunID = runID
	rep.Workers = cfg.Workers
	rep.Store = storeName(cfg.Store)
	if proxy != nil {
		rep.Requests = proxy.Requests()
		rep.Faults = proxy.Counts()
		rep.FaultsTotal = rep.Faults.Total()
		rep.FaultRate = cfg.Faults.Rate
	}
	rep.LoadElapsed = loadElapsed
	rep.Elapsed = time.Since(began)
	rep.LeaseWait = leaseWait
	rep.WorkDir = workDir
	if !rep.OK() {
		rep.WorkerLogTails = tails(workDir, 30)
	}
	return rep, nil
}

// faultProxy is a fault-injecting proxy in front of the idempotency store:
// [faultproxy.DynamoDB] or [faultproxy.Redis].
type faultProxy interface {
	Requests() int64
	Counts() faultproxy.Counts
}

// opPlan is one operation of the plan.
type opPlan struct {
	id        string
	kind      string
	key       string   // the key the guard must derive
	workflows []string // the workflows that run it
	long      bool     // its body works for longer than the lease
	payload   string   // explicitly keyed: its payload
	conflict  string   // explicitly keyed: the payload of its conflicting twin, if it has one
}

// Operation kinds by position in a workflow, cycling.
var (
	opKinds   = []string{KeyedActivity, PlainActivity, KeyedActivity, PlainActivity, KeyedActivity, PlainActivity, ExplicitActivity, ExplicitActivity, StepsActivity, StepsActivity}
	txOpKinds = []string{TxActivity, TxActivity, TxActivity, TxActivity, TxActivity, TxActivity, TxExplicitActivity, TxExplicitActivity, TxStepsActivity, TxStepsActivity}
)

// Payloads of the explicitly keyed operations and of their conflicting
// twins.
const (
	payloadOriginal = "original"
	payloadConflict = "conflict"
)

// makePlan returns the workflows of a run and its operations by ID.
func makePlan(cfg Config, runID string, rng *rand.Rand, txMode bool) ([]plannedWorkflow, map[string]*opPlan, error) {
	kinds := opKinds
	if txMode {
		kinds = txOpKinds
	}
	var plan []plannedWorkflow
	opsOf := map[string]*opPlan{}
	for i := range cfg.Workflows {
		in := WorkflowInput{
			StartToClose: cfg.StartToClose, Heartbeat: cfg.Heartbeat, ScheduleToClose: cfg.ScheduleToClose,
			RetryInitial: cfg.RetryInitial, RetryMax: cfg.RetryMax,
		}
		conflicted := false
		for j := range cfg.OpsPerWorkflow {
			kind := kinds[j%len(kinds)]
			op := Op{
				ID:   fmt.Sprintf("%s-w%05d-%s%02d", runID, i, strings.ToLower(kind[5:6]), j),
				Long: cfg.LongWork > 0 && j == i%cfg.OpsPerWorkflow,
			}
			if explicitKeyed(kind) {
				op.Payload = payloadOriginal
			}
			key, err := expectedKey(kind, op)
			if err != nil {
				return nil, nil, err
			}
			p := &opPlan{id: op.ID, kind: kind, key: key, long: op.Long, payload: op.Payload}
			opsOf[op.ID] = p
			in.Calls = append(in.Calls, Call{Activity: kind, Op: op})
			if explicitKeyed(kind) && !conflicted {
				// Its conflicting twin: the same id, another payload, a
				// little later, so that it meets the original in progress
				// or completed (or, now and then, runs first).
				conflicted = true
				c := op
				c.Payload, c.Delay = payloadConflict, uniform(rng, 0, 1500*time.Millisecond)
				p.conflict = c.Payload
				in.Calls = append(in.Calls, Call{Activity: kind, Op: c})
			}
		}
		id := fmt.Sprintf("chaos-%s-w%05d", runID, i)
		plan = append(plan, plannedWorkflow{id: id, input: in})
		if cfg.TwinEvery > 0 && i%cfg.TwinEvery == 0 {
			plan = append(plan, plannedWorkflow{id: id + "-twin", input: in})
		}
	}
	for _, pw := range plan {
		for _, c := range pw.input.Calls {
			if p := opsOf[c.Op.ID]; c.Op.Payload == p.payload {
				p.workflows = append(p.workflows, pw.id)
			}
		}
	}
	return plan, opsOf, nil
}

// runWorkflow starts pw and waits for its result.
func runWorkflow(ctx context.Context, tc client.Client, taskQueue string, timeout time.Duration, pw plannedWorkflow) wfResult {
	var run client.WorkflowRun
	var err error
	for attempt := 0; ; attempt++ {
		run, err = tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
			ID:                       pw.id,
			TaskQueue:                taskQueue,
			WorkflowExecutionTimeout: timeout,
			WorkflowTaskTimeout:      3 * time.Second,
		}, WorkflowName, pw.input)
		// A busy dev server may fail a start for a moment (it once
		// answered that the default namespace did not exist).
		var nf *serviceerror.NamespaceNotFound
		if err == nil || ctx.Err() != nil || attempt >= 5 || !isTransient(err) && !errors.As(err, &nf) {
			break
		}
		time.Sleep(time.Second)
	}
	if err != nil {
		return wfResult{err: fmt.Errorf("starting: %w", err)}
	}
	var out WorkflowOutput
	for attempt := 0; ; attempt++ {
		err = run.Get(ctx, &out)
		if err == nil || ctx.Err() != nil || attempt >= 5 || !isTransient(err) {
			break
		}
		// A long poll cut by the server is not the workflow's failure.
		time.Sleep(time.Second)
	}
	if err != nil && ctx.Err() != nil {
		tctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		tc.TerminateWorkflow(tctx, pw.id, run.GetRunID(), "chaos run ended")
		cancel()
	}
	return wfResult{out: out, err: err}
}

func isTransient(err error) bool {
	s := err.Error()
	return strings.Contains(s, "Unavailable") || strings.Contains(s, "DeadlineExceeded") || strings.Contains(s, "context deadline exceeded")
}

// scanRecords reads the idempotency table.
func scanRecords(ctx context.Context, c *dynamodb.Client, table string) (map[string]*store.Record, []string, error) {
	s, err := idemddb.New(c, table)
	if err != nil {
		return nil, nil, err
	}
	recs := map[string]*store.Record{}
	var corrupt []string
	err = scanAll(ctx, c, table, func(it map[string]types.AttributeValue) error {
		rec, err := s.DecodeItem(it)
		if err != nil {
			corrupt = append(corrupt, fmt.Sprintf("%v: %v", it["id"], err))
			return nil
		}
		recs[rec.Key] = rec
		return nil
	})
	return recs, corrupt, err
}

// doneLine is a line of a worker's done file: "done", the guard returned
// effect, made by that process, as op's result, so the store recorded it;
// "window", the process made effect under key (in a transactional body:
// wrote it in its transaction) and was about to linger before the
// completion (the commit); "fail", a stepped body failed on purpose after
// its first step; "cancel", an attempt of op failed once Temporal had ended
// its context (the attempt had timed out on the server, which the SDK
// learns from a heartbeat's answer, or was cancelled), noted when the
// guarded call returned.
type doneLine struct {
	kind       string // "done", "window", "fail" or "cancel"
	op, effect string
	pid        int
	at         time.Time
	key        string // window, fail
}

func readDone(dir string) ([]doneLine, error) {
	files, err := filepath.Glob(filepath.Join(dir, "done-*.log"))
	if err != nil {
		return nil, err
	}
	var out []doneLine
	for _, f := range files {
		pid, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), "done-"), ".log"))
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(strings.NewReader(string(b)))
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) < 4 || len(fs) > 5 || fs[0] != "done" && fs[0] != "window" && fs[0] != "fail" && fs[0] != "cancel" {
				continue // a line cut by SIGKILL mid-write
			}
			ms, err := strconv.ParseInt(fs[3], 10, 64)
			if err != nil {
				continue
			}
			d := doneLine{kind: fs[0], op: fs[1], effect: fs[2], pid: pid, at: time.UnixMilli(ms)}
			if len(fs) == 5 {
				d.key = fs[4]
			} else if d.kind != "done" {
				continue // cut short
			}
			out = append(out, d)
		}
	}
	return out, nil
}

// tails returns the last n lines of each worker log in dir.
func tails(dir string, n int) map[string]string {
	files, _ := filepath.Glob(filepath.Join(dir, "worker-*.log"))
	out := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		if len(lines) > n {
			lines = lines[len(lines)-n:]
		}
		out[filepath.Base(f)] = strings.Join(lines, "\n")
	}
	return out
}

func uniform(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(rng.Int64N(int64(hi-lo)))
}

// sleepCtx sleeps for d or until ctx ends; it reports whether it slept
// the whole time.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// storeName is the store a run uses, as reports name it.
func storeName(s string) string {
	if s == "" {
		return StoreDynamoDB
	}
	return s
}

// doneFile is the file in which the worker pid notes what it did.
func doneFile(doneDir string, pid int) string {
	return filepath.Join(doneDir, fmt.Sprintf("done-%d.log", pid))
}

// awaitWindow waits until one of the workers pids (by slot) writes a
// "window" line to its done file (a transactional body wrote its row and
// lingers before the commit), for at most d, and returns its slot.
func awaitWindow(ctx context.Context, doneDir string, pids map[int]int, d time.Duration) (int, bool) {
	from := map[int]int64{}
	for slot, pid := range pids {
		if fi, err := os.Stat(doneFile(doneDir, pid)); err == nil {
			from[slot] = fi.Size()
		}
	}
	deadline := time.Now().Add(d)
	buf := make([]byte, 64<<10)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		for slot, pid := range pids {
			if f, err := os.Open(doneFile(doneDir, pid)); err == nil {
				n, _ := f.ReadAt(buf, from[slot])
				f.Close()
				if strings.Contains(string(buf[:n]), "window ") {
					return slot, true
				}
			}
		}
		time.Sleep(time.Millisecond)
	}
	return 0, false
}
