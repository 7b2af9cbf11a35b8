package chaos_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/idemguard/idemguard/chaos"
	"github.com/idemguard/idemguard/internal/testing/testenv"
)

// TestMain turns this test binary into a chaos worker when the driver
// starts it as one.
func TestMain(m *testing.M) {
	chaos.RunWorkerIfChild()
	os.Exit(m.Run())
}

// endpoints returns the servers' addresses from the environment; without
// them the test is skipped, or fails when CI=true.
func endpoints(t *testing.T) (ddb, temporal string) {
	t.Helper()
	ddb, temporal = os.Getenv(chaos.DynamoDBEndpointEnv), os.Getenv(chaos.TemporalAddressEnv)
	if ddb == "" || temporal == "" {
		testenv.Missing(t, chaos.DynamoDBEndpointEnv+" and "+chaos.TemporalAddressEnv+" must be set (scripts/harness.sh run go test ./chaos/...)")
	}
	return ddb, temporal
}

// logWriter sends the driver's progress lines to the test log.
type logWriter struct{ t *testing.T }

func (w logWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// The short chaos run of make test: at least 300 guarded operations and
// 3 kills, no duplicate effect, no stuck record, every extra run and lost
// lease explained.
func TestChaosShort(t *testing.T) {
	ddb, temporal := endpoints(t)
	cfg := chaos.ShortConfig()
	cfg.DynamoDBEndpoint, cfg.TemporalAddress = ddb, temporal
	cfg.Workflows = 30
	rep := runShort(t, cfg)
	if rep.Operations < 300 {
		t.Errorf("%d guarded operations, want at least 300", rep.Operations)
	}
	if rep.Kills < 3 {
		t.Errorf("%d kills, want at least 3", rep.Kills)
	}
	if rep.FaultsTotal == 0 {
		t.Errorf("no fault injected in %d store requests", rep.Requests)
	}
}

// The control run: the short run's load — long bodies, twins, conflicting
// payloads, steps that fail after a first step — with no kills, pauses or
// store faults. Nothing may run twice and no lease may be lost.
func TestChaosControl(t *testing.T) {
	ddb, temporal := endpoints(t)
	cfg := chaos.ShortConfig().ControlRun()
	cfg.DynamoDBEndpoint, cfg.TemporalAddress = ddb, temporal
	cfg.Workflows = 15
	rep := runShort(t, cfg)
	if rep.ExtraRuns != rep.ExtraRunsDeliberate || rep.LeasesLost != 0 || rep.LeaseLostReports != 0 || rep.Kills+rep.Pauses != 0 || rep.FaultsTotal != 0 {
		t.Errorf("control run: %d extra runs (%d deliberate), %d leases lost, %d lease-lost reports, %d kills, %d pauses, %d faults; want no extra run, loss, kill, pause or fault",
			rep.ExtraRuns, rep.ExtraRunsDeliberate, rep.LeasesLost, rep.LeaseLostReports, rep.Kills, rep.Pauses, rep.FaultsTotal)
	}
}

// The short run of the PostgreSQL transactional scenario: the same load,
// every operation a transactional body whose row commits with its record;
// kills timed into the window between the row and the commit roll the row
// back, and no operation ends with two rows or none.
func TestChaosShortPostgres(t *testing.T) {
	temporal := testenv.Require(t, chaos.TemporalAddressEnv, "Temporal dev server")
	pg := testenv.Require(t, chaos.PostgresURLEnv, "PostgreSQL server")
	cfg := chaos.ShortConfig().Postgres()
	cfg.PostgresURL, cfg.TemporalAddress = pg, temporal
	cfg.Workflows = 20
	rep := runShort(t, cfg)
	if rep.Operations < 220 || rep.TxEffects < rep.Keys {
		t.Errorf("%d operations, %d committed rows for %d keys; want at least 220 operations and a row per key", rep.Operations, rep.TxEffects, rep.Keys)
	}
	if rep.Kills < 3 || rep.TxRolledBackByKill+rep.TxRolledBackByPause < 1 {
		t.Errorf("%d kills, %d transactions rolled back in the window by a kill or pause; want at least 3 and 1", rep.Kills, rep.TxRolledBackByKill+rep.TxRolledBackByPause)
	}
}

// A shorter run of the Redis scenario than the other stores' (the full run
// is make chaos CHAOSFLAGS='-store redis'): the DynamoDB scenario's bodies,
// with store/redis through the TCP fault proxy, 20 workflows (220
// operations) and a kill or pause every 1–2.5 s, so that it adds about 20 s
// to make test.
func TestChaosShortRedis(t *testing.T) {
	temporal := testenv.Require(t, chaos.TemporalAddressEnv, "Temporal dev server")
	addr := testenv.Require(t, chaos.RedisAddrEnv, "redis-server")
	cfg := chaos.ShortConfig().Redis()
	cfg.RedisAddr, cfg.TemporalAddress = addr, temporal
	cfg.Workflows = 20
	cfg.KillMin, cfg.KillMax = 1500*time.Millisecond, 3*time.Second
	rep := runShort(t, cfg)
	if rep.Operations < 220 || rep.Kills < 3 {
		t.Errorf("%d operations, %d kills; want at least 220 and 3", rep.Operations, rep.Kills)
	}
	if rep.FaultsTotal == 0 {
		t.Errorf("no fault injected in %d store commands", rep.Requests)
	}
}

// A short run of the DynamoDB transactional scenario (the full run is make
// chaos CHAOSFLAGS='-store dynamodb-tx'): every operation a transactional
// body whose ledger item is sent in one TransactWriteItems with its
// record's completion, through the fault proxy; 20 workflows (220
// operations), a kill or pause every 1–2.5 s timed into the window
// between the body's write and the commit. No operation ends with two
// items or none.
func TestChaosShortDynamoDBTx(t *testing.T) {
	ddb, temporal := endpoints(t)
	cfg := chaos.ShortConfig().DynamoDBTx()
	cfg.DynamoDBEndpoint, cfg.TemporalAddress = ddb, temporal
	cfg.Workflows = 20
	cfg.KillMin, cfg.KillMax = 1500*time.Millisecond, 3*time.Second
	rep := runShort(t, cfg)
	if rep.Operations < 220 || rep.TxEffects < rep.Keys {
		t.Errorf("%d operations, %d committed items for %d keys; want at least 220 operations and an item per key", rep.Operations, rep.TxEffects, rep.Keys)
	}
	if rep.Kills < 3 || rep.TxRolledBackByKill+rep.TxRolledBackByPause < 1 {
		t.Errorf("%d kills, %d transactions never sent or cancelled after the window by a kill or pause; want at least 3 and 1", rep.Kills, rep.TxRolledBackByKill+rep.TxRolledBackByPause)
	}
	if rep.FaultsTotal == 0 {
		t.Errorf("no fault injected in %d store requests", rep.Requests)
	}
}

// runShort runs cfg with this test binary as the workers, logs the report,
// and fails the test on a violation.
func runShort(t *testing.T, cfg chaos.Config) *chaos.Report {
	t.Helper()
	cfg.WorkerCommand = []string{os.Args[0], "-test.run=^$"}
	cfg.WorkDir = t.TempDir()
	cfg.Log = logWriter{t}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Timeout)
	defer cancel()
	rep, err := chaos.Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	rep.Print(&b)
	t.Log("\n" + b.String())
	if !rep.OK() {
		t.Fatalf("%d violations (first: %s)", len(rep.Violations), rep.Violations[0])
	}
	// What every run exercises: bodies longer than the lease, whose
	// claims were extended; conflicting payloads refused; steps that
	// failed after a first step and were retried.
	if rep.LongOps == 0 || rep.ExtendedClaims == 0 {
		t.Errorf("%d long bodies, %d claims extended before they completed; want some of each", rep.LongOps, rep.ExtendedClaims)
	}
	if rep.PayloadConflicts == 0 || rep.PayloadRefusals == 0 {
		t.Errorf("%d conflicting twins, %d refused; want some of each", rep.PayloadConflicts, rep.PayloadRefusals)
	}
	if rep.StepKeys == 0 || rep.DeliberateFailures == 0 {
		t.Errorf("%d step keys, %d deliberate failures after a step; want some of each", rep.StepKeys, rep.DeliberateFailures)
	}
	return rep
}
