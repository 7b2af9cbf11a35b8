package dynamodb_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/idemguard/idemguard/internal/testing/dynamodbtest"
)

// txProxy forwards requests to DynamoDB Local and faults some of them:
// the answers of the next `lose` TransactWriteItems requests are lost
// after DynamoDB applied them (a 500 instead); the next `cancel`
// TransactWriteItems requests are cancelled without reaching DynamoDB,
// with a TransactionCanceledException whose every reason is `reason`; the
// next `conflict` requests of operation `conflictOp` are refused with
// TransactionConflictException; and the next `delay` TransactWriteItems
// requests are held for delayBy, then sent to DynamoDB whether or not the
// client still waits, and their answers sent on `late`. It records the
// ClientRequestToken of every TransactWriteItems request it sees.
type txProxy struct {
	lose       atomic.Int32
	cancel     atomic.Int32
	reason     string
	conflict   atomic.Int32
	conflictOp string
	delay      atomic.Int32
	delayBy    time.Duration
	late       chan int // the status of each delayed request's answer
	proxy      *httputil.ReverseProxy

	mu   sync.Mutex
	toks []string // protected by mu
}

func newTxProxy(t *testing.T) (*txProxy, string) {
	target, err := url.Parse(dynamodbtest.Endpoint(t))
	if err != nil {
		t.Fatal(err)
	}
	p := &txProxy{reason: "TransactionConflict", proxy: httputil.NewSingleHostReverseProxy(target), late: make(chan int, 8)}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	return p, srv.URL
}

func (p *txProxy) tokens() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.toks...)
}

func (p *txProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	op := strings.TrimPrefix(r.Header.Get("X-Amz-Target"), "DynamoDB_20120810.")
	if op == p.conflictOp && take(&p.conflict) {
		faultResponse(w, `{"__type":"com.amazonaws.dynamodb.v20120810#TransactionConflictException","message":"Transaction is ongoing for the item (injected)"}`)
		return
	}
	if op != "TransactWriteItems" {
		p.proxy.ServeHTTP(w, r)
		return
	}
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	var in struct {
		ClientRequestToken string
		TransactItems      []json.RawMessage
	}
	_ = json.Unmarshal(body, &in)
	p.mu.Lock()
	p.toks = append(p.toks, in.ClientRequestToken)
	p.mu.Unlock()
	switch {
	case take(&p.delay):
		time.Sleep(p.delayBy)
		rec := httptest.NewRecorder()
		p.proxy.ServeHTTP(rec, r.Clone(context.WithoutCancel(r.Context()))) // sent, though the client gave up
		p.late <- rec.Code
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	case take(&p.cancel):
		reasons := make([]string, len(in.TransactItems))
		codes := make([]string, len(in.TransactItems))
		for i := range reasons {
			reasons[i] = fmt.Sprintf(`{"Code":%q,"Message":"injected"}`, p.reason)
			codes[i] = p.reason
		}
		faultResponse(w, fmt.Sprintf(`{"__type":"com.amazonaws.dynamodb.v20120810#TransactionCanceledException","Message":"Transaction cancelled, please refer cancellation reasons for specific reasons [%s]","CancellationReasons":[%s]}`,
			strings.Join(codes, ", "), strings.Join(reasons, ",")))
	case take(&p.lose):
		rec := httptest.NewRecorder()
		p.proxy.ServeHTTP(rec, r) // applied; the answer is dropped
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprint(w, `{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":"answer lost (injected)"}`)
	default:
		p.proxy.ServeHTTP(w, r)
	}
}

func faultResponse(w http.ResponseWriter, body string) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.Header().Set("X-Amzn-Requestid", "tx-proxy")
	w.WriteHeader(http.StatusBadRequest)
	fmt.Fprint(w, body)
}

// dynamodbtestClient returns a client for DynamoDB Local through endpoint.
func dynamodbtestClient(endpoint string) *dynamodb.Client {
	return dynamodb.New(dynamodbtest.Options(endpoint))
}
