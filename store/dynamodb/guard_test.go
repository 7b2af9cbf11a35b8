package dynamodb_test

import (
	"bytes"
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/guard/guardtest"
	"github.com/idemguard/idemguard/internal/testing/dynamodbtest"
	"github.com/idemguard/idemguard/internal/testing/reqcount"
	"github.com/idemguard/idemguard/store"
)

// TestRequestFloor holds the guard to its round-trip floor (the README's
// DynamoDB costs) on DynamoDB Local, counting the HTTP requests its client
// sends, and to the operations it sends: a first call writes a claim
// (PutItem) and its completion (UpdateItem); a replay is the claim alone,
// whose failed condition returns the completed item.
func TestRequestFloor(t *testing.T) {
	var n *reqcount.Counter
	client := dynamodbtest.NewClient(t, func(o *dynamodb.Options) { n = dynamodbtest.CountRequests(o) })
	guardtest.RunRequestFloor(t, func(t *testing.T) store.Store { return dynamodbtest.NewStore(t, client) }, n, guardtest.Sent{
		FirstCall:     "2 round trips: PutItem=1 UpdateItem=1",
		Replay:        "1 round trip: PutItem=1",
		BatchFirstRun: "201 round trips: BatchGetItem=1 PutItem=100 UpdateItem=100",
		BatchReplay:   "1 round trip: BatchGetItem=1",
	})
}

func TestGuardOversizeResult(t *testing.T) {
	f := newFixture(t)
	g, err := guard.New(f.s)
	if err != nil {
		t.Fatal(err)
	}
	big := randomBytes(600 << 10)
	var runs atomic.Int32
	fn := func(context.Context) ([]byte, error) {
		runs.Add(1)
		return big, nil
	}
	input := map[string]string{"export": "all"}
	v, err := guard.Do(t.Context(), g, "export", input, fn)
	if err != nil || !bytes.Equal(v, big) {
		t.Fatalf("first call = %d bytes, %v; want its own 600 KB result", len(v), err)
	}
	// The oversize completion is refused before sending, so the first call
	// costs the claim and the body-less completion.
	if total := f.n.Total(); total != 2 {
		t.Errorf("first call sent %s; want PutItem=1 UpdateItem=1 (the refused write not sent)", f.n)
	}
	f.n.Reset()
	_, err = guard.Do(t.Context(), g, "export", input, fn)
	if !errors.Is(err, guard.ErrResultUnavailable) {
		t.Errorf("replay = %v, want ErrResultUnavailable", err)
	}
	if runs.Load() != 1 {
		t.Errorf("the function ran %d times; an unstorable result must not re-run it", runs.Load())
	}
	if total := f.n.Total(); total != 1 {
		t.Errorf("replay sent %s; want PutItem=1", f.n)
	}
}
