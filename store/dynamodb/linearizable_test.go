package dynamodb_test

import (
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/idemguard/idemguard/internal/testing/dynamodbtest"
	"github.com/idemguard/idemguard/internal/testing/faultproxy"
	"github.com/idemguard/idemguard/internal/testing/linz"
	"github.com/idemguard/idemguard/store"
	idemddb "github.com/idemguard/idemguard/store/dynamodb"
	"github.com/idemguard/idemguard/store/storetest"
)

// DynamoDB keeps expiration in epoch seconds (rounded up) and
// in_progress_expiration in milliseconds.
var precision = linz.Precision{Expiry: time.Second, Lease: time.Millisecond}

// linzStore returns a store on a fresh table whose client reaches DynamoDB
// Local through a fault proxy (delays, 5xx, throttling, answers lost after
// the write, connections reset before and after), with the SDK's and the
// store's retries off: every attempt the store makes is an operation in the
// history, and the recorder repeats lost requests itself.
func linzStore(t *testing.T, faults faultproxy.Config) store.Store {
	t.Helper()
	direct := dynamodbtest.NewClient(t)
	table := dynamodbtest.NewTable(t, direct)
	p, err := faultproxy.NewDynamoDB(dynamodbtest.Endpoint(t), faults)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	client := dynamodb.New(dynamodbtest.Options(p.URL()), func(o *dynamodb.Options) { o.RetryMaxAttempts = 1 })
	s, err := idemddb.New(client, table, idemddb.WithMaxAttempts(1))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

var linzFaults = faultproxy.Config{Rate: 0.08, MaxLatency: 150 * time.Millisecond}

// Histories of concurrent claims on a few hot keys through the fault
// proxy are linearizable.
func TestLinearizable(t *testing.T) {
	storetest.RunLinearizable(t, linzStore(t, linzFaults), storetest.WithPrecision(precision.Expiry, precision.Lease), storetest.WithOps(1500))
}

// Each broken store is caught.
func TestLinearizableMutants(t *testing.T) {
	linz.RunMutants(t, func(t *testing.T) store.Store { return linzStore(t, linzFaults) }, precision, linz.HistoryConfig{Ops: 600})
}
