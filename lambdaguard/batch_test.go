package lambdaguard_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/lambdaguard"
	"github.com/idemguard/idemguard/store/memory"
)

// effects counts side effects by name.
type effects struct {
	mu sync.Mutex
	n  map[string]int
}

func (e *effects) add(name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.n == nil {
		e.n = map[string]int{}
	}
	e.n[name]++
}

func (e *effects) get(name string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n[name]
}

func sqsMessage(id, body string, attrs ...string) events.SQSMessage {
	m := events.SQSMessage{MessageId: id, Body: body, EventSourceARN: "arn:aws:sqs:eu-west-1:123456789012:orders", Attributes: map[string]string{}}
	for i := 0; i+1 < len(attrs); i += 2 {
		m.Attributes[attrs[i]] = attrs[i+1]
	}
	return m
}

func failures(resp events.SQSEventResponse) []string {
	var ids []string
	for _, f := range resp.BatchItemFailures {
		ids = append(ids, f.ItemIdentifier)
	}
	return ids
}

var errDown = errors.New("the warehouse is down")

// handle is a record handler: "fail" fails, anything else ships.
func handle(fx *effects) func(context.Context, events.SQSMessage) error {
	return func(ctx context.Context, m events.SQSMessage) error {
		if m.Body == `{"order_id":"fail"}` {
			return errDown
		}
		fx.add(m.MessageId)
		return nil
	}
}

// A standard queue's batch: a message completed in an earlier batch
// replays, a message the key path cannot read (poisoned) and one whose
// handler fails are reported, the rest runs once.
func TestSQSPartialFailures(t *testing.T) {
	fx := &effects{}
	g := newGuard(t, memory.New())
	h := lambdaguard.Must(lambdaguard.WrapSQS(g, handle(fx), lambdaguard.WithScope("fn"),
		lambdaguard.WithGuardOptions(guard.WithKeyPath("powertools_json(body).order_id"))))
	ctx := context.Background()
	if resp, err := h(ctx, events.SQSEvent{Records: []events.SQSMessage{sqsMessage("m1", `{"order_id":"1"}`)}}); err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("first batch = %v, %v", resp, err)
	}
	resp, err := h(ctx, events.SQSEvent{Records: []events.SQSMessage{
		sqsMessage("m1-again", `{"order_id":"1"}`), // the same order again: replays
		sqsMessage("m2", `not json`),               // poisoned: the key path fails on it
		sqsMessage("m3", `{"order_id":"fail"}`),
		sqsMessage("m4", `{"order_id":"4"}`),
	}})
	if err != nil {
		t.Fatal(err)
	}
	if got := failures(resp); !slices.Equal(got, []string{"m2", "m3"}) {
		t.Errorf("BatchItemFailures = %v, want [m2 m3]", got)
	}
	if fx.get("m1") != 1 || fx.get("m1-again") != 0 || fx.get("m4") != 1 {
		t.Errorf("effects %v; want m1 and m4 once, the duplicate replayed", fx.n)
	}
	// The failed message, redelivered once the warehouse is back, runs.
	resp, _ = h(ctx, events.SQSEvent{Records: []events.SQSMessage{sqsMessage("m3", `{"order_id":"3"}`)}})
	if len(resp.BatchItemFailures) != 0 || fx.get("m3") != 1 {
		t.Errorf("redelivery = %v, effects %v", resp, fx.n)
	}
}

// By default a message is keyed by its messageId.
func TestSQSKeyedByMessageID(t *testing.T) {
	fx := &effects{}
	g := newGuard(t, memory.New())
	h := lambdaguard.Must(lambdaguard.WrapSQS(g, handle(fx), lambdaguard.WithScope("fn")))
	for range 2 {
		resp, err := h(context.Background(), events.SQSEvent{Records: []events.SQSMessage{sqsMessage("m1", "a"), sqsMessage("m2", "a")}})
		if err != nil || len(resp.BatchItemFailures) != 0 {
			t.Fatal(resp, err)
		}
	}
	if fx.get("m1") != 1 || fx.get("m2") != 1 {
		t.Errorf("effects %v; want each message once", fx.n)
	}
}

// A message whose key another invocation holds is reported for
// redelivery, not run.
func TestSQSInProgressReported(t *testing.T) {
	g := newGuard(t, memory.New())
	started, release := make(chan struct{}), make(chan struct{})
	h := lambdaguard.Must(lambdaguard.WrapSQS(g, func(ctx context.Context, m events.SQSMessage) error {
		if m.Body == "slow" {
			close(started)
			<-release
		}
		return nil
	}, lambdaguard.WithScope("fn")))
	done := make(chan struct{})
	go func() {
		defer close(done)
		h(context.Background(), events.SQSEvent{Records: []events.SQSMessage{sqsMessage("m1", "slow")}})
	}()
	<-started
	resp, _ := h(context.Background(), events.SQSEvent{Records: []events.SQSMessage{sqsMessage("m1", "slow"), sqsMessage("m2", "x")}})
	close(release)
	<-done
	if got := failures(resp); !slices.Equal(got, []string{"m1"}) {
		t.Errorf("BatchItemFailures = %v, want [m1]: in progress elsewhere", got)
	}
}

// On a FIFO queue the first failure stops the batch: it and every message
// after it are reported, none of them run; with WithSkipGroupOnError only
// the failed message's group stops.
func TestSQSFIFO(t *testing.T) {
	batch := func() events.SQSEvent {
		return events.SQSEvent{Records: []events.SQSMessage{
			sqsMessage("a1", `{"order_id":"a1"}`, "MessageGroupId", "a"),
			sqsMessage("b1", `{"order_id":"b1"}`, "MessageGroupId", "b"),
			sqsMessage("a2", `{"order_id":"fail"}`, "MessageGroupId", "a"),
			sqsMessage("b2", `{"order_id":"b2"}`, "MessageGroupId", "b"),
			sqsMessage("a3", `{"order_id":"a3"}`, "MessageGroupId", "a"),
			sqsMessage("b3", `not json`, "MessageGroupId", "b"),
			sqsMessage("b4", `{"order_id":"b4"}`, "MessageGroupId", "b"),
		}}
	}
	for _, c := range []struct {
		name   string
		opts   []lambdaguard.Option
		failed []string
		ran    []string
	}{
		{"stop the batch", nil, []string{"a2", "b2", "a3", "b3", "b4"}, []string{"a1", "b1"}},
		{"skip the group", []lambdaguard.Option{lambdaguard.WithSkipGroupOnError()}, []string{"a2", "a3", "b3", "b4"}, []string{"a1", "b1", "b2"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			fx := &effects{}
			g := newGuard(t, memory.New())
			opts := append([]lambdaguard.Option{lambdaguard.WithScope("fn"), lambdaguard.WithGuardOptions(guard.WithKeyPath("powertools_json(body).order_id"))}, c.opts...)
			h := lambdaguard.Must(lambdaguard.WrapSQS(g, handle(fx), opts...))
			resp, err := h(context.Background(), batch())
			if err != nil {
				t.Fatal(err)
			}
			if got := failures(resp); !slices.Equal(got, c.failed) {
				t.Errorf("BatchItemFailures = %v, want %v", got, c.failed)
			}
			for _, id := range []string{"a1", "b1", "a2", "b2", "a3", "b3", "b4"} {
				if want := btoi(slices.Contains(c.ran, id)); fx.get(id) != want {
					t.Errorf("%s ran %d times, want %d", id, fx.get(id), want)
				}
			}
		})
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// A stream's batch runs in order and stops at the first failure: it and
// the records after it are reported by sequence number; a retry of the
// batch from there replays nothing twice.
func TestStreams(t *testing.T) {
	fx := &effects{}
	g := newGuard(t, memory.New())
	fail := map[string]bool{"3": true}
	kin := lambdaguard.Must(lambdaguard.WrapKinesis(g, func(ctx context.Context, r events.KinesisEventRecord) error {
		if fail[r.Kinesis.SequenceNumber] {
			return errDown
		}
		fx.add("kinesis/" + r.Kinesis.SequenceNumber)
		return nil
	}, lambdaguard.WithScope("fn")))
	ddb := lambdaguard.Must(lambdaguard.WrapDynamoDBStream(g, func(ctx context.Context, r events.DynamoDBEventRecord) error {
		if fail[r.Change.SequenceNumber] {
			return errDown
		}
		fx.add("ddb/" + r.EventID)
		return nil
	}, lambdaguard.WithScope("fn-ddb")))
	var ke events.KinesisEvent
	var de events.DynamoDBEvent
	for i := 1; i <= 5; i++ {
		seq := fmt.Sprint(i)
		ke.Records = append(ke.Records, events.KinesisEventRecord{EventID: "shardId-0:" + seq, Kinesis: events.KinesisRecord{SequenceNumber: seq}})
		de.Records = append(de.Records, events.DynamoDBEventRecord{EventID: "e" + seq, Change: events.DynamoDBStreamRecord{SequenceNumber: seq}})
	}
	kr, _ := kin(context.Background(), ke)
	dr, _ := ddb(context.Background(), de)
	var got []string
	for _, f := range kr.BatchItemFailures {
		got = append(got, f.ItemIdentifier)
	}
	for _, f := range dr.BatchItemFailures {
		got = append(got, f.ItemIdentifier)
	}
	if want := []string{"3", "4", "5", "3", "4", "5"}; !slices.Equal(got, want) {
		t.Errorf("failures %v, want %v", got, want)
	}
	delete(fail, "3")
	kr, _ = kin(context.Background(), ke)
	dr, _ = ddb(context.Background(), de)
	if len(kr.BatchItemFailures)+len(dr.BatchItemFailures) != 0 {
		t.Errorf("retry failures %v %v", kr, dr)
	}
	for i := 1; i <= 5; i++ {
		if fx.get(fmt.Sprint("kinesis/", i)) != 1 || fx.get(fmt.Sprint("ddb/e", i)) != 1 {
			t.Errorf("record %d: effects %v, want once each", i, fx.n)
		}
	}
}

// With IDEMGUARD_DISABLED every record runs, and guard.Step in the record
// handler runs its function unguarded.
func TestSQSDisabledKeepsSteps(t *testing.T) {
	t.Setenv(adapt.DisableEnv, "true")
	fx := &effects{}
	g := newGuard(t, memory.New())
	h := lambdaguard.Must(lambdaguard.WrapSQS(g, func(ctx context.Context, m events.SQSMessage) error {
		_, err := guard.Step(ctx, "ship", func(context.Context) (int, error) { fx.add(m.MessageId); return 0, nil })
		return err
	}, lambdaguard.WithScope("fn")))
	for _, fifo := range []string{"", "g"} {
		resp, err := h(context.Background(), events.SQSEvent{Records: []events.SQSMessage{sqsMessage("m"+fifo, "x", "MessageGroupId", fifo)}})
		if err != nil || len(resp.BatchItemFailures) != 0 {
			t.Errorf("fifo %q: %v, %v", fifo, resp, err)
		}
	}
	if fx.get("m") != 1 || fx.get("mg") != 1 {
		t.Errorf("effects %v", fx.n)
	}
}
