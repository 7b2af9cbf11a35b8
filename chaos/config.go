package chaos

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// Environment variables the suite reads (scripts/harness.sh sets them).
const (
	DynamoDBEndpointEnv = "IDEMGUARD_DYNAMODB_ENDPOINT"
	TemporalAddressEnv  = "IDEMGUARD_TEMPORAL_ADDRESS"
	PostgresURLEnv      = "IDEMGUARD_POSTGRES_URL"
	RedisAddrEnv        = "IDEMGUARD_REDIS_ADDR"
)

// Config is one chaos run. Start from [DefaultConfig] or [ShortConfig].
type Config struct {
	// Store is the idempotency store: [StoreDynamoDB] (the default, when
	// empty) runs keyed and plain bodies against DynamoDB Local through
	// the fault proxy; [StoreDynamoDBTx] runs transactional bodies
	// (guard.DoTx) whose side effect is an item written in the same
	// TransactWriteItems, through the fault proxy; [StorePostgres] runs
	// transactional bodies
	// (guard.DoTx) whose side effect is a row in the same PostgreSQL
	// database, without the proxy; [StoreRedis] runs the keyed and plain
	// bodies against redis-server through a TCP fault proxy
	// ([faultproxy.Redis]).
	Store string
	// DynamoDBEndpoint is DynamoDB Local's URL (http on a loopback address).
	DynamoDBEndpoint string
	// PostgresURL is the PostgreSQL database of the postgres scenario (a
	// loopback host).
	PostgresURL string
	// RedisAddr is the redis-server of the redis scenario (a loopback
	// host:port).
	RedisAddr string
	// TemporalAddress is the Temporal dev server's host:port (loopback).
	TemporalAddress string

	// Workflows is the number of workflows; each runs OpsPerWorkflow
	// guarded activities at once: in the DynamoDB and Redis scenarios, of
	// every ten, three keyed, three plain, two explicitly keyed with
	// payload validation and two stepped; in the transactional ones, six
	// transactional bodies, two explicitly keyed and two stepped. The
	// first explicitly keyed operation of each workflow has a conflicting
	// twin (its id with another payload), started 0–1.5 s after it; one
	// operation of each workflow is long (its body works for LongWork,
	// longer than the lease).
	Workflows      int
	OpsPerWorkflow int
	// TwinEvery gives every TwinEvery-th workflow a twin, started at the
	// same moment with the same operations (so the same keys): the two
	// contend for every key, usually on different workers. 0: no twins.
	TwinEvery int
	// InFlight is how many workflows run at once. Keep InFlight ×
	// (OpsPerWorkflow + 1) near Workers × WorkerConcurrency: activities
	// beyond the workers' slots queue, and a retry (of a killed or paused
	// worker's activity) waits behind them, which delays takeovers past
	// the pauses meant to make zombies.
	InFlight int

	// Workers is the number of worker processes (at least 2), each running
	// up to WorkerConcurrency activities at once.
	Workers           int
	WorkerConcurrency int
	// WorkerCommand is the argv of a worker process; the driver adds
	// [WorkerEnv] to its environment. Default: this executable, which
	// must call [RunWorkerIfChild] first thing.
	WorkerCommand []string

	// Faults configures the fault proxy in front of the idempotency
	// store.
	Faults FaultConfig

	// A worker is killed (SIGKILL) every KillMin..KillMax (uniform), and
	// restarted RestartMin..RestartMax after it died.
	KillMin, KillMax       time.Duration
	RestartMin, RestartMax time.Duration
	// PauseRatio is the share of those moments at which the chosen
	// worker is paused (SIGSTOP) for PauseMin..PauseMax and then resumed
	// (SIGCONT) instead of killed: a pause longer than the lease and the
	// guard's clock-skew tolerance, long enough for Temporal to retry the
	// activity elsewhere and the retry to take the key over and complete
	// it, makes it a zombie holder, whose writes the fencing token must
	// refuse. 0: kills only.
	PauseRatio         float64
	PauseMin, PauseMax time.Duration
	// Kills and pauses are timed into the window between a side effect
	// and its completion: at each moment the driver waits up to
	// WindowWait for a worker to report a body in that window, and picks
	// that worker (else a random one).
	WindowWait time.Duration
	// Control makes a control run: no kills, pauses or store faults. No
	// body may then run twice and no lease may be lost.
	Control bool
	// MinKills is the least number of kills a run makes: the first
	// MinKills moments are kills, not pauses, and the last InFlight
	// workflows are not started before they have happened (one of them in
	// the window), except one at a time whenever nothing is in flight.
	// MinPauses (with a PauseRatio above 0) is the least number of
	// pauses: the moments after the first MinKills are pauses until
	// MinPauses have happened, and the last workflows wait for them too.
	MinKills, MinPauses int

	// Activity options. The guard's lease is the heartbeat timeout, so a
	// killed worker's claims lapse Heartbeat after its last extension.
	Heartbeat       time.Duration
	StartToClose    time.Duration
	ScheduleToClose time.Duration
	RetryInitial    time.Duration
	RetryMax        time.Duration
	// WorkflowTimeout bounds each workflow run.
	WorkflowTimeout time.Duration

	// An activity body works for up to BodyWork before its side effect and
	// up to BodyAfter after it (the window between the side effect and the
	// completion write that a kill can hit); a long one works LongWork
	// more before its side effect, longer than its lease (the heartbeat
	// timeout) and the clock-skew tolerance together.
	BodyWork, BodyAfter time.Duration
	LongWork            time.Duration

	// Timeout bounds the whole run, set-up and checks included.
	Timeout time.Duration
	// WorkDir holds the worker logs and done files; empty: a temporary
	// directory, removed after a passing run.
	WorkDir string
	// KeepTables keeps the DynamoDB tables after the run.
	KeepTables bool
	// Seed seeds the fault proxy, the kill schedule and the run's names; 0
	// picks one (printed in the report).
	Seed uint64
	// Log receives progress lines; nil discards them.
	Log io.Writer
}

// DefaultConfig is the full run of `make chaos`: 1,000 workflows of 10
// guarded operations and a conflicting twin (10,000 keys; with the twin
// workflows, 12,100 guarded activity executions), three workers, 5%
// faults, a kill every 1–4 s (one in five a pause of 5–7 s instead, longer
// than the 2 s lease and the 1 s skew tolerance), each timed into the
// window after a side effect when one comes within 3 s.
func DefaultConfig() Config {
	return Config{
		Store:             StoreDynamoDB,
		DynamoDBEndpoint:  os.Getenv(DynamoDBEndpointEnv),
		PostgresURL:       os.Getenv(PostgresURLEnv),
		RedisAddr:         os.Getenv(RedisAddrEnv),
		TemporalAddress:   os.Getenv(TemporalAddressEnv),
		Workflows:         1000,
		OpsPerWorkflow:    10,
		TwinEvery:         10,
		InFlight:          12,
		Workers:           3,
		WorkerConcurrency: 16,
		Faults:            FaultConfig{Rate: 0.05, MaxLatency: 300 * time.Millisecond},
		KillMin:           time.Second,
		KillMax:           4 * time.Second,
		RestartMin:        200 * time.Millisecond,
		RestartMax:        time.Second,
		PauseRatio:        0.2,
		PauseMin:          5 * time.Second,
		PauseMax:          7 * time.Second,
		WindowWait:        3 * time.Second,
		MinKills:          3,
		MinPauses:         3,
		Heartbeat:         2 * time.Second,
		StartToClose:      10 * time.Second,
		ScheduleToClose:   3 * time.Minute,
		RetryInitial:      100 * time.Millisecond,
		RetryMax:          time.Second,
		WorkflowTimeout:   5 * time.Minute,
		BodyWork:          20 * time.Millisecond,
		BodyAfter:         100 * time.Millisecond,
		LongWork:          4 * time.Second,
		Timeout:           40 * time.Minute,
	}
}

// ShortConfig is the short run (-short; make test's TestChaosShort runs
// 30 of its workflows): 40 workflows of 10 guarded
// operations and a conflicting twin (400 keys, 484 executions with the
// twin workflows), a kill or pause every 2–5 s, so that several land
// within the run while the (race-enabled) workers get time to start and
// work between them, one in three of them a pause (after the first
// three kills, and the next two always), so that zombies show.
func ShortConfig() Config {
	c := DefaultConfig()
	c.Workflows = 40
	c.InFlight = 8
	c.PauseRatio = 0.35
	c.MinPauses = 2
	c.KillMin = 2 * time.Second
	c.KillMax = 5 * time.Second
	c.ScheduleToClose = 2 * time.Minute
	c.WorkflowTimeout = 150 * time.Second
	c.Timeout = 170 * time.Second
	return c
}

// Postgres returns c set for the PostgreSQL transactional scenario: Store
// is [StorePostgres]. A paused worker's claim can be taken over only once
// its lease (the 2 s heartbeat timeout) and the guard's 1 s clock skew
// have run out and Temporal has retried the activity elsewhere, which the
// 5–7 s pauses leave time for: they make zombies, whose transactions must
// then roll back.
func (c Config) Postgres() Config {
	c.Store = StorePostgres
	return c
}

// ControlRun returns c as a control run ([Config.Control]): no kills,
// pauses or store faults, and a 5 s lease (heartbeat timeout) instead of
// 2 s, with long bodies of 7 s, longer than the lease and the clock-skew
// tolerance. A control run fails on any lease lost, whatever explains it;
// the longer lease keeps a store call slowed by a busy machine (DynamoDB
// Local was seen to take 1.9 s to answer one extension while other builds
// loaded the machine) from losing a 2 s lease, which a run with faults
// would count as explained.
func (c Config) ControlRun() Config {
	c.Control = true
	c.PauseRatio, c.MinKills, c.MinPauses, c.Faults.Rate = 0, 0, 0, 0
	c.Heartbeat, c.LongWork = 5*time.Second, 7*time.Second
	c.StartToClose = max(c.StartToClose, 20*time.Second)
	return c
}

// Redis returns c set for the Redis scenario: Store is [StoreRedis]; the
// bodies, kills, pauses and fault rate are the DynamoDB scenario's, the
// faults those of [faultproxy.Redis].
func (c Config) Redis() Config {
	c.Store = StoreRedis
	return c
}

func (c *Config) validate() error {
	var errs []error
	switch c.Store {
	case "", StoreDynamoDB, StoreDynamoDBTx:
		if c.DynamoDBEndpoint == "" {
			errs = append(errs, fmt.Errorf("no DynamoDB endpoint (set %s; scripts/harness.sh run … does)", DynamoDBEndpointEnv))
		}
	case StorePostgres:
		if c.PostgresURL == "" {
			errs = append(errs, fmt.Errorf("no PostgreSQL URL (set %s; scripts/harness.sh run … does)", PostgresURLEnv))
		} else if err := checkLoopbackURL(c.PostgresURL); err != nil {
			errs = append(errs, err)
		}
	case StoreRedis:
		if c.RedisAddr == "" {
			errs = append(errs, fmt.Errorf("no Redis address (set %s; scripts/harness.sh run … does)", RedisAddrEnv))
		} else if err := checkLoopback(c.RedisAddr); err != nil {
			errs = append(errs, err)
		}
	default:
		errs = append(errs, fmt.Errorf("unknown store %q (dynamodb, dynamodb-tx, postgres or redis)", c.Store))
	}
	if c.TemporalAddress == "" {
		errs = append(errs, fmt.Errorf("no Temporal address (set %s; scripts/harness.sh run … does)", TemporalAddressEnv))
	} else if err := checkLoopback(c.TemporalAddress); err != nil {
		errs = append(errs, err)
	}
	if c.Workflows < 1 || c.OpsPerWorkflow < 2 {
		errs = append(errs, errors.New("need at least 1 workflow of at least 2 operations"))
	}
	if c.Workers < 2 {
		errs = append(errs, errors.New("need at least 2 workers"))
	}
	if c.MinKills < 0 || c.MinPauses < 0 {
		errs = append(errs, errors.New("negative MinKills or MinPauses"))
	}
	if c.WorkerConcurrency < 1 || c.InFlight < 1 {
		errs = append(errs, errors.New("worker concurrency and in-flight workflows must be positive"))
	}
	if c.Control && (c.PauseRatio > 0 || c.MinKills > 0 || c.Faults.Rate > 0) {
		errs = append(errs, errors.New("a control run makes no kills, pauses or faults (PauseRatio, MinKills and Faults.Rate must be 0)"))
	}
	if c.LongWork < 0 || c.WindowWait < 0 {
		errs = append(errs, errors.New("negative LongWork or WindowWait"))
	}
	if c.KillMin <= 0 || c.KillMax < c.KillMin || c.RestartMin < 0 || c.RestartMax < c.RestartMin ||
		c.PauseRatio < 0 || c.PauseRatio > 1 || c.PauseRatio > 0 && (c.PauseMin <= 0 || c.PauseMax < c.PauseMin) {
		errs = append(errs, errors.New("bad kill, restart or pause settings"))
	}
	if c.Heartbeat <= 0 || c.StartToClose < c.Heartbeat || c.ScheduleToClose < c.StartToClose || c.RetryInitial <= 0 || c.RetryMax < c.RetryInitial {
		errs = append(errs, errors.New("bad activity timeouts or retry policy"))
	}
	if c.WorkflowTimeout < c.ScheduleToClose || c.Timeout < c.WorkflowTimeout {
		errs = append(errs, errors.New("the workflow timeout must cover ScheduleToClose, and the run timeout the workflow timeout"))
	}
	return errors.Join(errs...)
}
