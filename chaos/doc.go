// Package chaos is idemguard's chaos suite: guarded Temporal activities run
// by several worker processes that are SIGKILLed, restarted and paused at
// random moments timed into the window after a side effect, against an
// idempotency store (DynamoDB Local) behind a proxy that injects errors,
// throttling and latency; a ledger of every side effect; a log of every
// store call each worker's guard made; and checks, after the run, that no
// effect happened twice where the library promises it cannot, that no
// record was left stuck, and that every extra run and every lost lease has
// a cause the suite injected, in the right process at the right time.
//
// # What runs
//
// The driver ([Run]) creates two tables in DynamoDB Local, the idempotency
// table and the ledger, starts a fault-injecting reverse proxy (the
// repository's internal/testing/faultproxy) on 127.0.0.1 in front of DynamoDB
// Local, and starts Config.Workers worker processes (this executable
// again, with [WorkerEnv] set; see [RunWorkerIfChild]). Each registers
// [Workflow] and four activities guarded with activity.Wrap over the
// DynamoDB store, whose client goes through the proxy, the store wrapped so
// that every call is written to the worker's calls log:
//
//   - ChaosKeyed passes guard.KeyFromContext downstream: its side effect is
//     a ledger write conditional on the key not being there yet, as a
//     payment provider deduplicates on an Idempotency-Key header;
//   - ChaosPlain does not: each run writes a new ledger entry;
//   - ChaosExplicit is the plain body keyed by an explicit id with payload
//     validation; a conflicting twin (the id with another payload) must be
//     refused;
//   - ChaosSteps runs two steps (guard.Step), and fails after the first on
//     its first attempt; the retry must replay it and run the second.
//
// One operation of each workflow works for longer than its lease, which
// the guard must extend. The driver starts Config.Workflows workflows
// (plus a twin with the same operations, hence the same keys, for every
// Config.TwinEvery-th), each running its guarded activities at once, and
// meanwhile SIGKILLs a worker every KillMin–KillMax — the first to report a
// body in the window between its side effect and its completion — and
// restarts it; at some of those moments (Config.PauseRatio) it pauses the
// worker instead (SIGSTOP, then SIGCONT after longer than a lease, the
// skew tolerance and a retry elsewhere), making it a zombie holder whose
// key another worker takes over and whose late writes the fencing token
// must refuse. A control run (Config.Control) does none of that, and
// injects no fault.
//
// # What is checked
//
// After every workflow has ended, the workers are stopped, the longest
// lease is waited out, and the idempotency table, the ledger, the done
// files and the calls logs are read:
//
//   - every workflow completed;
//   - every claim whose lease was lost (its lease end passed before it
//     completed or was released, or a fenced call found its token gone)
//     lost it to a kill of its process before the lease end, a pause across
//     it, or an extension or completion that failed or came back late; no
//     claim was taken over while its lease was live, or after an outcome
//     was recorded; the store accepted no fenced write under a token after
//     a takeover; no two processes were told different results;
//   - every extra run (a body run that did not make the recorded outcome)
//     and every IdempotencyLeaseLost or IdempotencyNotRecorded report is
//     tied to such a loss of its own claim; otherwise it is a violation
//     (for plain, explicit and step effects, a duplicate effect);
//   - keyed operations: exactly one effect per key, and the result every
//     workflow got (twins alike) is that effect;
//   - of an explicit id's two payloads one is recorded, every execution of
//     the other was refused and none was handed another payload's result;
//     each step ran under one key, and its record holds what every
//     execution got;
//   - every key the guard derived is the documented one (scope, "#",
//     SHA-256 of the RFC 8785 canonical JSON of the input, or of the id);
//   - every key's record is COMPLETED and holds the result the workflows
//     got; none is left INPROGRESS (stuck);
//   - a control run has no lost lease, no extra run (but the stepped
//     bodies' deliberate ones) and no lease-lost report at all.
//
// The ledger is a DynamoDB table reached without the proxy, with one item
// per entry whose id no other entry can take, so it can neither lose nor
// merge effects. Workers also append lines to per-process files (O_APPEND,
// one write per line; SIGKILL does not lose a write that returned): the
// done file (results the guard returned as recorded, bodies in their
// window, deliberate failures) and the calls log (every store call, with
// its start, end, lease end and answer, on the machine clock every process
// shares).
//
// # Other stores
//
// With Config.Store set to [StorePostgres] the operations are
// transactional bodies on PostgreSQL (guard.DoTx), without a proxy; with
// [StoreDynamoDBTx] they are transactional bodies on DynamoDB, whose
// ledger item is sent in the TransactWriteItems that completes the record,
// through the fault proxy; with
// [StoreRedis] they are the keyed and plain bodies above on store/redis,
// through internal/testing/faultproxy's Redis proxy, a TCP proxy that injects
// connection-level faults (resets before and after a command ran, lost
// replies, error replies, latency), with the ledger on the same redis-server reached directly.
//
// # Running
//
//	make chaos                                              # the full run (cmd/chaos)
//	make chaos CHAOSFLAGS='-store redis'                    # the same on Redis
//	make chaos CHAOSFLAGS='-store dynamodb-tx'              # transactional bodies on DynamoDB
//	make chaos CHAOSFLAGS='-control'                        # the control run
//	scripts/harness.sh run go test -count=1 -v ./chaos/...  # the short runs of make test
//
// See docs/chaos.md for the options and recorded figures.
package chaos
