package faultproxy

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/idemguard/idemguard/internal/testing/dynamodbtest"
	"github.com/idemguard/idemguard/store"
	idemddb "github.com/idemguard/idemguard/store/dynamodb"
)

// fakeDynamo answers every request with an empty successful DynamoDB
// response and counts the requests that reached it.
func fakeDynamo(t *testing.T) (string, *atomic.Int64) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		n.Add(1)
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		io.WriteString(w, "{}")
	}))
	t.Cleanup(srv.Close)
	return srv.URL, &n
}

type noBackoff struct{}

func (noBackoff) BackoffDelay(int, error) (time.Duration, error) { return 0, nil }

// client returns an SDK client for the proxy that tries each request up to
// attempts times.
func sdkClient(p *DynamoDB, attempts int) *dynamodb.Client {
	o := dynamodbtest.Options(p.URL())
	o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) {
		so.MaxAttempts = attempts
		so.Backoff = noBackoff{}
	})
	return dynamodb.New(o)
}

func newProxy(t *testing.T, target string, cfg Config) *DynamoDB {
	t.Helper()
	p, err := NewDynamoDB(target, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func putItem(ctx context.Context, c *dynamodb.Client) error {
	_, err := c.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String("t"),
		Item:      map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "k"}},
	})
	return err
}

// Each fault, as the SDK sees it: whether it retries, and whether the
// request reached DynamoDB.
func TestProxyFaults(t *testing.T) {
	for _, tc := range []struct {
		fault   Fault
		reached int64 // requests DynamoDB got for one call that succeeds on its second attempt
	}{
		{Error5xx, 1},
		{LostResponse, 2},
		{Reset, 1},
		{ResetAfter, 2},
		{Throttle, 1},
		{Latency, 1},
	} {
		t.Run(string(tc.fault), func(t *testing.T) {
			target, reached := fakeDynamo(t)
			p := newProxy(t, target, Config{Script: []Fault{tc.fault}, MaxLatency: 50 * time.Millisecond})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			start := time.Now()
			if err := putItem(ctx, sdkClient(p, 2)); err != nil {
				t.Fatalf("PutItem with one %s and a retry: %v", tc.fault, err)
			}
			wantRequests := int64(2)
			if tc.fault == Latency {
				wantRequests = 1 // delayed, not failed
				if d := time.Since(start); d < 5*time.Millisecond {
					t.Errorf("latency fault took %s, want at least 5ms", d)
				}
			}
			if got := p.Requests(); got != wantRequests {
				t.Errorf("proxy got %d requests, want %d", got, wantRequests)
			}
			if got := reached.Load(); got != tc.reached {
				t.Errorf("DynamoDB got %d requests, want %d", got, tc.reached)
			}
			if got := p.Counts()[tc.fault]; got != 1 {
				t.Errorf("counted %d %s faults, want 1", got, tc.fault)
			}
		})
	}
}

// Injected throttling is DynamoDB's: the SDK decodes the exception type
// and the store reports it as store.ErrThrottled.
func TestProxyThrottleIsDynamoDBs(t *testing.T) {
	target, reached := fakeDynamo(t)
	p := newProxy(t, target, Config{Script: []Fault{Throttle, Throttle, Error5xx}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := sdkClient(p, 1)

	err := putItem(ctx, c)
	var pte *types.ProvisionedThroughputExceededException
	if !errors.As(err, &pte) {
		t.Fatalf("PutItem error %v (%T), want *types.ProvisionedThroughputExceededException", err, err)
	}
	if !strings.Contains(pte.ErrorMessage(), "provisioned throughput") {
		t.Errorf("message %q", pte.ErrorMessage())
	}

	s, err := idemddb.New(c, "t", idemddb.WithMaxAttempts(1))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	rec := &store.Record{Key: "s#k", Status: store.StatusInProgress, Token: "tok", ExpiresAt: now.Add(time.Hour), LeaseExpiresAt: now.Add(time.Minute)}
	if _, err := s.Acquire(ctx, rec, now); !errors.Is(err, store.ErrThrottled) {
		t.Errorf("store Acquire: %v, want store.ErrThrottled", err)
	}

	err = putItem(ctx, c)
	var api smithy.APIError
	if !errors.As(err, &api) || api.ErrorCode() != "InternalServerError" && api.ErrorCode() != "ServiceUnavailable" {
		t.Errorf("5xx fault: %v, want InternalServerError or ServiceUnavailable", err)
	}
	if n := reached.Load(); n != 0 {
		t.Errorf("DynamoDB got %d requests, want none", n)
	}
}

// The rate holds roughly, and only configured kinds are drawn.
func TestProxyRate(t *testing.T) {
	target, reached := fakeDynamo(t)
	p := newProxy(t, target, Config{Rate: 0.05, Seed: 1, Weights: map[Fault]float64{Error5xx: 1, Throttle: 1}})
	const n = 1000
	hc := &http.Client{}
	for range n {
		resp, err := hc.Post(p.URL(), "application/x-amz-json-1.0", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	c := p.Counts()
	if tot := c.Total(); tot < 20 || tot > 90 {
		t.Errorf("%d faults in %d requests at 5%%, want about 50", tot, n)
	}
	if c[Error5xx] == 0 || c[Throttle] == 0 || len(c) != 2 {
		t.Errorf("fault kinds drawn: %s, want error_5xx and throttle only", c)
	}
	if got := reached.Load() + c.Total(); got != n {
		t.Errorf("reached %d + faults %d != %d requests", reached.Load(), c.Total(), n)
	}
}

func TestProxyLoopbackOnly(t *testing.T) {
	for _, target := range []string{"http://10.0.0.1:8000", "http://example.com:8000", "https://127.0.0.1:8000"} {
		if _, err := NewDynamoDB(target, Config{}); err == nil {
			t.Errorf("NewDynamoDB(%s) accepted a target that is not http on loopback", target)
		}
	}
}
