package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/idemguard/idemguard/internal/testing/testenv"
	"github.com/idemguard/idemguard/telemetry"
)

// requireEnv returns the variable's value, skipping the test when it is
// unset, or failing it when CI=true.
func requireEnv(t *testing.T, name string) string {
	t.Helper()
	return testenv.Require(t, name, "server at "+name)
}

// keptSpans is an in-memory exporter standing in for Jaeger that keeps its
// spans when the tracer provider shuts it down.
type keptSpans struct{ *tracetest.InMemoryExporter }

func (keptSpans) Shutdown(context.Context) error { return nil }

func unique(prefix string) string {
	var b [4]byte
	rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}

// The example against the harness's Temporal dev server and DynamoDB Local:
// every order is charged once although each is submitted twice and every
// first attempt crashes, and the spans reach the exporter.
func TestPayments(t *testing.T) {
	cfg, err := parseConfig(nil, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	cfg.TemporalAddress = requireEnv(t, "IDEMGUARD_TEMPORAL_ADDRESS")
	cfg.DynamoDBEndpoint = requireEnv(t, "IDEMGUARD_DYNAMODB_ENDPOINT")
	cfg.Table = unique("payments-test")
	cfg.TaskQueue = unique("payments-test")
	cfg.Orders = 3
	t.Cleanup(func() {
		client := dynamodb.New(dynamodb.Options{Region: cfg.Region, BaseEndpoint: aws.String(cfg.DynamoDBEndpoint), Credentials: localCredentials{}})
		client.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(cfg.Table)})
	})

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	exp := keptSpans{tracetest.NewInMemoryExporter()}
	var out bytes.Buffer
	start := time.Now()
	sum, err := run(ctx, cfg, exp, &out)
	t.Logf("ran in %v:\n%s", time.Since(start).Round(time.Millisecond), out.String())
	if err != nil {
		t.Fatalf("run: %v", err)
	}

	if len(sum.Charges) != cfg.Orders {
		t.Fatalf("%d orders charged, want %d", len(sum.Charges), cfg.Orders)
	}
	for order, n := range sum.Charges {
		rs := sum.Receipts[order]
		// The guard, not the provider's deduplication, keeps the second
		// request away: one request per order.
		if req := sum.Requests[order]; req != 1 || n != 1 || len(rs) != 2 || rs[0] != rs[1] {
			t.Errorf("order %s: %d charge requests, charged %d times, receipts %+v; want 1, once, two equal receipts", order, req, n, rs)
		}
	}
	if !strings.Contains(out.String(), "workflows, charge requests: 1, charges: 1, receipt ch_") {
		t.Errorf("output lacks the charges per order")
	}

	spans := exp.GetSpans()
	var crashed, executed, replayed int
	for _, s := range spans {
		if s.Resource.String() == "" || !strings.Contains(s.Resource.String(), ServiceName) {
			t.Fatalf("span %s has resource %q, want service.name %s", s.Name, s.Resource.String(), ServiceName)
		}
		attrs := map[string]string{}
		for _, a := range s.Attributes {
			attrs[string(a.Key)] = a.Value.Emit()
		}
		switch {
		case s.Name == "RunActivity:Charge" && s.Status.Code == codes.Error:
			crashed++
		case s.Name == telemetry.SpanExecute && attrs[string(telemetry.OutcomeKey)] == telemetry.OutcomeExecuted:
			executed++
		case s.Name == telemetry.SpanExecute && attrs[string(telemetry.OutcomeKey)] == telemetry.OutcomeReplayed:
			replayed++
		}
	}
	// Each order: two workflows, each with a crashed first attempt and a
	// retry; one execution, and at least the two retries replay.
	if crashed < 2*cfg.Orders || executed != cfg.Orders || replayed < 2*cfg.Orders {
		t.Errorf("spans: %d crashed attempts, %d executed, %d replayed; want ≥%d, %d, ≥%d (of %d spans)",
			crashed, executed, replayed, 2*cfg.Orders, cfg.Orders, 2*cfg.Orders, len(spans))
	}
}

// The flags take their defaults from the environment, else from the
// compose file's ports.
func TestParseConfig(t *testing.T) {
	c, err := parseConfig(nil, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		TemporalAddress: DefaultTemporalAddress, Namespace: DefaultNamespace, TaskQueue: DefaultTaskQueue,
		DynamoDBEndpoint: DefaultDynamoDBEndpoint, Table: DefaultTable, Region: DefaultRegion,
		OTLPEndpoint: DefaultOTLPEndpoint, Orders: 3, Crash: true,
	}
	if c != want {
		t.Errorf("defaults %+v, want %+v", c, want)
	}

	env := map[string]string{
		"TEMPORAL_ADDRESS":            "127.0.0.1:1",
		"IDEMGUARD_TEMPORAL_ADDRESS":  "127.0.0.1:2", // wins over TEMPORAL_ADDRESS
		"TEMPORAL_NAMESPACE":          "ns",
		"AWS_ENDPOINT_URL_DYNAMODB":   "http://127.0.0.1:3",
		"IDEMGUARD_DYNAMODB_TABLE":    "t",
		"AWS_REGION":                  "eu-west-1",
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4",
	}
	c, err = parseConfig([]string{"-orders", "0", "-serve", "-table", "flag-wins"}, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	want = Config{
		TemporalAddress: "127.0.0.1:2", Namespace: "ns", TaskQueue: DefaultTaskQueue,
		DynamoDBEndpoint: "http://127.0.0.1:3", Table: "flag-wins", Region: "eu-west-1",
		OTLPEndpoint: "http://127.0.0.1:4", Orders: 0, Crash: true, Serve: true,
	}
	if c != want {
		t.Errorf("from the environment and flags %+v, want %+v", c, want)
	}
}
