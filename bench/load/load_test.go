package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	goredis "github.com/redis/go-redis/v9"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/testing/dynamodbtest"
	"github.com/idemguard/idemguard/internal/testing/postgrestest"
	"github.com/idemguard/idemguard/internal/testing/redistest"
	"github.com/idemguard/idemguard/store"
	idemddb "github.com/idemguard/idemguard/store/dynamodb"
	"github.com/idemguard/idemguard/store/memory"
)

// setUp builds cfg's bench with one caller, as the tests that look at
// single calls need it, and closes it when the test ends; the context ends
// after a minute.
func setUp(t *testing.T, cfg Config) (context.Context, *bench) {
	t.Helper()
	cfg.Concurrency = 1
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	b, err := newBench(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.close() })
	return ctx, b
}

// pgKeyGuard is a guard that derives keys as the benchmark's do.
func (b *bench) pgKeyGuard(t *testing.T) *guard.Guard {
	g, err := guard.New(memory.New())
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestScenarioRequestCounts runs every scenario with a few operations
// against DynamoDB Local and checks the deterministic targets: requests per
// operation (2 on a miss, 1 on a replay, 0 from the local cache), at most 3
// requests and one function run per hot-key burst, no errors in wait mode.
// It checks no timings.
func TestScenarioRequestCounts(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Endpoint = dynamodbtest.Endpoint(t) // skips, or fails under CI=true, without the server
	cfg.Concurrency = 4
	cfg.Ops = 24
	cfg.Rounds = 2
	cfg.Warmup = 4
	cfg.ReplayKeys = 8
	cfg.HotCalls = 64
	cfg.HotHold = 200 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, log bytes.Buffer
	results, err := Run(ctx, cfg, &out, &log)
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, log.String())
	}
	if len(results) != len(DynamoScenarios) {
		t.Fatalf("got %d results, want one per scenario (%d)", len(results), len(DynamoScenarios))
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != len(results) {
		t.Errorf("printed %d lines, want %d:\n%s", len(lines), len(results), out.String())
	}
	for _, line := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Errorf("line %q is not JSON: %v", line, err)
		}
	}

	for _, r := range results {
		for _, p := range Problems(r) {
			if p.Hard {
				t.Errorf("%s: %s", p.Scenario, p.Msg)
			}
		}
		switch r.Scenario {
		case MissRaw, MissGuarded, ReplayRaw, ReplayGuarded, ReplayCachedGuarded, TxRaw, TxProtocolRaw, TxGuarded, TxReplayGuarded, TxReplayCachedGuarded:
			if r.Ops != cfg.Ops {
				t.Errorf("%s ran %d ops, want %d", r.Scenario, r.Ops, cfg.Ops)
			}
		case HotKeyWait, HotKeyReject:
			if r.Bursts != cfg.Rounds || r.Ops != cfg.Rounds*cfg.HotCalls {
				t.Errorf("%s ran %d bursts, %d calls; want %d, %d", r.Scenario, r.Bursts, r.Ops, cfg.Rounds, cfg.Rounds*cfg.HotCalls)
			}
		}
		if r.Scenario == HotKeyReject {
			// By construction (the function returns once every other caller
			// has been turned away) a reject burst sends exactly the
			// leader's claim and completion.
			if want := 2 * cfg.Rounds; r.Requests != want {
				t.Errorf("%s sent %d requests in %d bursts; want %d", r.Scenario, r.Requests, r.Bursts, want)
			}
			if want := int64(cfg.Rounds * (cfg.HotCalls - 1)); r.InProgress != want {
				t.Errorf("%s: %d calls got ErrInProgress; want %d", r.Scenario, r.InProgress, want)
			}
		}
		if base, ok := baselines[r.Scenario]; ok && (r.Baseline != base || r.ThroughputRatio == nil || r.CPURatio == nil) {
			t.Errorf("%s: baseline %q, ratios %v, %v; want ratios against %s", r.Scenario, r.Baseline, r.ThroughputRatio, r.CPURatio, base)
		}
	}
	if t.Failed() {
		t.Logf("output:\n%s\n%s", out.String(), log.String())
	}
}

// TestProblems checks that the target check catches what it should, without
// a server.
func TestProblems(t *testing.T) {
	low := 0.9
	ok := 1.0
	for _, tc := range []struct {
		r    Result
		hard int
		soft int
	}{
		{Result{Scenario: MissGuarded, Ops: 10, Requests: 20, BodyRuns: 10, ThroughputRatio: &ok, CPURatio: &ok}, 0, 0},
		{Result{Scenario: MissGuarded, Ops: 10, Requests: 21, BodyRuns: 10, ThroughputRatio: &low, CPURatio: &ok}, 1, 1},
		{Result{Scenario: ReplayGuarded, Ops: 10, Requests: 10, BodyRuns: 1}, 1, 0},
		{Result{Scenario: ReplayCachedGuarded, Ops: 10, Requests: 0}, 0, 0},
		{Result{Scenario: HotKeyWait, Ops: 10, MaxRequestsPerBurst: 3, MaxBodyRunsPerBurst: 1, MinBodyRunsPerBurst: 1}, 0, 0},
		{Result{Scenario: HotKeyWait, Ops: 10, MaxRequestsPerBurst: 4, MaxBodyRunsPerBurst: 2, MinBodyRunsPerBurst: 1, Errors: 1}, 3, 0},
		{Result{Scenario: HotKeyReject, Ops: 10, MaxRequestsPerBurst: 2, MaxBodyRunsPerBurst: 1, MinBodyRunsPerBurst: 1, Errors: 9, InProgress: 9}, 0, 0},
	} {
		var hard, soft int
		for _, p := range Problems(tc.r) {
			if p.Hard {
				hard++
			} else {
				soft++
			}
		}
		if hard != tc.hard || soft != tc.soft {
			t.Errorf("Problems(%+v): %d hard, %d soft; want %d, %d", tc.r, hard, soft, tc.hard, tc.soft)
		}
	}
}

func TestPercentile(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(i))
	}
	if p := percentile(d, 0.5); p != 50 {
		t.Errorf("p50 = %v, want 50", p)
	}
	if p := percentile(d, 0.99); p != 99 {
		t.Errorf("p99 = %v, want 99", p)
	}
	if p := percentile(nil, 0.5); p != 0 {
		t.Errorf("p50 of nothing = %v, want 0", p)
	}
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		xs   []float64
		want float64
	}{{[]float64{3, 1, 2}, 2}, {[]float64{4, 1, 3, 2}, 2.5}, {[]float64{7}, 7}} {
		if m := median(tc.xs); m == nil || *m != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.xs, m, tc.want)
		}
	}
	if m := median(nil); m != nil {
		t.Errorf("median(nil) = %v, want nil", *m)
	}
}

// TestPgScenarioRequestCounts runs the PostgreSQL scenarios with a few
// operations against the harness's server and checks the deterministic
// targets: round trips per operation (2 on a miss, 1 on a replay, 0 from
// the local cache, 3 for the plain transaction and 5 for the
// transactional guard), function runs, no errors.
func TestPgScenarioRequestCounts(t *testing.T) {
	cfg := DefaultConfig()
	cfg.PostgresURL = postgrestest.URL(t) // skips, or fails under CI=true, without the server
	cfg.Scenarios = PgScenarios
	checkScenarioCounts(t, cfg)
}

// TestRedisScenarioRequestCounts does the same for the Redis scenarios:
// round trips counted by the client's hook, 2 on a miss, 1 on a replay, 0
// from the local cache.
func TestRedisScenarioRequestCounts(t *testing.T) {
	cfg := DefaultConfig()
	cfg.RedisAddr = redistest.Addr(t) // skips, or fails under CI=true, without the server
	cfg.Scenarios = RedisScenarios
	checkScenarioCounts(t, cfg)
}

// checkScenarioCounts runs cfg's scenarios with a few operations and checks
// their deterministic targets.
func checkScenarioCounts(t *testing.T, cfg Config) {
	t.Helper()
	cfg.Concurrency = 4
	cfg.Ops = 24
	cfg.Rounds = 2
	cfg.Warmup = 4
	cfg.ReplayKeys = 8
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, log bytes.Buffer
	results, err := Run(ctx, cfg, &out, &log)
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, log.String())
	}
	if len(results) != len(cfg.Scenarios) {
		t.Fatalf("got %d results, want %d", len(results), len(cfg.Scenarios))
	}
	for _, r := range results {
		for _, p := range Problems(r) {
			if p.Hard {
				t.Errorf("%s: %s", p.Scenario, p.Msg)
			}
		}
		if r.Ops != cfg.Ops {
			t.Errorf("%s ran %d ops, want %d", r.Scenario, r.Ops, cfg.Ops)
		}
		if _, ok := wantRequestsPerOp[r.Scenario]; !ok {
			t.Errorf("%s has no request-count target", r.Scenario)
		}
		if base, ok := baselines[r.Scenario]; ok && (r.Baseline != base || r.CPURatio == nil) {
			t.Errorf("%s: baseline %q; want ratios against %s", r.Scenario, r.Baseline, base)
		}
	}
	if t.Failed() {
		t.Logf("output:\n%s\n%s", out.String(), log.String())
	}
}

// The raw PostgreSQL baseline sends the store's statements, text for text:
// a guarded call and the raw one on fresh keys send the same SQL, and the
// transactional guard sends the plain transaction's plus the claim and the
// completion's UPDATE.
func TestPgRawSendsTheStoresStatements(t *testing.T) {
	cfg := DefaultConfig()
	cfg.PostgresURL = postgrestest.URL(t)
	cfg.Scenarios = PgScenarios
	ctx, b := setUp(t, cfg)
	p := b.pg
	sqls := func(call func() error) []string {
		t.Helper()
		p.counter.Log = true
		p.counter.Reset()
		if err := call(); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, s := range p.counter.Statements() {
			out = append(out, s.SQL)
		}
		return out
	}
	in := newOrder("statements-guarded")
	guarded := sqls(func() error { _, err := p.missFn(ctx, in); return err })
	raw := sqls(func() error { return p.rawMiss(ctx, b, "bench-miss#statements-raw", newOrder("statements-raw")) })
	if strings.Join(guarded, "\n--\n") != strings.Join(raw, "\n--\n") {
		t.Errorf("a guarded miss sent\n%s\nthe raw one\n%s", strings.Join(guarded, "\n--\n"), strings.Join(raw, "\n--\n"))
	}
	key, _, err := b.pgKeyGuard(t).Key(scopeMiss, in)
	if err != nil {
		t.Fatal(err)
	}
	guarded = sqls(func() error { _, err := p.missFn(ctx, in); return err }) // now completed: a replay
	raw = sqls(func() error { return p.rawReplay(ctx, key) })
	if len(guarded) != 1 || strings.Join(guarded, "") != strings.Join(raw, "") {
		t.Errorf("a guarded replay sent %q, the raw one %q", guarded, raw)
	}
	plain := sqls(func() error { return p.rawTx(ctx, b, newOrder("statements-tx-raw")) })
	tx := sqls(func() error { _, err := p.txFn(ctx, newOrder("statements-tx")); return err })
	if len(plain) != 3 || len(tx) != 5 || tx[1] != plain[0] || tx[2] != plain[1] || tx[4] != plain[2] ||
		!strings.Contains(tx[0], "ON CONFLICT") || !strings.Contains(tx[3], "UPDATE") {
		t.Errorf("the plain transaction sent %q, the transactional guard %q; want the same with the claim first and the UPDATE before COMMIT", plain, tx)
	}
}

// evalHook records the arguments of every EVALSHA a client sends.
type evalHook struct {
	mu    sync.Mutex
	calls [][]any
}

func (h *evalHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (h *evalHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if strings.EqualFold(cmd.Name(), "evalsha") {
			h.mu.Lock()
			h.calls = append(h.calls, slices.Clone(cmd.Args()))
			h.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}

func (h *evalHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

// take returns the shape of the calls recorded since the last take, one
// line per EVALSHA: the script's SHA-1, the store's field names and status
// values and the stored result as they are; the key, token and times as
// their type and length (times taken a few milliseconds apart have the
// same number of digits), since they differ from call to call.
func (h *evalHook) take(sha map[string]string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	literal := map[string]bool{"INPROGRESS": true, "COMPLETED": true}
	for _, f := range packed {
		literal[f] = true
	}
	var lines []string
	for _, args := range h.calls {
		var parts []string
		for i, a := range args {
			switch v := a.(type) {
			case string:
				switch {
				case i == 0:
					parts = append(parts, strings.ToLower(v))
				case i == 1:
					parts = append(parts, "sha="+sha[v])
				case i == 2:
					parts = append(parts, "keys="+v)
				case literal[v]:
					parts = append(parts, v)
				default:
					parts = append(parts, fmt.Sprintf("string/%d", len(v)))
				}
			case []byte:
				parts = append(parts, "bytes="+string(v))
			case int:
				parts = append(parts, "keys="+strconv.Itoa(v)) // go-redis's EvalSha writes the number of keys as an int
			default:
				parts = append(parts, fmt.Sprintf("%T/%d", v, len(fmt.Sprint(v))))
			}
		}
		lines = append(lines, strings.Join(parts, " "))
	}
	h.calls = nil
	return lines
}

// The raw Redis baseline sends what the store sends: EVALSHA of the same
// scripts, with arguments of the same types, lengths and field names, and
// the same stored result, on a first call and on a replay.
func TestRedisRawSendsTheStoresCommands(t *testing.T) {
	cfg := DefaultConfig()
	cfg.RedisAddr = redistest.Addr(t)
	cfg.Scenarios = RedisScenarios
	ctx, b := setUp(t, cfg)
	r := b.rd
	h := &evalHook{}
	r.client.AddHook(h)
	sha := map[string]string{r.acquireSHA: "acquire", r.completeSHA: "complete"}
	sent := func(call func() error) []string {
		t.Helper()
		h.take(sha)
		if err := call(); err != nil {
			t.Fatal(err)
		}
		return h.take(sha)
	}
	in := newOrder("commands")
	guarded := sent(func() error { _, err := r.missFn(ctx, in); return err })
	key, _, err := b.pgKeyGuard(t).Key(scopeMiss, in)
	if err != nil {
		t.Fatal(err)
	}
	// Another key of the same length, the same order: the same result.
	other := key[:len(key)-8] + "00000000"
	raw := sent(func() error { return r.rawMiss(ctx, b, other, in) })
	if len(guarded) != 2 || !slices.Equal(guarded, raw) {
		t.Errorf("a guarded miss sent\n%s\nthe raw one\n%s", strings.Join(guarded, "\n"), strings.Join(raw, "\n"))
	}
	if !strings.HasPrefix(guarded[0], "evalsha sha=acquire ") || !strings.Contains(guarded[1], `bytes={"charge_id":"ch_commands","status":"charged"}`) {
		t.Errorf("a guarded miss sent\n%s\nwant the claim script, then the completion with the result", strings.Join(guarded, "\n"))
	}
	guarded = sent(func() error { _, err := r.missFn(ctx, in); return err }) // now completed: a replay
	raw = sent(func() error { return r.rawReplay(ctx, key) })
	if len(guarded) != 1 || !slices.Equal(guarded, raw) {
		t.Errorf("a guarded replay sent %q, the raw one %q", guarded, raw)
	}
}

// txCapture is a DynamoDB client that answers TransactWriteItems with
// success and keeps the request; it has nothing else.
type txCapture struct {
	idemddb.API
	in *dynamodb.TransactWriteItemsInput
}

func (c *txCapture) TransactWriteItems(_ context.Context, in *dynamodb.TransactWriteItemsInput, _ ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	c.in = in
	return &dynamodb.TransactWriteItemsOutput{}, nil
}

// TestTxProtocolRawSendsTheStoresRequest holds tx_protocol_raw's
// completion to the one store/dynamodb adds to a transaction for the same
// record: the same expressions, names, key and values.
func TestTxProtocolRawSendsTheStoresRequest(t *testing.T) {
	capt := &txCapture{}
	s, err := idemddb.New(capt, "idempotency")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tx, err := s.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	data := []byte(`{"charge_id":"ch_1","status":"charged"}`)
	expires := time.Now().Add(rawTTL)
	rec := &store.Record{Key: "bench-tx#k", Status: store.StatusCompleted, Token: "tok", Result: data, ExpiresAt: expires}
	if err := tx.Complete(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	got := capt.in.TransactItems[0].Update
	b := &bench{table: "idempotency"}
	want := b.txCompletion(rec.Key, rec.Token, data, expires).Update
	if *got.ConditionExpression != *want.ConditionExpression || *got.UpdateExpression != *want.UpdateExpression {
		t.Errorf("store sends condition %q, update %q; the raw protocol %q, %q",
			*got.ConditionExpression, *got.UpdateExpression, *want.ConditionExpression, *want.UpdateExpression)
	}
	if !reflect.DeepEqual(got.ExpressionAttributeNames, want.ExpressionAttributeNames) || !reflect.DeepEqual(got.Key, want.Key) || *got.TableName != *want.TableName {
		t.Errorf("store sends names %v, key %v; the raw protocol %v, %v", got.ExpressionAttributeNames, got.Key, want.ExpressionAttributeNames, want.Key)
	}
	if !reflect.DeepEqual(got.ExpressionAttributeValues, want.ExpressionAttributeValues) {
		t.Errorf("store sends values %v; the raw protocol %v", got.ExpressionAttributeValues, want.ExpressionAttributeValues)
	}
}
