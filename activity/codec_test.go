package activity_test

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	commonpb "go.temporal.io/api/common/v1"
	historypb "go.temporal.io/api/history/v1"
	tactivity "go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/worker"
	"google.golang.org/protobuf/proto"

	"github.com/idemguard/idemguard/activity"
	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/testing/dynamodbtest"
	"github.com/idemguard/idemguard/internal/testing/reqcount"
	"github.com/idemguard/idemguard/internal/testing/temporaltest"
	idemddb "github.com/idemguard/idemguard/store/dynamodb"
)

// Acceptance 8: with a payload codec in the data converter, the result
// stored in DynamoDB's data attribute is codec-encoded, and a replay to
// another workflow decodes it. The control run without the codec finds the
// plaintext, which shows the check can fail.
func TestPayloadCodecAppliesToStoredResults(t *testing.T) {
	var requests *reqcount.Counter
	ddb := dynamodbtest.NewClient(t, func(o *dynamodb.Options) { requests = dynamodbtest.CountRequests(o) })
	const marker = "plaintext-marker-7f3a9c"
	codecDC := temporaltest.XORDataConverter()
	for _, tc := range []struct {
		name        string
		dc          converter.DataConverter
		interceptor bool
	}{
		{"Guard", codecDC, false},
		{"Interceptor", codecDC, true},
		{"control without codec", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := temporaltest.Client(t, client.Options{DataConverter: tc.dc})
			table := dynamodbtest.NewTable(t, ddb)
			s, err := idemddb.New(ddb, table)
			if err != nil {
				t.Fatal(err)
			}
			g, err := guard.New(s)
			if err != nil {
				t.Fatal(err)
			}
			var effects ledger
			var mu sync.Mutex
			var key string // protected by mu
			charge := func(ctx context.Context, o Order) (Receipt, error) {
				effects.add(o.OrderID)
				mu.Lock()
				key, _ = guard.KeyFromContext(ctx)
				mu.Unlock()
				return newReceipt(ctx, o), nil
			}
			opts := []activity.Option{activity.WithDataConverter(tc.dc), activity.WithGuardOptions(guard.WithKeyPath("order_id"))}
			var wopts worker.Options
			tq := temporaltest.Name(t, "tq")
			if tc.interceptor {
				wopts.Interceptors = []interceptor.WorkerInterceptor{activity.Must(activity.Interceptor(g, activity.Policy{Activity: "Charge", Options: opts}))}
			}
			temporaltest.Worker(t, c, tq, wopts, func(r worker.Registry) {
				r.RegisterWorkflow(chargeWorkflow)
				if tc.interceptor {
					r.RegisterActivityWithOptions(charge, tactivity.RegisterOptions{Name: "Charge"})
				} else {
					r.RegisterActivityWithOptions(activity.Must(activity.Wrap(g, charge, opts...)), tactivity.RegisterOptions{Name: "Charge"})
				}
			})

			var first, second Receipt
			requests.Reset()
			if err := temporaltest.Run(t, c, tq, temporaltest.Name(t, "wf"), time.Minute, &first, chargeWorkflow,
				chargeParams{Order: Order{OrderID: "o-8", Amount: 8, Note: marker}}); err != nil {
				t.Fatalf("first workflow: %v", err)
			}
			if first.Note != marker {
				t.Fatalf("first result %+v lacks the marker", first)
			}
			if n := requests.Total(); n != 2 {
				t.Errorf("first execution sent %d DynamoDB requests (%v), want 2: claim, complete", n, requests)
			}

			mu.Lock()
			k := key
			mu.Unlock()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			item, err := ddb.GetItem(ctx, &dynamodb.GetItemInput{
				TableName:      aws.String(table),
				Key:            map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: k}},
				ConsistentRead: aws.Bool(true),
			})
			if err != nil {
				t.Fatal(err)
			}
			var raw []byte
			switch v := item.Item["data"].(type) {
			case *types.AttributeValueMemberB:
				raw = v.Value
			case *types.AttributeValueMemberS:
				raw = []byte(v.Value)
			default:
				t.Fatalf("data attribute of the record is %T", v)
			}
			plaintext := bytes.Contains(raw, []byte(marker))
			if plaintext != (tc.dc == nil) {
				t.Errorf("stored data holds the plaintext: %v, want %v (codec in use: %v)", plaintext, tc.dc == nil, tc.dc != nil)
			}

			rec, err := s.Get(ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			var p commonpb.Payloads
			if err := proto.Unmarshal(rec.Result, &p); err != nil || len(p.Payloads) != 1 {
				t.Fatalf("stored data is not one Temporal payload: %v", err)
			}
			if enc := string(p.Payloads[0].Metadata[converter.MetadataEncoding]); (enc == temporaltest.XOREncoding) != (tc.dc != nil) {
				t.Errorf("stored payload encoding %q", enc)
			}
			var stored Receipt
			if err := (activity.PayloadCodec{DataConverter: tc.dc}).Unmarshal(rec.Result, &stored); err != nil || stored != first {
				t.Errorf("stored result decodes to %+v (%v), want %+v", stored, err, first)
			}

			// Another workflow with the same key replays the stored result,
			// which the workflow decodes with the codec, in one request.
			requests.Reset()
			if err := temporaltest.Run(t, c, tq, temporaltest.Name(t, "wf"), time.Minute, &second, chargeWorkflow,
				chargeParams{Order: Order{OrderID: "o-8", Amount: 8, Note: "a duplicate"}}); err != nil {
				t.Fatalf("second workflow: %v", err)
			}
			if second != first || effects.count("o-8") != 1 {
				t.Errorf("replay: %+v after %d side effects, want %+v after 1", second, effects.count("o-8"), first)
			}
			if n := requests.Total(); n != 1 {
				t.Errorf("replay sent %d DynamoDB requests (%v), want 1: the failed claim returns the record", n, requests)
			}
			t.Logf("DynamoDB requests: replay %v", requests)
		})
	}
}

// completedPayloads returns the result payloads of every completed
// activity in h.
func completedPayloads(h *historypb.History) []*commonpb.Payload {
	var out []*commonpb.Payload
	for _, e := range h.Events {
		if a := e.GetActivityTaskCompletedEventAttributes(); a != nil {
			out = append(out, a.GetResult().GetPayloads()...)
		}
	}
	return out
}

// The client's payload codec applies to what a guarded activity sends to
// the history, whether it ran or replayed, as it applies to the same
// activity unguarded, although the interceptor was given no data
// converter.
func TestInterceptorKeepsClientCodecInHistory(t *testing.T) {
	c := temporaltest.Client(t, client.Options{DataConverter: temporaltest.XORDataConverter()})
	g := newGuard(t)
	var effects ledger
	charge := func(ctx context.Context, o Order) (Receipt, error) {
		effects.add(o.OrderID)
		return newReceipt(ctx, o), nil
	}
	tq := temporaltest.Name(t, "tq")
	temporaltest.Worker(t, c, tq, worker.Options{Interceptors: []interceptor.WorkerInterceptor{
		activity.Must(activity.Interceptor(g, activity.Policy{Activity: "Charge", Options: []activity.Option{activity.WithGuardOptions(guard.WithKeyPath("order_id"))}})),
	}}, func(r worker.Registry) {
		r.RegisterWorkflow(chargeWorkflow)
		r.RegisterActivityWithOptions(charge, tactivity.RegisterOptions{Name: "Charge"})
		r.RegisterActivityWithOptions(charge, tactivity.RegisterOptions{Name: "Unguarded"})
	})
	var results [3]Receipt
	for i, p := range []chargeParams{
		{Order: Order{OrderID: "o-codec", Amount: 3}},                        // runs
		{Order: Order{OrderID: "o-codec", Amount: 3, Note: "duplicate"}},     // replays
		{Order: Order{OrderID: "o-plain", Amount: 3}, Activity: "Unguarded"}, // the control
	} {
		id := temporaltest.Name(t, "wf")
		if err := temporaltest.Run(t, c, tq, id, time.Minute, &results[i], chargeWorkflow, p); err != nil {
			t.Fatalf("workflow %d: %v", i, err)
		}
		ps := completedPayloads(temporaltest.History(t, c, id, ""))
		if len(ps) != 1 {
			t.Fatalf("workflow %d: %d result payloads in the history, want 1", i, len(ps))
		}
		if enc := string(ps[0].GetMetadata()[converter.MetadataEncoding]); enc != temporaltest.XOREncoding {
			t.Errorf("workflow %d (%s): the history's result payload has encoding %q, want the client codec's %q",
				i, []string{"ran", "replayed", "unguarded"}[i], enc, temporaltest.XOREncoding)
		}
	}
	if results[0] != results[1] || effects.count("o-codec") != 1 {
		t.Errorf("the duplicate got %+v after %d charges, want the first result %+v after 1", results[1], effects.count("o-codec"), results[0])
	}
}
