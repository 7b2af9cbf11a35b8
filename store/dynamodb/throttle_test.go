package dynamodb_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
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

// faultProxy forwards requests to DynamoDB Local, except that it answers
// the next `fail` requests for operation op with an error response.
type faultProxy struct {
	op     string
	fail   atomic.Int32 // requests still to fail; < 0 fails them all
	status int
	code   string // the error's __type, e.g. ProvisionedThroughputExceededException
	seen   atomic.Int32
	failed atomic.Int32
	proxy  *httputil.ReverseProxy
}

func newFaultProxy(t *testing.T, op string, status int, code string, fail int32) (*faultProxy, string) {
	target, err := url.Parse(dynamodbtest.Endpoint(t))
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{op: op, status: status, code: code, proxy: httputil.NewSingleHostReverseProxy(target)}
	p.fail.Store(fail)
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	return p, srv.URL
}

func (p *faultProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasSuffix(r.Header.Get("X-Amz-Target"), "."+p.op) {
		p.seen.Add(1)
		if n := p.fail.Load(); n != 0 {
			p.fail.Add(-1)
			p.failed.Add(1)
			w.Header().Set("Content-Type", "application/x-amz-json-1.0")
			w.Header().Set("X-Amzn-Requestid", "fault-proxy")
			w.WriteHeader(p.status)
			fmt.Fprintf(w, `{"__type":"com.amazonaws.dynamodb.v20120810#%s","message":"injected by the test"}`, p.code)
			return
		}
	}
	p.proxy.ServeHTTP(w, r)
}

// proxiedStore returns a store on a fresh table whose client talks to
// DynamoDB Local through a fault proxy.
func proxiedStore(t *testing.T, endpoint string, opts ...idemddb.Option) *idemddb.Store {
	client := dynamodb.New(dynamodbtest.Options(endpoint))
	return dynamodbtest.NewStore(t, client, opts...)
}

func TestThrottlingRetried(t *testing.T) {
	p, ep := newFaultProxy(t, "PutItem", 400, "ProvisionedThroughputExceededException", 3)
	s := proxiedStore(t, ep) // the default retryer
	rec := &store.Record{Key: "scope#throttled", Status: store.StatusInProgress, Token: "t", ExpiresAt: time.Now().Add(time.Hour)}
	start := time.Now()
	if old, err := s.Acquire(t.Context(), rec, time.Now()); err != nil {
		t.Fatalf("Acquire through 3 throttled attempts = %v, %v; want success on the 4th", old, err)
	}
	if seen, failed := p.seen.Load(), p.failed.Load(); seen != 4 || failed != 3 {
		t.Errorf("proxy saw %d PutItem requests, failed %d; want 4 and 3", seen, failed)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("3 retries took %v; the default backoff should stay well under a second each", d)
	}
	if got, err := s.Get(t.Context(), rec.Key); err != nil || got.Token != "t" {
		t.Errorf("after the retried Acquire, Get = %+v, %v", got, err)
	}
}

func TestThrottlingPersistent(t *testing.T) {
	for _, c := range []struct {
		code  string
		check func(error) bool
	}{
		{"ProvisionedThroughputExceededException", func(err error) bool {
			var e *types.ProvisionedThroughputExceededException
			return errors.As(err, &e)
		}},
		{"ThrottlingException", func(err error) bool {
			var e *types.ThrottlingException
			return errors.As(err, &e)
		}},
		{"RequestLimitExceeded", func(err error) bool {
			var e *types.RequestLimitExceeded
			return errors.As(err, &e)
		}},
		// A write that meets a transaction in flight on its item.
		{"TransactionConflictException", func(err error) bool {
			var e *types.TransactionConflictException
			return errors.As(err, &e)
		}},
	} {
		t.Run(c.code, func(t *testing.T) {
			p, ep := newFaultProxy(t, "UpdateItem", 400, c.code, -1)
			s := proxiedStore(t, ep, idemddb.WithMaxAttempts(3))
			rec := &store.Record{Key: "scope#throttled", Status: store.StatusInProgress, Token: "t", ExpiresAt: time.Now().Add(time.Hour)}
			if _, err := s.Acquire(t.Context(), rec, time.Now()); err != nil {
				t.Fatal(err)
			}
			done := *rec
			done.Result = []byte(`1`)
			err := s.Complete(t.Context(), &done)
			if !errors.Is(err, store.ErrThrottled) {
				t.Errorf("Complete under persistent %s = %v; want ErrThrottled", c.code, err)
			}
			if !c.check(err) {
				t.Errorf("errors.As did not reach the SDK's %s type in %v", c.code, err)
			}
			var opErr *store.OpError
			if !errors.As(err, &opErr) || opErr.Op != "Complete" || opErr.Key != rec.Key || opErr.Resource != fmt.Sprintf("table %q", s.Table()) {
				t.Errorf("error %#v is not an *OpError for Complete %q on %q", err, rec.Key, s.Table())
			}
			if got := p.seen.Load(); got != 3 {
				t.Errorf("proxy saw %d UpdateItem attempts, want 3 (WithMaxAttempts(3))", got)
			}
			if errors.Is(err, store.ErrTokenMismatch) || errors.Is(err, store.ErrCorrupt) {
				t.Errorf("throttling matched another sentinel: %v", err)
			}
		})
	}
}

func TestNonThrottlingErrors(t *testing.T) {
	// A server error is retried but is not throttling.
	p, ep := newFaultProxy(t, "GetItem", 500, "InternalServerError", -1)
	s := proxiedStore(t, ep, idemddb.WithMaxAttempts(2))
	_, err := s.Get(t.Context(), "scope#k")
	if err == nil || errors.Is(err, store.ErrThrottled) || errors.Is(err, store.ErrNotFound) {
		t.Errorf("Get under 500s = %v; want an error that is not ErrThrottled", err)
	}
	var api smithy.APIError
	if !errors.As(err, &api) || api.ErrorCode() != "InternalServerError" {
		t.Errorf("errors.As(APIError) on %v failed", err)
	}
	if got := p.seen.Load(); got != 2 {
		t.Errorf("proxy saw %d attempts, want 2", got)
	}
}

func TestWithRetryer(t *testing.T) {
	// A caller's retryer replaces the default one.
	p, ep := newFaultProxy(t, "GetItem", 400, "ThrottlingException", -1)
	s := proxiedStore(t, ep, idemddb.WithRetryer(retry.NewStandard(func(o *retry.StandardOptions) {
		o.MaxAttempts = 5
		o.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return time.Millisecond, nil })
	})))
	if _, err := s.Get(t.Context(), "scope#k"); !errors.Is(err, store.ErrThrottled) {
		t.Errorf("Get = %v, want ErrThrottled", err)
	}
	if got := p.seen.Load(); got != 5 {
		t.Errorf("proxy saw %d attempts, want the retryer's 5", got)
	}

	// WithRetryer(nil) keeps the client's own: here, no retries.
	p2, ep2 := newFaultProxy(t, "GetItem", 400, "ThrottlingException", -1)
	o := dynamodbtest.Options(ep2)
	o.Retryer = aws.NopRetryer{}
	client := dynamodb.New(o)
	s2 := dynamodbtest.NewStore(t, client, idemddb.WithRetryer(nil))
	if _, err := s2.Get(t.Context(), "scope#k"); !errors.Is(err, store.ErrThrottled) {
		t.Errorf("Get = %v, want ErrThrottled", err)
	}
	if got := p2.seen.Load(); got != 1 {
		t.Errorf("proxy saw %d attempts, want 1 (the client's NopRetryer)", got)
	}
}
