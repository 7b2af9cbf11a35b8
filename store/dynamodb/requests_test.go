package dynamodb_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/internal/testing/dynamodbtest"
	"github.com/idemguard/idemguard/internal/testing/reqcount"
	"github.com/idemguard/idemguard/store"
	idemddb "github.com/idemguard/idemguard/store/dynamodb"
)

// TestRequestCounts checks the round trips of each store call, as the HTTP
// requests the client sends.
func TestRequestCounts(t *testing.T) {
	f := newFixture(t)
	step := func(what string, want map[string]int, call func() error) {
		t.Helper()
		f.n.Reset()
		if err := call(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		got := f.n.Snapshot()
		for op, w := range want {
			if got[op] != w {
				t.Errorf("%s sent %s; want %s=%d", what, f.n, op, w)
			}
		}
		if total, w := f.n.Total(), sum(want); total != w {
			t.Errorf("%s sent %s; want %d requests in all", what, f.n, w)
		}
	}
	rec := f.claim("scope#counts")
	step("Acquire new", map[string]int{"PutItem": 1}, func() error {
		_, err := f.s.Acquire(f.ctx, rec, f.t0)
		return err
	})
	step("Acquire conflict (in progress)", map[string]int{"PutItem": 1, "GetItem": 0}, func() error {
		old, err := f.s.Acquire(f.ctx, f.claim(rec.Key), f.t0)
		if !errors.Is(err, store.ErrConflict) || old == nil || old.Token != rec.Token {
			return errors.New("no conflict with the holder's record")
		}
		return nil
	})
	step("Extend", map[string]int{"UpdateItem": 1}, func() error {
		return f.s.Extend(f.ctx, rec.Key, rec.Token, f.t0.Add(2*time.Minute), f.t0.Add(time.Hour))
	})
	step("Complete", map[string]int{"UpdateItem": 1}, func() error {
		done := *rec
		done.Result = []byte(`"ok"`)
		return f.s.Complete(f.ctx, &done)
	})
	step("Acquire conflict (completed)", map[string]int{"PutItem": 1, "GetItem": 0}, func() error {
		old, err := f.s.Acquire(f.ctx, f.claim(rec.Key), f.t0)
		if !errors.Is(err, store.ErrConflict) || old == nil || string(old.Result) != `"ok"` {
			return errors.New("no conflict with the completed record")
		}
		return nil
	})
	step("Get", map[string]int{"GetItem": 1}, func() error {
		_, err := f.s.Get(f.ctx, rec.Key)
		return err
	})
	held := f.claim("scope#counts-release") // Release deletes a claim in progress only
	if _, err := f.s.Acquire(f.ctx, held, f.t0); err != nil {
		t.Fatal(err)
	}
	step("Release", map[string]int{"DeleteItem": 1}, func() error {
		return f.s.Release(f.ctx, held.Key, held.Token)
	})
}

func sum(m map[string]int) int {
	t := 0
	for _, n := range m {
		t += n
	}
	return t
}

// noOldItem wraps the client and drops the item DynamoDB returns with a
// failed PutItem condition, as an SDK or server without ALL_OLD support
// would. If beforeReturn is set, it runs before the error is returned.
type noOldItem struct {
	*dynamodb.Client
	beforeReturn func()
	dropped      atomic.Int32
}

func (c *noOldItem) PutItem(ctx context.Context, in *dynamodb.PutItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	out, err := c.Client.PutItem(ctx, in, optFns...)
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		if len(ccf.Item) > 0 {
			c.dropped.Add(1)
		}
		ccf.Item = nil
		if c.beforeReturn != nil {
			c.beforeReturn()
		}
	}
	return out, err
}

func TestAcquireWithoutOldItemReadsIt(t *testing.T) {
	f := newFixture(t)
	api := &noOldItem{Client: f.client}
	s, err := idemddb.New(api, f.table)
	if err != nil {
		t.Fatal(err)
	}
	holder := f.claim("scope#fallback")
	f.mustAcquire(t, holder)

	f.n.Reset()
	old, err := s.Acquire(f.ctx, f.claim(holder.Key), f.t0)
	if !errors.Is(err, store.ErrConflict) || old == nil || old.Token != holder.Token {
		t.Fatalf("Acquire = %+v, %v; want the holder's record and ErrConflict", old, err)
	}
	if api.dropped.Load() != 1 {
		t.Fatalf("the wrapper dropped %d old items; the test did not exercise the fallback", api.dropped.Load())
	}
	if got := f.n.Get("GetItem"); got != 1 || f.n.Get("PutItem") != 1 {
		t.Errorf("sent %s; want PutItem=1 GetItem=1", f.n)
	}

	// The record vanishes between the failed PutItem and the read: the
	// conflict carries no record, and the caller tries again.
	api.beforeReturn = func() {
		if err := f.s.Release(f.ctx, holder.Key, holder.Token); err != nil {
			t.Errorf("Release: %v", err)
		}
	}
	old, err = s.Acquire(f.ctx, f.claim(holder.Key), f.t0)
	if !errors.Is(err, store.ErrConflict) || old != nil {
		t.Errorf("Acquire when the record vanished = %+v, %v; want nil, ErrConflict", old, err)
	}
	api.beforeReturn = nil
	if old, err := s.Acquire(f.ctx, f.claim(holder.Key), f.t0); err != nil {
		t.Errorf("retry after the vanished record = %+v, %v; want success", old, err)
	}
}

// TestAcquireRetryAfterLostResponse: the first PutItem is written, but its
// response is lost, so the SDK retries it. The retry fails its condition on
// the caller's own record, which Acquire returns, as stored, so that the
// caller recognises it by the token; a guarded call through such a client
// runs once.
func TestAcquireRetryAfterLostResponse(t *testing.T) {
	var lost atomic.Int32
	var n *reqcount.Counter
	client := dynamodbtest.NewClient(t, func(o *dynamodb.Options) {
		n = dynamodbtest.CountRequests(o)
		o.APIOptions = append(o.APIOptions, func(stack *middleware.Stack) error {
			return stack.Finalize.Add(middleware.FinalizeMiddlewareFunc("loseFirstPutResponse",
				func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
					out, md, err := next.HandleFinalize(ctx, in)
					if err == nil && awsmiddleware.GetOperationName(ctx) == "PutItem" && lost.Add(1) == 1 {
						return out, md, retryableErr{errors.New("connection reset after the request was sent")}
					}
					return out, md, err
				}), middleware.After)
		})
	})
	s := dynamodbtest.NewStore(t, client)
	t0 := time.Now().Add(time.Hour)
	rec := &store.Record{Key: "scope#lost-response", Status: store.StatusInProgress, Token: "mine", ExpiresAt: t0.Add(time.Hour), LeaseExpiresAt: t0.Add(time.Minute)}
	n.Reset()
	old, err := s.Acquire(t.Context(), rec, t0)
	if !errors.Is(err, store.ErrConflict) || old == nil || old.Token != rec.Token || old.LeaseExpiresAt.Sub(rec.LeaseExpiresAt).Abs() >= time.Millisecond {
		t.Fatalf("Acquire = %+v, %v; want ErrConflict with our own record as stored", old, err)
	}
	if got := n.Get("PutItem"); got != 2 {
		t.Errorf("sent %s; want 2 PutItem attempts (the first one's response lost)", n)
	}
	// Someone else's claim still conflicts.
	other := *rec
	other.Token = "theirs"
	if _, err := s.Acquire(t.Context(), &other, t0); !errors.Is(err, store.ErrConflict) {
		t.Errorf("another claim = %v, want ErrConflict", err)
	}
	// Through the guard: the first claim's answer is lost again, and the
	// call still runs once and completes.
	lost.Store(0)
	g, err := guard.New(s)
	if err != nil {
		t.Fatal(err)
	}
	runs := 0
	v, out, err := adapt.Execute(t.Context(), g, "scope", "lost-again", func(context.Context) (int, error) { runs++; return 7, nil })
	if err != nil || v != 7 || out != guard.OutcomeExecuted || runs != 1 {
		t.Errorf("guarded call = %d, %v, %v after %d runs; want 7, executed, once", v, out, err, runs)
	}
}

type retryableErr struct{ error }

func (retryableErr) RetryableError() bool { return true }

func TestNewValidatesOptions(t *testing.T) {
	client := dynamodb.New(dynamodb.Options{Region: "us-east-1"})
	for _, c := range []struct {
		name  string
		table string
		opts  []idemddb.Option
	}{
		{"empty table", "", nil},
		{"duplicate attribute", "t", []idemddb.Option{idemddb.WithAttributes(idemddb.Attributes{Token: "status"})}},
		{"bracket", "t", []idemddb.Option{idemddb.WithAttributes(idemddb.Attributes{Status: "s[0]"})}},
		{"sort key equals partition key", "t", []idemddb.Option{idemddb.WithSortKey("id", "p")}},
		{"empty sort key", "t", []idemddb.Option{idemddb.WithSortKey("", "p")}},
		{"empty partition value", "t", []idemddb.Option{idemddb.WithSortKey("sk", "")}},
		{"zero attempts", "t", []idemddb.Option{idemddb.WithMaxAttempts(0)}},
		{"attempts and retryer", "t", []idemddb.Option{idemddb.WithMaxAttempts(3), idemddb.WithRetryer(aws.NopRetryer{})}},
	} {
		if s, err := idemddb.New(client, c.table, c.opts...); err == nil {
			t.Errorf("%s: New = %v, nil; want an error", c.name, s)
		}
	}
	if _, err := idemddb.New(nil, "t"); err == nil {
		t.Errorf("New(nil client) succeeded")
	}
	if _, err := idemddb.New(client, "t", idemddb.WithSortKey("sk", "p"), idemddb.WithAttributes(idemddb.Attributes{Key: "pk"}), idemddb.WithMaxAttempts(1)); err != nil {
		t.Errorf("valid options: %v", err)
	}
}
