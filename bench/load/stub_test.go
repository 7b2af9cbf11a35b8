package main

import (
	"bytes"
	"context"
	"testing"
	"time"
)

// BenchmarkClient measures the client's CPU time and allocations per
// operation of each miss and replay scenario against stubDynamo: what the
// guard adds to the raw SDK requests, without a server or a network.
//
//	go test -run '^$' -bench Client -benchmem ./bench/load/
func BenchmarkClient(b *testing.B) {
	ctx := context.Background()
	cfg := DefaultConfig()
	cfg.Endpoint = "http://127.0.0.1:9" // never dialled: the stub answers
	cfg.httpClient = newStubDynamo()
	cfg.ReplayKeys = 100
	bn, err := newBench(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	if err := bn.populate(ctx); err != nil {
		b.Fatal(err)
	}
	for _, name := range []string{MissRaw, MissGuarded, ReplayRaw, ReplayGuarded, ReplayCachedGuarded} {
		b.Run(name, func(b *testing.B) {
			op, err := bn.prepare(name, b.N)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if err := op(ctx, i, 0, i); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestRunWithStub runs every scenario against stubDynamo: the harness
// itself (request counting, bursts, checks, JSON lines) without a server.
func TestRunWithStub(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Endpoint = "http://127.0.0.1:9" // never dialled: the stub answers
	cfg.httpClient = newStubDynamo()
	cfg.Concurrency, cfg.Ops, cfg.Rounds, cfg.Warmup = 4, 30, 3, 5
	cfg.ReplayKeys, cfg.HotCalls, cfg.HotHold = 10, 50, 50*time.Millisecond
	var out, log bytes.Buffer
	results, err := Run(context.Background(), cfg, &out, &log)
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, log.String())
	}
	if len(results) != len(DynamoScenarios) {
		t.Fatalf("%d results; want %d", len(results), len(DynamoScenarios))
	}
	for _, r := range results {
		for _, p := range Problems(r) {
			if p.Hard {
				t.Errorf("%s: %s", p.Scenario, p.Msg)
			}
		}
	}
	if t.Failed() {
		t.Logf("%s\n%s", out.String(), log.String())
	}
}
