// Package chaos is idemguard's chaos suite: guarded Temporal activities run
// by several worker processes that are SIGKILLed and restarted at random,
// against an idempotency store (DynamoDB Local) behind a proxy that
// injects errors, throttling and latency; a ledger of every side effect;
// and checks, after the run, that no effect happened twice where the
// library promises it cannot and that no record was left stuck.
//
// # What runs
//
// The driver ([Run]) creates two tables in DynamoDB Local, the idempotency
// table and the ledger, starts a fault-injecting reverse proxy (the
// repository's internal/faultproxy) on 127.0.0.1 in front of DynamoDB
// Local, and starts Config.Workers worker processes (this executable
// again, with [WorkerEnv] set; see [RunWorkerIfChild]). Each worker
// registers [Workflow] and two activities guarded with activity.Wrap over
// the DynamoDB store, whose client goes through the proxy:
//
//   - ChaosKeyed passes guard.KeyFromContext downstream: its side effect is
//     a ledger write conditional on the key not being there yet, as a
//     payment provider deduplicates on an Idempotency-Key header;
//   - ChaosPlain does not: each run writes a new ledger entry.
//
// The driver starts Config.Workflows workflows (plus a twin with the same
// operations, hence the same keys, for every Config.TwinEvery-th), each
// running its guarded activities at once, and meanwhile SIGKILLs a random
// worker every KillMin–KillMax and restarts it; at some of those moments
// (Config.PauseRatio) it pauses the worker instead (SIGSTOP, then SIGCONT
// after longer than a lease), making it a zombie holder whose claims others
// take over and whose late writes the fencing token must refuse.
// Activities have a 2 s heartbeat timeout, which is also the guard's
// lease, so a killed worker's claims lapse within seconds, and an
// unlimited retry policy bounded by ScheduleToClose.
//
// # What is checked
//
// After every workflow has ended, the workers are stopped, the longest
// lease is waited out, and the idempotency table and the ledger are read:
//
//   - every workflow completed;
//   - keyed operations: exactly one effect per key, and the result every
//     workflow got (twins alike) is that effect;
//   - plain operations: at least one effect. A plain body can legitimately
//     run again when its worker dies after the side effect and before the
//     completion write (the window documented in package guard); every
//     extra run must be explained by a SIGKILL of the earlier run's process
//     after its effect, by a pause of it around its effect, or by the guard
//     reporting IdempotencyLeaseLost or IdempotencyNotRecorded for it. An extra run with no such explanation,
//     or any run after a result was recorded, counts as a duplicate effect;
//   - keyed operations whose body ran more than once are held to the same
//     rule (the ledger closed the window, but the guard must not have
//     opened it without cause);
//   - every key the guard derived is the documented one (scope, "#",
//     SHA-256 of the RFC 8785 canonical JSON of the input);
//   - every key's record is COMPLETED and holds the result the workflows
//     got; none is left INPROGRESS (stuck).
//
// The ledger is a DynamoDB table reached without the proxy, with one item
// per entry whose id no other entry can take, so it can neither lose nor
// merge effects. Workers also append a line to a per-process file (O_APPEND,
// one write per line) whenever the guard returns an effect of theirs as
// recorded; SIGKILL does not lose a write that returned.
//
// # Other stores
//
// With Config.Store set to [StorePostgres] the operations are
// transactional bodies on PostgreSQL (guard.DoTx), without a proxy; with
// [StoreDynamoDBTx] they are transactional bodies on DynamoDB, whose
// ledger item is sent in the TransactWriteItems that completes the record,
// through the fault proxy; with
// [StoreRedis] they are the keyed and plain bodies above on store/redis,
// through internal/faultproxy's Redis proxy, a TCP proxy that injects
// connection-level faults (resets before and after a command ran, lost
// replies, error replies, latency), with the ledger on the same redis-server reached directly.
//
// # Running
//
//	make chaos                                              # the full run (cmd/chaos)
//	make chaos CHAOSFLAGS='-store redis'                    # the same on Redis
//	make chaos CHAOSFLAGS='-store dynamodb-tx'              # transactional bodies on DynamoDB
//	scripts/harness.sh run go test -count=1 -v ./chaos/...  # the short run (TestChaosShort)
//
// See docs/chaos.md for the options and recorded figures.
package chaos
