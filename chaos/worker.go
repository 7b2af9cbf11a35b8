package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	tactivity "go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/idemguard/idemguard/activity"
	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/store"
	idemddb "github.com/idemguard/idemguard/store/dynamodb"
	"github.com/idemguard/idemguard/store/postgres"
	idemredis "github.com/idemguard/idemguard/store/redis"
)

// WorkerEnv is the environment variable that turns a process into a chaos
// worker: it holds the worker's configuration as JSON. [RunWorkerIfChild]
// looks for it.
const WorkerEnv = "IDEMGUARD_CHAOS_WORKER"

// workerConfig is what the driver hands a worker process.
type workerConfig struct {
	Slot            int           `json:"slot"`
	TemporalAddress string        `json:"temporal_address"`
	TaskQueue       string        `json:"task_queue"`
	StoreEndpoint   string        `json:"store_endpoint"`  // the fault proxy (Redis: its host:port)
	LedgerEndpoint  string        `json:"ledger_endpoint"` // DynamoDB Local itself (Redis: the server's host:port)
	IdemTable       string        `json:"idem_table"`      // Redis: the records' key prefix
	LedgerTable     string        `json:"ledger_table"`    // Redis: the ledger's key prefix
	DoneDir         string        `json:"done_dir"`
	Concurrency     int           `json:"concurrency"`
	BodyWork        time.Duration `json:"body_work"`
	BodyAfter       time.Duration `json:"body_after"`
	LongWork        time.Duration `json:"long_work"`
	Deadline        time.Time     `json:"deadline"`
	// The postgres scenario.
	Store       string `json:"store,omitempty"`
	PostgresURL string `json:"postgres_url,omitempty"`
}

// RunWorkerIfChild runs a chaos worker and exits if this process was started
// as one by the driver ([WorkerEnv] is set); otherwise it returns at once.
// Call it first thing in main, or in TestMain when the driver re-executes
// the test binary.
func RunWorkerIfChild() {
	raw := os.Getenv(WorkerEnv)
	if raw == "" {
		return
	}
	var cfg workerConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "chaos worker: bad configuration:", err)
		os.Exit(2)
	}
	if err := runWorker(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "chaos worker:", err)
		os.Exit(2)
	}
	os.Exit(0)
}

// dynamoOptions are client options for DynamoDB Local (or the proxy in
// front of it) at endpoint.
func dynamoOptions(endpoint string) dynamodb.Options {
	return dynamodb.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(endpoint),
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "local", SecretAccessKey: "local", Source: "chaos"}, nil
		}),
	}
}

// quietLogger is an SDK logger that keeps errors only.
func quietLogger() log.Logger {
	return log.NewStructuredLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})))
}

// watchParent exits the process when its parent dies (it is re-parented)
// or its deadline passes, so that no worker outlives the driver.
func watchParent(deadline time.Time) {
	ppid := os.Getppid()
	for {
		time.Sleep(250 * time.Millisecond)
		if os.Getppid() != ppid {
			fmt.Fprintln(os.Stderr, "chaos worker: the driver is gone; exiting")
			os.Exit(3)
		}
		if !deadline.IsZero() && time.Now().After(deadline) {
			fmt.Fprintln(os.Stderr, "chaos worker: deadline passed; exiting")
			os.Exit(3)
		}
	}
}

func runWorker(cfg workerConfig) error {
	go watchParent(cfg.Deadline)
	for _, a := range []string{cfg.TemporalAddress} {
		if err := checkLoopback(a); err != nil {
			return err
		}
	}
	c, err := dialTemporal(cfg.TemporalAddress)
	if err != nil {
		return err
	}
	defer c.Close()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	done, err := os.OpenFile(doneFile(cfg.DoneDir, os.Getpid()), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer done.Close()
	calls, err := os.OpenFile(callsFile(cfg.DoneDir, os.Getpid()), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer calls.Close()
	cl := &callLog{f: calls}
	wk := &chaosWorker{
		cfg:  cfg,
		done: done,
		pid:  os.Getpid(),
		mine: make(map[string]bool),
	}
	var s store.Store
	switch cfg.Store {
	case StorePostgres:
		pcfg, err := pgxpool.ParseConfig(cfg.PostgresURL)
		if err != nil {
			return err
		}
		// A connection per running activity's transaction, and more for
		// the claims of its steps, the releases and the lease keepers'
		// extensions, which must not wait behind the transactions.
		pcfg.MaxConns = int32(cfg.Concurrency + 8)
		pool, err := pgxpool.NewWithConfig(context.Background(), pcfg)
		if err != nil {
			return err
		}
		defer pool.Close()
		ps, err := postgres.New(pool, postgres.WithTable(cfg.IdemTable))
		if err != nil {
			return err
		}
		s = logStore[pgx.Tx](ps, cl)
		wk.pg = &pgLedger{pool: pool, table: cfg.LedgerTable}
		wk.events = wk.pg
	case StoreRedis:
		for _, a := range []string{cfg.StoreEndpoint, cfg.LedgerEndpoint} {
			if err := checkLoopback(a); err != nil {
				return err
			}
		}
		// Through the proxy: a connection per running activity, and a few
		// for the lease keepers' extensions. go-redis sends a command
		// again after a reset, EOF or LOADING (up to three times), so a
		// script whose reply was lost runs again and meets its own write;
		// slot 0 turns that off, so that its lost replies reach the store
		// and the guard as errors after the write happened.
		sc := redisClient(cfg.StoreEndpoint, cfg.Concurrency+8, cfg.Slot != 0)
		defer sc.Close()
		rs, err := idemredis.New(sc, idemredis.WithPrefix(cfg.IdemTable), idemredis.WithLogger(logger))
		if err != nil {
			return err
		}
		s = logStore[struct{}](rs, cl)
		lc := redisClient(cfg.LedgerEndpoint, cfg.Concurrency+4, true)
		defer lc.Close()
		wk.ledger = &redisLedger{client: lc, prefix: cfg.LedgerTable}
		wk.events = wk.ledger
	default:
		ds, err := idemddb.New(dynamodb.New(dynamoOptions(cfg.StoreEndpoint)), cfg.IdemTable)
		if err != nil {
			return err
		}
		s = logStore[*idemddb.TxWrites](ds, cl)
		l := &Ledger{Client: dynamodb.New(dynamoOptions(cfg.LedgerEndpoint)), Table: cfg.LedgerTable}
		wk.ledger, wk.events = l, l
	}
	if wk.g, err = guard.New(s, guard.WithLogger(logger)); err != nil {
		return err
	}
	// A worker's start asks the server for its namespace, once: on a busy
	// machine the dev server may not answer in time, and a failed start
	// cannot be retried on the same worker. Build a new one and try again
	// for a minute, as the dial does, so that a slow answer is not taken
	// for a worker that died by itself.
	var w worker.Worker
	for range 6 {
		w = worker.New(c, cfg.TaskQueue, worker.Options{
			MaxConcurrentActivityExecutionSize:     cfg.Concurrency,
			MaxConcurrentWorkflowTaskExecutionSize: 4,
			StickyScheduleToStartTimeout:           time.Second,
			WorkerStopTimeout:                      2 * time.Second,
		})
		w.RegisterWorkflowWithOptions(Workflow, workflow.RegisterOptions{Name: WorkflowName})
		register := func(name string, fn func(context.Context, Op) (OpResult, error)) {
			w.RegisterActivityWithOptions(wk.wrap(fn), tactivity.RegisterOptions{Name: name})
		}
		explicit := activity.WithGuardOptions(explicitOptions()...)
		switch cfg.Store {
		case StorePostgres:
			register(TxActivity, wk.pgTxActivity(TxActivity, nil))
			register(TxExplicitActivity, wk.pgTxActivity(TxExplicitActivity, explicitOptions()))
			register(TxStepsActivity, wk.pgTxActivity(TxStepsActivity, nil))
		case StoreDynamoDBTx:
			register(TxActivity, wk.dynamoTxActivity(TxActivity, nil))
			register(TxExplicitActivity, wk.dynamoTxActivity(TxExplicitActivity, explicitOptions()))
			register(TxStepsActivity, wk.dynamoTxActivity(TxStepsActivity, nil))
		default:
			register(KeyedActivity, activity.Must(activity.Wrap(wk.g, wk.keyedBody)))
			register(PlainActivity, activity.Must(activity.Wrap(wk.g, wk.plainBody)))
			register(ExplicitActivity, activity.Must(activity.Wrap(wk.g, wk.explicitBody, explicit)))
			register(StepsActivity, activity.Must(activity.Wrap(wk.g, wk.stepsBody)))
		}
		if err = w.Start(); err == nil {
			break
		}
		fmt.Fprintln(os.Stderr, "chaos worker: starting the worker:", err)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "chaos worker: slot %d pid %d polling %s at %s\n", cfg.Slot, os.Getpid(), cfg.TaskQueue, time.Now().Format(time.RFC3339Nano))
	<-worker.InterruptCh()
	w.Stop()
	return nil
}

// explicitOptions key a call by the op's ID and validate its payload.
func explicitOptions() []guard.CallOption {
	return []guard.CallOption{guard.WithKeyPath("op"), guard.WithPayloadValidation("payload")}
}

// dialTemporal connects to the Temporal server, trying again for a minute:
// a dev server on a busy machine may not answer a restarted worker's first
// dial in time, and a worker that gave up would count as one that died by
// itself.
func dialTemporal(addr string) (client.Client, error) {
	var err error
	for range 6 {
		var c client.Client
		if c, err = client.Dial(client.Options{HostPort: addr, Namespace: "default", Logger: quietLogger()}); err == nil {
			return c, nil
		}
		fmt.Fprintln(os.Stderr, "chaos worker: dialing Temporal:", err)
	}
	return nil, err
}

// ledgerWriter is where the keyed and plain bodies write their effects:
// the DynamoDB [Ledger], or the Redis one.
type ledgerWriter interface {
	Put(context.Context, *Entry) error
	PutOnce(context.Context, *Entry) (Entry, bool, error)
}

// chaosWorker holds what the activities of one worker process share.
type chaosWorker struct {
	cfg    workerConfig
	g      *guard.Guard
	ledger ledgerWriter // DynamoDB, Redis: the keyed and plain bodies' ledger
	pg     *pgLedger    // PostgreSQL: the transactional body's ledger
	events interface {  // where the guard's reports of the window go
		Put(context.Context, *Entry) error
	}
	pid int

	mu   sync.Mutex
	done *os.File        // protected by mu: one line per completion of an effect of this process
	mine map[string]bool // protected by mu: effect IDs this process made
}

// work pauses for up to d, or until ctx ends.
func work(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	return sleep(ctx, rand.N(d))
}

// sleep pauses for d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// bodyWork is what a body does before its side effect: up to BodyWork,
// and LongWork more for a long op, longer than the lease, which the guard
// must extend meanwhile.
func (wk *chaosWorker) bodyWork(ctx context.Context, op Op) error {
	if op.Long {
		if err := sleep(ctx, wk.cfg.LongWork); err != nil {
			return err
		}
	}
	return work(ctx, wk.cfg.BodyWork)
}

// window notes in the done file that the run of key has made its side
// effect and is about to linger before its completion: the driver times
// kills and pauses into that window, and the checks count the
// transactional runs that reached it.
func (wk *chaosWorker) window(op, effect, key string) {
	wk.mu.Lock()
	defer wk.mu.Unlock()
	fmt.Fprintf(wk.done, "window %s %s %d %s\n", op, effect, time.Now().UnixMilli(), key)
}

// linger is the window between a side effect and the completion write,
// which a kill or a pause can hit; the effect happened, so the activity's
// cancellation does not cut it short.
func (wk *chaosWorker) linger(ctx context.Context) {
	work(context.WithoutCancel(ctx), wk.cfg.BodyAfter)
}

func attempt(ctx context.Context) int { return int(tactivity.GetInfo(ctx).Attempt) }

// keyedBody is the body that passes its idempotency key downstream: the
// effect is a ledger write conditional on the key, which a re-run finds
// done (it then returns the original effect, as a payment provider returns
// the original charge).
func (wk *chaosWorker) keyedBody(ctx context.Context, op Op) (OpResult, error) {
	key, _ := guard.KeyFromContext(ctx)
	if err := wk.bodyWork(ctx, op); err != nil {
		return OpResult{}, err
	}
	e := &Entry{ID: "keyed#" + key, Kind: EntryKeyed, Op: op.ID, Key: key, Effect: randomID(), PID: wk.pid, At: time.Now(), Attempt: attempt(ctx)}
	// Not cancelled with the activity: once sent, the effect is what it is.
	wctx := context.WithoutCancel(ctx)
	got, created, err := wk.ledger.PutOnce(wctx, e)
	if err != nil {
		return OpResult{}, fmt.Errorf("ledger: %w", err)
	}
	if created {
		wk.remember(e.Effect)
	} else {
		d := &Entry{ID: "dedup#" + randomID(), Kind: EntryDedup, Op: op.ID, Key: key, Effect: got.Effect, PID: wk.pid, At: time.Now(), Attempt: e.Attempt}
		if err := wk.ledger.Put(wctx, d); err != nil {
			return OpResult{}, fmt.Errorf("ledger: %w", err)
		}
	}
	wk.window(op.ID, got.Effect, key)
	wk.linger(ctx)
	return OpResult{Op: op.ID, Key: key, EffectID: got.Effect, PID: got.PID}, nil
}

// plainBody is the body that does not pass its key on: every run writes a
// new effect.
func (wk *chaosWorker) plainBody(ctx context.Context, op Op) (OpResult, error) {
	return wk.effectBody(ctx, op, EntryPlain)
}

// explicitBody is the plain body of the explicitly keyed activity: its
// effect and result carry its payload.
func (wk *chaosWorker) explicitBody(ctx context.Context, op Op) (OpResult, error) {
	return wk.effectBody(ctx, op, EntryExplicit)
}

func (wk *chaosWorker) effectBody(ctx context.Context, op Op, kind string) (OpResult, error) {
	key, _ := guard.KeyFromContext(ctx)
	if err := wk.bodyWork(ctx, op); err != nil {
		return OpResult{}, err
	}
	e := &Entry{Kind: kind, Op: op.ID, Key: key, Effect: randomID(), PID: wk.pid, At: time.Now(), Attempt: attempt(ctx), Payload: op.Payload}
	e.ID = kind + "#" + e.Effect
	if err := wk.ledger.Put(context.WithoutCancel(ctx), e); err != nil {
		return OpResult{}, fmt.Errorf("ledger: %w", err)
	}
	wk.remember(e.Effect)
	wk.window(op.ID, e.Effect, key)
	wk.linger(ctx)
	return OpResult{Op: op.ID, Key: key, EffectID: e.Effect, PID: wk.pid, Payload: op.Payload}, nil
}

// stepNames are the steps of the stepped bodies, in order; the first
// attempt of an activity fails after the first.
var stepNames = []string{"a", "b"}

// errDeliberate is the stepped bodies' failure after their first step: an
// error of the activity's own, retryable, that releases the call's key.
func errDeliberate() error {
	return temporal.NewApplicationError("chaos: deliberate failure after the first step", "ChaosDeliberate")
}

// fail notes in the done file that the body fails on purpose.
func (wk *chaosWorker) fail(op, key string) {
	wk.mu.Lock()
	defer wk.mu.Unlock()
	fmt.Fprintf(wk.done, "fail %s - %d %s\n", op, time.Now().UnixMilli(), key)
}

// runSteps runs the steps of a stepped body, each through guard.Step with
// effect as its side effect, failing after the first on the activity's
// first attempt; the result's effect names every step's effect.
func (wk *chaosWorker) runSteps(ctx context.Context, op Op, effect func(ctx context.Context, name string) (string, error)) (OpResult, error) {
	key, _ := guard.KeyFromContext(ctx)
	if err := wk.bodyWork(ctx, op); err != nil {
		return OpResult{}, err
	}
	res := OpResult{Op: op.ID, Key: key, PID: wk.pid, Steps: map[string]string{}}
	for i, name := range stepNames {
		e, err := guard.Step(ctx, name, func(ctx context.Context) (string, error) { return effect(ctx, name) })
		if err != nil {
			return OpResult{}, err
		}
		res.Steps[name] = e
		if i == 0 && attempt(ctx) == 1 {
			wk.fail(op.ID, key)
			return OpResult{}, errDeliberate()
		}
	}
	parts := make([]string, len(stepNames))
	for i, name := range stepNames {
		parts[i] = name + "=" + res.Steps[name]
	}
	res.EffectID = "steps:" + strings.Join(parts, ",")
	wk.remember(res.EffectID)
	return res, nil
}

// stepsBody is the stepped body: each step's effect is a plain ledger
// entry, written once per run of the step.
func (wk *chaosWorker) stepsBody(ctx context.Context, op Op) (OpResult, error) {
	return wk.runSteps(ctx, op, func(ctx context.Context, name string) (string, error) {
		key, _ := guard.KeyFromContext(ctx) // the step's own key
		e := &Entry{Kind: EntryStep, Op: op.ID, Key: key, Step: name, Effect: randomID(), PID: wk.pid, At: time.Now(), Attempt: attempt(ctx)}
		e.ID = "step#" + e.Effect
		if err := wk.ledger.Put(context.WithoutCancel(ctx), e); err != nil {
			return "", fmt.Errorf("ledger: %w", err)
		}
		wk.window(op.ID, e.Effect, key)
		wk.linger(ctx)
		return e.Effect, nil
	})
}

func (wk *chaosWorker) remember(effect string) {
	wk.mu.Lock()
	defer wk.mu.Unlock()
	wk.mine[effect] = true
}

// wrap is the registered activity: it heartbeats while the guarded call
// runs, notes in the done file when the guard returned an effect of this
// process (it is then recorded in the store), and writes a ledger event
// when the guard reports the documented window.
func (wk *chaosWorker) wrap(guarded func(context.Context, Op) (OpResult, error)) func(context.Context, Op) (OpResult, error) {
	return func(ctx context.Context, op Op) (OpResult, error) {
		hbCtx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(300 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-hbCtx.Done():
					return
				case <-t.C:
					tactivity.RecordHeartbeat(ctx)
				}
			}
		}()
		r, err := guarded(ctx, op)
		stop()
		wg.Wait()

		if err == nil {
			wk.mu.Lock()
			if wk.mine[r.EffectID] {
				fmt.Fprintf(wk.done, "done %s %s %d\n", op.ID, r.EffectID, time.Now().UnixMilli())
			}
			wk.mu.Unlock()
			return r, nil
		}
		if ctx.Err() != nil {
			// Temporal ended the attempt: the SDK cancels an attempt's
			// context when a heartbeat is answered that the attempt
			// timed out on the server (on a loaded machine, its process
			// may not have heartbeated in time) or was cancelled.
			wk.mu.Lock()
			fmt.Fprintf(wk.done, "cancel %s - %d -\n", op.ID, time.Now().UnixMilli())
			wk.mu.Unlock()
			fmt.Fprintf(os.Stderr, "chaos worker: op %s attempt %d: failed once its context ended: %v\n", op.ID, tactivity.GetInfo(ctx).Attempt, context.Cause(ctx))
		}
		var ae *temporal.ApplicationError
		if errors.As(err, &ae) && (ae.Type() == activity.ErrorTypeLeaseLost || ae.Type() == activity.ErrorTypeNotRecorded) {
			ev := &Entry{ID: "event#" + randomID(), Kind: EntryEvent, Op: op.ID, PID: wk.pid, At: time.Now(),
				Attempt: int(tactivity.GetInfo(ctx).Attempt), Event: ae.Type()}
			ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			if lerr := wk.events.Put(ectx, ev); lerr != nil {
				fmt.Fprintf(os.Stderr, "chaos worker: ledger event for %s: %v\n", op.ID, lerr)
			}
			cancel()
			fmt.Fprintf(os.Stderr, "chaos worker: op %s: %s: %v\n", op.ID, ae.Type(), err)
		}
		return r, err
	}
}
