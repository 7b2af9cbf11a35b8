package lambdaguard_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-lambda-go/lambda/messages"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/httpguard"
	"github.com/idemguard/idemguard/lambdaguard"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/memory"
)

type order struct {
	OrderID string `json:"order_id"`
	Amount  int    `json:"amount"`
}

type receipt struct {
	Charge string `json:"charge"`
}

func newGuard(t *testing.T, s store.Store, opts ...guard.Option) *guard.Guard {
	t.Helper()
	g, err := guard.New(s, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func invoke(t *testing.T, ctx context.Context, h interface {
	Invoke(context.Context, []byte) ([]byte, error)
}, event string) (string, error) {
	t.Helper()
	out, err := h.Invoke(ctx, []byte(event))
	return string(out), err
}

// Every signature lambda.Start accepts is guarded: a duplicate event
// replays the first answer, byte for byte, without running the handler.
func TestWrapSignatures(t *testing.T) {
	var runs atomic.Int64
	ran := func() { runs.Add(1) }
	for _, c := range []struct {
		name    string
		handler any
		want    string
	}{
		{"func()", func() { ran() }, "null"},
		{"func() error", func() error { ran(); return nil }, "null"},
		{"func() (Out, error)", func() (receipt, error) { ran(); return receipt{"ch_1"}, nil }, `{"charge":"ch_1"}`},
		{"func(In)", func(order) { ran() }, "null"},
		{"func(In) error", func(order) error { ran(); return nil }, "null"},
		{"func(In) (Out, error)", func(o order) (receipt, error) { ran(); return receipt{"ch_" + o.OrderID}, nil }, `{"charge":"ch_7"}`},
		{"func(ctx)", func(context.Context) { ran() }, "null"},
		{"func(ctx) error", func(context.Context) error { ran(); return nil }, "null"},
		{"func(ctx) (Out, error)", func(context.Context) (string, error) { ran(); return "ok", nil }, `"ok"`},
		{"func(ctx, In)", func(context.Context, order) { ran() }, "null"},
		{"func(ctx, In) error", func(context.Context, order) error { ran(); return nil }, "null"},
		{"func(ctx, In) (Out, error)", func(_ context.Context, o order) (receipt, error) { ran(); return receipt{"ch_" + o.OrderID}, nil }, `{"charge":"ch_7"}`},
		{"func(any) (Out, error)", func(e any) (any, error) { ran(); return e.(map[string]any)["amount"], nil }, `100`},
	} {
		t.Run(c.name, func(t *testing.T) {
			runs.Store(0)
			g := newGuard(t, memory.New())
			h, err := lambdaguard.Wrap(g, c.handler, lambdaguard.WithScope("fn"), lambdaguard.WithGuardOptions(guard.WithKeyPath("order_id")))
			if err != nil {
				t.Fatal(err)
			}
			for i := range 2 {
				out, err := invoke(t, context.Background(), h, `{"order_id":"7","amount":100}`)
				if err != nil || out != c.want {
					t.Fatalf("invocation %d = %s, %v; want %s", i+1, out, err, c.want)
				}
			}
			if runs.Load() != 1 {
				t.Errorf("the handler ran %d times, want once", runs.Load())
			}
		})
	}
}

// What lambda.Start would refuse at every invocation, Wrap refuses when it
// is built; and without a scope outside Lambda it says so.
func TestWrapRefuses(t *testing.T) {
	g := newGuard(t, memory.New())
	for name, h := range map[string]any{
		"nil":                  nil,
		"not a function":       42,
		"three arguments":      func(context.Context, order, int) error { return nil },
		"first not a context":  func(order, order) error { return nil },
		"interface not ctx":    func(interface{ Foo() }) error { return nil },
		"one result not error": func() int { return 0 },
		"second not error":     func() (int, int) { return 0, 0 },
		"three results":        func() (int, int, error) { return 0, 0, nil },
	} {
		if _, err := lambdaguard.Wrap(g, h, lambdaguard.WithScope("fn")); !errors.Is(err, guard.ErrInvalidOption) {
			t.Errorf("%s: Wrap = %v, want ErrInvalidOption", name, err)
		}
	}
	t.Setenv(lambdaguard.FunctionNameEnv, "")
	if _, err := lambdaguard.Wrap(g, func() {}); !errors.Is(err, guard.ErrInvalidOption) {
		t.Errorf("Wrap without a scope = %v, want ErrInvalidOption", err)
	}
	if _, err := lambdaguard.Wrap(g, func() {}, lambdaguard.WithScope("fn"), lambdaguard.WithGuardOptions(guard.WithCodec(guard.JSON))); !errors.Is(err, guard.ErrInvalidOption) {
		t.Errorf("Wrap with a codec of its own = %v, want ErrInvalidOption", err)
	}
	if _, err := lambdaguard.Wrap(g, func() {}, lambdaguard.WithScope("fn"), lambdaguard.WithGuardOptions(guard.WithKey("k"))); !errors.Is(err, guard.ErrInvalidOption) {
		t.Errorf("Wrap with a fixed key = %v, want ErrInvalidOption", err)
	}
	// An option where it has no effect is refused, not ignored.
	for name, err := range map[string]error{
		"WithHTTPOptions on Wrap":          second(lambdaguard.Wrap(g, func() {}, lambdaguard.WithScope("fn"), lambdaguard.WithHTTPOptions(httpguard.WithSharedKeys()))),
		"WithSkipGroupOnError on Wrap":     second(lambdaguard.Wrap(g, func() {}, lambdaguard.WithScope("fn"), lambdaguard.WithSkipGroupOnError())),
		"WithLambdaOptions on WrapSQS":     second(lambdaguard.WrapSQS(g, func(context.Context, events.SQSMessage) error { return nil }, lambdaguard.WithScope("fn"), lambdaguard.WithLambdaOptions(lambda.WithUseNumber(true)))),
		"WithSkipGroupOnError on a stream": second(lambdaguard.WrapKinesis(g, func(context.Context, events.KinesisEventRecord) error { return nil }, lambdaguard.WithScope("fn"), lambdaguard.WithSkipGroupOnError())),
		"WithBatchOptions on WrapAPIGateway": second(lambdaguard.WrapAPIGateway(g, func(context.Context, events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error) {
			return events.APIGatewayProxyResponse{}, nil
		}, lambdaguard.WithScope("fn"), lambdaguard.WithBatchOptions(guard.WithConcurrency(2)))),
	} {
		if !errors.Is(err, guard.ErrInvalidOption) {
			t.Errorf("%s = %v, want ErrInvalidOption", name, err)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("Must did not panic on an error")
		}
	}()
	lambdaguard.Must(lambdaguard.Wrap(g, 42))
}

// The scope defaults to the function's name; a default given to guard.New
// (the key path) reaches the wrapper's calls.
func TestWrapDefaults(t *testing.T) {
	t.Setenv(lambdaguard.FunctionNameEnv, "orders-fn")
	m := memory.New()
	g := newGuard(t, m, guard.WithKeyPath("order_id"))
	h := lambdaguard.Must(lambdaguard.Wrap(g, func(o order) (receipt, error) { return receipt{"ch_" + o.OrderID}, nil }))
	if _, err := invoke(t, context.Background(), h, `{"order_id":"7","amount":1}`); err != nil {
		t.Fatal(err)
	}
	want, _, _ := g.Key("orders-fn", json.RawMessage(`{"order_id":"7","amount":2}`))
	if rec, err := m.Get(context.Background(), want); err != nil || rec.Status != store.StatusCompleted {
		t.Errorf("record %s = %v, %v; want completed under the function's name, keyed by order_id", want, rec, err)
	}
}

// The guard's refusals reach the runtime as Powertools' error types, which
// still match the guard's sentinels.
func TestWrapErrors(t *testing.T) {
	g := newGuard(t, memory.New())
	release := make(chan struct{})
	started := make(chan struct{})
	h := lambdaguard.Must(lambdaguard.Wrap(g, func(ctx context.Context, o order) (receipt, error) {
		if o.OrderID == "slow" {
			close(started)
			<-release
		}
		return receipt{"ch"}, nil
	}, lambdaguard.WithScope("fn"), lambdaguard.WithGuardOptions(
		guard.WithKeyPath("order_id"), guard.WithPayloadValidation("amount"), guard.WithRequireKey(true))))

	var wg sync.WaitGroup
	wg.Go(func() { invoke(t, context.Background(), h, `{"order_id":"slow","amount":1}`) })
	<-started
	_, err := invoke(t, context.Background(), h, `{"order_id":"slow","amount":1}`)
	var busy *lambdaguard.IdempotencyAlreadyInProgressError
	if !errors.As(err, &busy) || !errors.Is(err, guard.ErrInProgress) {
		t.Errorf("duplicate while the first runs = %v, want IdempotencyAlreadyInProgressError", err)
	}
	close(release)
	wg.Wait()

	_, err = invoke(t, context.Background(), h, `{"order_id":"slow","amount":2}`)
	var mismatch *lambdaguard.IdempotencyValidationError
	if !errors.As(err, &mismatch) || !errors.Is(err, guard.ErrPayloadMismatch) {
		t.Errorf("reused key, other amount = %v, want IdempotencyValidationError", err)
	}
	_, err = invoke(t, context.Background(), h, `{"amount":2}`)
	var keyErr *lambdaguard.IdempotencyKeyError
	if !errors.As(err, &keyErr) || !errors.Is(err, guard.ErrKeyMissing) {
		t.Errorf("no key = %v, want IdempotencyKeyError", err)
	}
	_, err = invoke(t, context.Background(), h, `{"order_id":"x","amount":"not a number"}`)
	if err == nil {
		t.Error("an event that does not decode succeeded")
	}
}

type declinedError struct{ card string }

func (e *declinedError) Error() string { return "card " + e.card + " declined" }

// A definite error is stored and replayed as the runtime reported it: the
// same errorType and errorMessage, without running the handler again.
func TestWrapDefiniteErrorReplayed(t *testing.T) {
	g := newGuard(t, memory.New())
	var runs atomic.Int64
	h := lambdaguard.Must(lambdaguard.Wrap(g, func(o order) error {
		runs.Add(1)
		return guard.Definite(&declinedError{o.OrderID})
	}, lambdaguard.WithScope("fn")))
	var first, replay messages.InvokeResponse_Error
	if _, err := invoke(t, context.Background(), h, `{"order_id":"4242"}`); !errors.As(err, &first) {
		t.Fatalf("first = %v (%T), want the runtime's error shape", err, err)
	}
	if _, err := invoke(t, context.Background(), h, `{"order_id":"4242"}`); !errors.As(err, &replay) {
		t.Fatalf("replay = %v (%T), want the runtime's error shape", err, err)
	}
	want := messages.InvokeResponse_Error{Message: "card 4242 declined", Type: "declinedError"}
	same := func(e messages.InvokeResponse_Error) bool { return e.Message == want.Message && e.Type == want.Type }
	if !same(first) || !same(replay) || runs.Load() != 1 {
		t.Errorf("first %+v, replay %+v, %d runs; want %+v twice and one run", first, replay, runs.Load(), want)
	}
}

// The claim never holds past the invocation's deadline, whatever lease the
// options ask for.
func TestWrapLeaseEndsAtDeadline(t *testing.T) {
	for _, opts := range [][]guard.CallOption{nil, {guard.WithLease(time.Hour)}} {
		m := memory.New()
		g := newGuard(t, m)
		h := lambdaguard.Must(lambdaguard.Wrap(g, func(ctx context.Context, o order) (time.Time, error) {
			key, _ := guard.KeyFromContext(ctx)
			rec, err := m.Get(ctx, key)
			if err != nil {
				return time.Time{}, err
			}
			return rec.LeaseExpiresAt, nil
		}, lambdaguard.WithScope("fn"), lambdaguard.WithGuardOptions(opts...)))
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		deadline, _ := ctx.Deadline()
		out, err := invoke(t, ctx, h, `{"order_id":"1"}`)
		cancel()
		var leaseEnd time.Time
		if err == nil {
			err = json.Unmarshal([]byte(out), &leaseEnd)
		}
		if err != nil || leaseEnd.After(deadline.Add(time.Millisecond)) {
			t.Errorf("with %d options: lease end %v, %v; want at most the deadline %v", len(opts), leaseEnd, err, deadline)
		}
	}
}

// With IDEMGUARD_DISABLED the handler runs every time, and guard.Step in it
// runs its function unguarded.
func TestWrapDisabledKeepsSteps(t *testing.T) {
	t.Setenv(guard.DisableEnv, "true")
	g := newGuard(t, memory.New())
	var steps atomic.Int64
	h := lambdaguard.Must(lambdaguard.Wrap(g, func(ctx context.Context, o order) (string, error) {
		return guard.Step(ctx, "charge", func(context.Context) (string, error) { steps.Add(1); return "ch", nil })
	}, lambdaguard.WithScope("fn")))
	for range 2 {
		if out, err := invoke(t, context.Background(), h, `{"order_id":"1"}`); err != nil || out != `"ch"` {
			t.Fatalf("= %s, %v", out, err)
		}
	}
	if steps.Load() != 2 {
		t.Errorf("the step ran %d times, want twice (unguarded)", steps.Load())
	}
}

// second returns the error of a constructor's results.
func second[T any](_ T, err error) error { return err }

// runtimeError is what the Lambda runtime reports of an invocation's
// error, as aws-lambda-go makes it: a messages.InvokeResponse_Error as it
// is, else the error's message and the name of its type (or of the type it
// points to). It is what the function's caller sees.
func runtimeError(err error) messages.InvokeResponse_Error {
	if ie, ok := err.(messages.InvokeResponse_Error); ok {
		return ie
	}
	t := reflect.TypeOf(err)
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return messages.InvokeResponse_Error{Message: err.Error(), Type: t.Name()}
}

// fixedClock is a guard clock that stands still at now: its timers never
// fire, so a holder on it never learns that its lease lapsed.
type fixedClock struct{ now time.Time }

func (c fixedClock) Now() time.Time { return c.now }
func (c fixedClock) AfterFunc(time.Duration, func()) (stop func() bool) {
	return func() bool { return true }
}

// An invocation whose claim was taken over while its handler ran (its
// answer not recorded: the taker's is) is reported with an errorType of
// its own, IdempotencyLeaseLostError, so that its caller can tell it from
// the handler's own error; it wraps guard.ErrLeaseLost.
func TestWrapLeaseLostReported(t *testing.T) {
	m := memory.New()
	now := time.Now()
	holderGuard := newGuard(t, m, guard.WithClock(fixedClock{now}))
	takerGuard := newGuard(t, m, guard.WithClock(fixedClock{now.Add(time.Hour)}))
	started, release := make(chan struct{}), make(chan struct{})
	handler := func(by string) func(context.Context, order) (receipt, error) {
		return func(context.Context, order) (receipt, error) {
			if by == "holder" {
				close(started)
				<-release
			}
			return receipt{"ch by " + by}, nil
		}
	}
	wrap := func(g *guard.Guard, by string) lambda.Handler {
		return lambdaguard.Must(lambdaguard.Wrap(g, handler(by), lambdaguard.WithScope("fn"),
			lambdaguard.WithGuardOptions(guard.WithKeyPath("order_id"))))
	}
	var holderErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		_, holderErr = invoke(t, context.Background(), wrap(holderGuard, "holder"), `{"order_id":"1"}`)
	})
	<-started
	// An hour later on the taker's clock the holder's lease has lapsed.
	if out, err := invoke(t, context.Background(), wrap(takerGuard, "taker"), `{"order_id":"1"}`); err != nil || out != `{"charge":"ch by taker"}` {
		t.Fatalf("the taker = %s, %v; want its own answer", out, err)
	}
	close(release)
	wg.Wait()
	if got := runtimeError(holderErr); got.Type != "IdempotencyLeaseLostError" || !errors.Is(holderErr, guard.ErrLeaseLost) {
		t.Errorf("the holder, taken over = %v, reported as %+v; want errorType IdempotencyLeaseLostError wrapping guard.ErrLeaseLost", holderErr, got)
	}
}
