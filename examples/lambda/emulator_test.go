// The example functions built as Lambda builds them (a bootstrap for
// provided.al2023) and run under the AWS Lambda Runtime Interface
// Emulator, on DynamoDB Local: scripts/harness.sh installs the emulator
// and exports its path as IDEMGUARD_LAMBDA_RIE. The side effects are
// counted outside the functions, in the shipments table they write to.
// These tests use only the public API.
package lambda_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemguard/idemguard/guard"
	idemddb "github.com/idemguard/idemguard/store/dynamodb"
)

// require returns the environment variable name, or skips the test (fails
// it when CI=true) without it.
func require(t *testing.T, name string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		msg := name + " is not set; run the tests with scripts/harness.sh run (make test)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return v
}

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

// bootstrap builds the function in dir (relative to this package) as
// Lambda's provided runtimes run it, once per test binary, and returns the
// path of its bootstrap.
func bootstrap(t *testing.T, dir string) string {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "lambdaguard-bootstrap-")
		if buildErr != nil {
			return
		}
		for _, d := range []string{"sqs", "api", "internal/orderfn"} {
			out := filepath.Join(buildDir, d, "bootstrap")
			cmd := exec.Command("go", "build", "-tags", "lambda.norpc", "-o", out, "./"+d)
			cmd.Env = append(os.Environ(), "GOOS=linux", "CGO_ENABLED=0")
			if b, err := cmd.CombinedOutput(); err != nil {
				buildErr = fmt.Errorf("go build ./%s: %v\n%s", d, err, b)
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(buildDir, dir, "bootstrap")
}

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// fixture is one test's tables, client and function environment.
type fixture struct {
	t         *testing.T
	db        *dynamodb.Client
	table     string // the idempotency table
	shipments string
	endpoint  string
}

func newFixture(t *testing.T) *fixture {
	endpoint := require(t, "IDEMGUARD_DYNAMODB_ENDPOINT")
	require(t, "IDEMGUARD_LAMBDA_RIE")
	db := dynamodb.New(dynamodb.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(endpoint),
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "local", SecretAccessKey: "local"}, nil
		}),
	})
	f := &fixture{t: t, db: db, endpoint: endpoint}
	suffix := strconv.FormatInt(time.Now().UnixNano(), 36)
	f.table, f.shipments = "idempotency-"+suffix, "shipments-"+suffix
	ctx := context.Background()
	if err := idemddb.CreateTable(ctx, db, f.table); err != nil && !strings.Contains(err.Error(), "TTL") {
		t.Fatal(err)
	}
	_, err := db.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(f.shipments),
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("order_id"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("order_id"), KeyType: types.KeyTypeHash}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, tb := range []string{f.table, f.shipments} {
			db.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(tb)})
		}
	})
	return f
}

// shipments returns how many times order was shipped (the side effect).
func (f *fixture) shipmentsOf(order string) int {
	f.t.Helper()
	out, err := f.db.GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName: aws.String(f.shipments), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"order_id": &types.AttributeValueMemberS{Value: order}},
	})
	if err != nil {
		f.t.Fatal(err)
	}
	n, ok := out.Item["shipments"].(*types.AttributeValueMemberN)
	if !ok {
		return 0
	}
	v, _ := strconv.Atoi(n.Value)
	return v
}

// record returns the idempotency record under key, as the store reads it.
func (f *fixture) record(key string) *idemRecord {
	f.t.Helper()
	s, err := idemddb.New(f.db, f.table)
	if err != nil {
		f.t.Fatal(err)
	}
	rec, err := s.Get(context.Background(), key)
	if err != nil {
		f.t.Fatalf("record %s: %v", key, err)
	}
	return &idemRecord{Status: rec.Status.String(), LeaseExpiresAt: rec.LeaseExpiresAt}
}

type idemRecord struct {
	Status         string
	LeaseExpiresAt time.Time
}

// emulator is one aws-lambda-rie process running a function: one execution
// environment, which runs one invocation at a time.
type emulator struct {
	url string
	cmd *exec.Cmd
	out *bytes.Buffer
}

// start runs the function at bin under a new emulator with timeout
// seconds per invocation.
func (f *fixture) start(bin string, timeout int) *emulator {
	f.t.Helper()
	rie := require(f.t, "IDEMGUARD_LAMBDA_RIE")
	api, emu := freePort(f.t), freePort(f.t)
	cmd := exec.Command(rie, "--runtime-interface-emulator-address", emu, "--runtime-api-address", api, bin)
	cmd.Env = append(os.Environ(),
		"AWS_LAMBDA_FUNCTION_TIMEOUT="+strconv.Itoa(timeout),
		"AWS_LAMBDA_FUNCTION_NAME=orders-"+filepath.Base(filepath.Dir(bin)),
		"AWS_REGION=us-east-1", "AWS_ACCESS_KEY_ID=local", "AWS_SECRET_ACCESS_KEY=local",
		"IDEMGUARD_DYNAMODB_ENDPOINT="+f.endpoint,
		"IDEMPOTENCY_TABLE="+f.table, "SHIPMENTS_TABLE="+f.shipments,
		"LOG_LEVEL=error")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		f.t.Fatal(err)
	}
	e := &emulator{url: "http://" + emu + "/2015-03-31/functions/function/invocations", cmd: cmd, out: &out}
	f.t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if f.t.Failed() {
			f.t.Logf("emulator output:\n%s", out.String())
		}
	})
	for deadline := time.Now().Add(10 * time.Second); ; {
		c, err := net.Dial("tcp", emu)
		if err == nil {
			c.Close()
			return e
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("the emulator did not listen on %s", emu)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func freePort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// invocation is what the emulator answered.
type invocation struct {
	Body      string
	ErrorType string // the function error's type, if it failed
	TimedOut  bool
}

// invoke posts event to the emulator's invocation API.
func (e *emulator) invoke(t *testing.T, event any) invocation {
	t.Helper()
	b, _ := json.Marshal(event)
	resp, err := http.Post(e.url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	inv := invocation{Body: string(body), TimedOut: strings.HasPrefix(string(body), "Task timed out")}
	var fe struct {
		Type string `json:"errorType"`
	}
	if json.Unmarshal(body, &fe) == nil {
		inv.ErrorType = fe.Type
	}
	return inv
}

type orderEvent struct {
	OrderID string `json:"order_id"`
	SleepMS int    `json:"sleep_ms"`
}

// A duplicate event replays the first answer; the order is charged once.
func TestEmulatorDuplicateReplays(t *testing.T) {
	f := newFixture(t)
	fn := f.start(bootstrap(t, "internal/orderfn"), 10)
	first := fn.invoke(t, orderEvent{OrderID: "o-1"})
	second := fn.invoke(t, orderEvent{OrderID: "o-1", SleepMS: 1})
	if first.ErrorType != "" || first.Body != `{"order_id":"o-1","charge":"ch_o-1"}` || second.Body != first.Body {
		t.Errorf("first %+v, second %+v; want the receipt twice", first, second)
	}
	if n := f.shipmentsOf("o-1"); n != 1 {
		t.Errorf("charged %d times, want once", n)
	}
}

// An invocation that times out after its side effect (a step) leaves a
// claim that lapses at its deadline; the retry takes it over, replays the
// step and answers: the order is charged once.
func TestEmulatorTimeoutAfterEffect(t *testing.T) {
	f := newFixture(t)
	const timeout = 3
	fn := f.start(bootstrap(t, "internal/orderfn"), timeout)
	dead := fn.invoke(t, orderEvent{OrderID: "o-2", SleepMS: 60_000})
	answered := time.Now() // the emulator answers once the deadline has passed
	if !dead.TimedOut {
		t.Fatalf("first invocation = %+v, want it timed out", dead)
	}
	if n := f.shipmentsOf("o-2"); n != 1 {
		t.Fatalf("charged %d times before the timeout, want once", n)
	}
	key, _, err := mustGuard(t).Key("orders-orderfn", json.RawMessage(`{"order_id":"o-2"}`), guard.WithKeyPath("order_id"))
	if err != nil {
		t.Fatal(err)
	}
	// The dead invocation's claim ends at its deadline, not a lease later:
	// the guard would have extended it to a second past the deadline (a
	// third of the lease in, for another lease) otherwise.
	rec := f.record(key)
	if rec.Status != "INPROGRESS" || rec.LeaseExpiresAt.After(answered) {
		t.Errorf("the dead invocation's claim: %+v; want in progress until at most its deadline, before %v", rec, answered)
	}
	var retry invocation
	for attempt := 0; ; attempt++ {
		retry = fn.invoke(t, orderEvent{OrderID: "o-2"})
		if retry.ErrorType != "IdempotencyAlreadyInProgressError" || attempt == 50 {
			break
		}
		time.Sleep(200 * time.Millisecond) // Lambda's retry comes later still
	}
	if retry.Body != `{"order_id":"o-2","charge":"ch_o-2"}` {
		t.Errorf("retry = %+v, want the receipt", retry)
	}
	if n := f.shipmentsOf("o-2"); n != 1 {
		t.Errorf("charged %d times, want once", n)
	}
}

// A retry that arrives in another execution environment while the first
// invocation still runs gets IdempotencyAlreadyInProgressError (the
// documented answer: the retry is retried later) and, once the first has
// answered, replays its answer.
func TestEmulatorConcurrentRetry(t *testing.T) {
	f := newFixture(t)
	bin := bootstrap(t, "internal/orderfn")
	one, two := f.start(bin, 30), f.start(bin, 30)
	var wg sync.WaitGroup
	var first invocation
	wg.Go(func() { first = one.invoke(t, orderEvent{OrderID: "o-3", SleepMS: 3000}) })
	for deadline := time.Now().Add(20 * time.Second); f.shipmentsOf("o-3") == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the first invocation never charged")
		}
		time.Sleep(20 * time.Millisecond)
	}
	busy := two.invoke(t, orderEvent{OrderID: "o-3"})
	wg.Wait()
	after := two.invoke(t, orderEvent{OrderID: "o-3"})
	if busy.ErrorType != "IdempotencyAlreadyInProgressError" {
		t.Errorf("the retry while the first runs = %+v, want IdempotencyAlreadyInProgressError", busy)
	}
	if first.Body != `{"order_id":"o-3","charge":"ch_o-3"}` || after.Body != first.Body {
		t.Errorf("first %+v, retry after it %+v; want the receipt replayed", first, after)
	}
	if n := f.shipmentsOf("o-3"); n != 1 {
		t.Errorf("charged %d times, want once", n)
	}
}

func sqsRecord(id, body string) events.SQSMessage {
	return events.SQSMessage{MessageId: id, Body: body, EventSource: "aws:sqs", EventSourceARN: "arn:aws:sqs:us-east-1:123456789012:orders"}
}

// An SQS batch with a duplicate of an order shipped before, a poisoned
// message and a failing one answers exactly the poisoned and the failing
// message; every order ships once.
func TestEmulatorSQSBatch(t *testing.T) {
	f := newFixture(t)
	fn := f.start(bootstrap(t, "sqs"), 10)
	first := fn.invoke(t, events.SQSEvent{Records: []events.SQSMessage{sqsRecord("m1", `{"order_id":"s-1"}`)}})
	if first.Body != `{"batchItemFailures":null}` {
		t.Fatalf("first batch = %+v", first)
	}
	got := fn.invoke(t, events.SQSEvent{Records: []events.SQSMessage{
		sqsRecord("m1-again", `{"order_id":"s-1"}`),                // the same order, sent again
		sqsRecord("m2", `{"order_id":`),                            // poisoned: not JSON
		sqsRecord("m3", `{"order_id":"s-3","warehouse":"closed"}`), // fails
		sqsRecord("m4", `{"order_id":"s-4"}`),
	}})
	var resp events.SQSEventResponse
	if err := json.Unmarshal([]byte(got.Body), &resp); err != nil {
		t.Fatalf("answer %+v: %v", got, err)
	}
	var ids []string
	for _, r := range resp.BatchItemFailures {
		ids = append(ids, r.ItemIdentifier)
	}
	if !slices.Equal(ids, []string{"m2", "m3"}) {
		t.Errorf("BatchItemFailures = %v, want [m2 m3]", ids)
	}
	for order, want := range map[string]int{"s-1": 1, "s-3": 0, "s-4": 1} {
		if n := f.shipmentsOf(order); n != want {
			t.Errorf("%s shipped %d times, want %d", order, n, want)
		}
	}
}

// An API Gateway request retried with its Idempotency-Key replays the
// stored response; the order is created once.
func TestEmulatorAPIGatewayRetry(t *testing.T) {
	f := newFixture(t)
	fn := f.start(bootstrap(t, "api"), 10)
	req := events.APIGatewayProxyRequest{
		Resource: "/orders", Path: "/orders", HTTPMethod: "POST",
		Headers: map[string]string{"Idempotency-Key": "7f3e2a", "Content-Type": "application/json"},
		Body:    `{"order_id":"a-1","amount":1200}`,
	}
	var resp [2]events.APIGatewayProxyResponse
	for i := range resp {
		inv := fn.invoke(t, req)
		if err := json.Unmarshal([]byte(inv.Body), &resp[i]); err != nil {
			t.Fatalf("answer %d %+v: %v", i+1, inv, err)
		}
	}
	if resp[0].StatusCode != 201 || resp[0].Headers["Idempotency-Key-Status"] != "executed" {
		t.Errorf("first = %+v, want 201 executed", resp[0])
	}
	if resp[1].StatusCode != 201 || resp[1].Body != resp[0].Body || resp[1].Headers["Location"] != "/orders/a-1" ||
		resp[1].Headers["Idempotency-Key-Status"] != "replayed" {
		t.Errorf("retry = %+v, want the first response replayed", resp[1])
	}
	if n := f.shipmentsOf("a-1"); n != 1 {
		t.Errorf("created %d times, want once", n)
	}
}

// mustGuard is a guard for computing keys as the functions derive them.
func mustGuard(t *testing.T) *guard.Guard {
	s, err := idemddb.New(dynamodb.New(dynamodb.Options{Region: "us-east-1"}), "keys-only")
	if err != nil {
		t.Fatal(err)
	}
	g, err := guard.New(s)
	if err != nil {
		t.Fatal(err)
	}
	return g
}
