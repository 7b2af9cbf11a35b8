package nexusguard_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nexus-rpc/sdk-go/nexus"

	"github.com/idemguard/idemguard/activity"
	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/nexusguard"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/memory"
)

// A resent start (the same request ID) replays the first start's result;
// another request runs the handler.
func TestWrapReplaysResentStart(t *testing.T) {
	var l ledger
	h := nexusguard.MustWrap(newGuard(t), charge(&l))
	ctx := handlerContext()
	o := Order{OrderID: "o-1", Amount: 7}
	first, err := h(ctx, o, start("req-1"))
	if err != nil {
		t.Fatal(err)
	}
	resent, err := h(ctx, o, start("req-1"))
	if err != nil || resent != first {
		t.Fatalf("resent start = %+v, %v; want the first start's %+v", resent, err, first)
	}
	if n := l.count("o-1"); n != 1 {
		t.Fatalf("charged %d times for one request, want 1", n)
	}
	other, err := h(ctx, o, start("req-2"))
	if err != nil || other == first {
		t.Fatalf("another request = %+v, %v; want a charge of its own", other, err)
	}
	if n := l.count("o-1"); n != 2 {
		t.Fatalf("charged %d times for two requests, want 2", n)
	}
}

// A resent start with another input is refused as a bad request, with
// the guard's error type as its cause; nothing is charged again.
func TestWrapPayloadMismatch(t *testing.T) {
	var l ledger
	h := nexusguard.MustWrap(newGuard(t), charge(&l))
	ctx := handlerContext()
	if _, err := h(ctx, Order{OrderID: "o-1", Amount: 7}, start("req-1")); err != nil {
		t.Fatal(err)
	}
	_, err := h(ctx, Order{OrderID: "o-1", Amount: 700}, start("req-1"))
	he := handlerError(t, err, nexus.HandlerErrorTypeBadRequest, false)
	if ae := cause(t, he, activity.ErrorTypePayloadMismatch); !ae.NonRetryable() {
		t.Errorf("cause %v is retryable", ae)
	}
	if n := l.count("o-1"); n != 1 {
		t.Fatalf("charged %d times, want 1", n)
	}
}

// A key path given to guard.New reaches the wrapped handler: starts of
// one order share a key whatever their request IDs, and an input without
// the key is a bad request.
func TestWrapKeyPathFromGuard(t *testing.T) {
	var l ledger
	h := nexusguard.MustWrap(newGuard(t, guard.WithKeyPath("order_id")), charge(&l))
	ctx := handlerContext()
	first, err := h(ctx, Order{OrderID: "o-1", Amount: 7}, start("req-1"))
	if err != nil {
		t.Fatal(err)
	}
	second, err := h(ctx, Order{OrderID: "o-1", Amount: 7}, start("req-2"))
	if err != nil || second != first {
		t.Fatalf("the same order under another request ID = %+v, %v; want the first %+v", second, err, first)
	}
	// Payload validation of the whole input is the default.
	_, err = h(ctx, Order{OrderID: "o-1", Amount: 8}, start("req-3"))
	cause(t, handlerError(t, err, nexus.HandlerErrorTypeBadRequest, false), activity.ErrorTypePayloadMismatch)
	_, err = h(ctx, Order{Amount: 7}, start("req-4"))
	cause(t, handlerError(t, err, nexus.HandlerErrorTypeBadRequest, false), activity.ErrorTypeKeyMissing)
	if n := l.count("o-1"); n != 1 {
		t.Fatalf("charged %d times, want 1", n)
	}
}

// An operation error is the operation's outcome: recorded, and replayed to
// a resent start as the handler returned it, failed or canceled; an error
// marked guard.Definite becomes a failed operation, on the first start as
// on the replay.
func TestWrapOperationErrorReplayed(t *testing.T) {
	for _, c := range []struct {
		name  string
		err   error
		state nexus.OperationState
		msg   string
		cause string
	}{
		{"failed", nexus.NewOperationFailedErrorf("declined: %w", errors.New("card expired")), nexus.OperationStateFailed, "declined: card expired", "card expired"},
		{"canceled", nexus.NewOperationCanceledErrorf("order withdrawn"), nexus.OperationStateCanceled, "order withdrawn", ""},
		{"wrapped", fmt.Errorf("charge: %w", nexus.NewOperationFailedErrorf("declined")), nexus.OperationStateFailed, "declined", ""},
		{"definite", guard.Definite(errors.New("out of stock")), nexus.OperationStateFailed, "out of stock", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			var runs atomic.Int32
			h := nexusguard.MustWrap(newGuard(t), func(ctx context.Context, o Order, _ nexus.StartOperationOptions) (Receipt, error) {
				runs.Add(1)
				return Receipt{}, c.err
			})
			ctx := handlerContext()
			var got [2]*nexus.OperationError
			for i := range got {
				_, err := h(ctx, Order{OrderID: "o-1"}, start("req-1"))
				oe, ok := err.(*nexus.OperationError)
				if !ok {
					t.Fatalf("start %d: error %v (%T), want a *nexus.OperationError at the top", i+1, err, err)
				}
				got[i] = oe
			}
			for i, oe := range got {
				var cm string
				if oe.Cause != nil {
					cm = oe.Cause.Error()
				}
				if oe.State != c.state || oe.Message != c.msg || cm != c.cause {
					t.Errorf("start %d: %s %q, cause %q; want %s %q, cause %q", i+1, oe.State, oe.Message, cm, c.state, c.msg, c.cause)
				}
			}
			if n := runs.Load(); n != 1 {
				t.Errorf("the handler ran %d times, want 1", n)
			}
		})
	}
}

// An error after a step releases the key, so the caller's retry runs the
// handler again; the step replays, and its side effect happens once. The
// handler's own error reaches the Nexus machinery untouched (a retryable
// internal error to the caller).
func TestWrapStepAfterTransientError(t *testing.T) {
	var l ledger
	var failed atomic.Bool
	errTransient := errors.New("shipping service unavailable")
	h := nexusguard.MustWrap(newGuard(t), func(ctx context.Context, o Order, _ nexus.StartOperationOptions) (Receipt, error) {
		id, err := guard.Step(ctx, "charge", func(ctx context.Context) (string, error) {
			l.add("charge")
			return "ch_" + randomID(), nil
		})
		if err != nil {
			return Receipt{}, err
		}
		if failed.CompareAndSwap(false, true) {
			return Receipt{}, errTransient
		}
		l.add("ship")
		return Receipt{ChargeID: id, OrderID: o.OrderID}, nil
	})
	ctx := handlerContext()
	if _, err := h(ctx, Order{OrderID: "o-1"}, start("req-1")); err != errTransient {
		t.Fatalf("first start = %v, want the handler's own error untouched", err)
	}
	r, err := h(ctx, Order{OrderID: "o-1"}, start("req-1"))
	if err != nil || r.ChargeID == "" {
		t.Fatalf("retry = %+v, %v", r, err)
	}
	if c, s := l.count("charge"), l.count("ship"); c != 1 || s != 1 {
		t.Fatalf("charged %d times, shipped %d times; want once each", c, s)
	}
}

// A start resent while the first still runs gets a retryable handler
// error, whose cause's retry hint runs to the holder's lease end plus the
// guard's clock skew.
func TestWrapInProgress(t *testing.T) {
	const lease, skew = 20 * time.Second, 3 * time.Second
	s := memory.New()
	entered, release := make(chan struct{}), make(chan struct{})
	var l ledger
	handler := func(ctx context.Context, o Order, _ nexus.StartOperationOptions) (Receipt, error) {
		l.add(o.OrderID)
		close(entered)
		<-release
		return Receipt{OrderID: o.OrderID}, nil
	}
	// Two workers: two guards over one store.
	first := nexusguard.MustWrap(newGuardOn(t, s, guard.WithLease(lease), guard.WithClockSkew(skew)), handler)
	second := nexusguard.MustWrap(newGuardOn(t, s, guard.WithLease(lease), guard.WithClockSkew(skew)), handler)
	ctx := handlerContext()
	done := make(chan error, 1)
	go func() {
		_, err := first(ctx, Order{OrderID: "o-1"}, start("req-1"))
		done <- err
	}()
	<-entered
	before := time.Now()
	_, err := second(ctx, Order{OrderID: "o-1"}, start("req-1"))
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("the first start: %v", err)
	}
	he := handlerError(t, err, nexus.HandlerErrorTypeUnavailable, true)
	ae := cause(t, he, activity.ErrorTypeInProgress)
	if ae.NonRetryable() {
		t.Errorf("cause %v is not retryable", ae)
	}
	// The lease was taken before the second start, so it ends within
	// lease of it; the hint adds the skew (and a margin of less than a
	// second).
	if d := ae.NextRetryDelay(); d < skew+lease-time.Since(before)-time.Second || d > skew+lease+time.Second {
		t.Errorf("retry hint %v, want about the lease (%v) plus the clock skew (%v)", d, lease, skew)
	}
	if n := l.count("o-1"); n != 1 {
		t.Errorf("charged %d times, want 1", n)
	}
}

// A store that fails before the handler runs is a retryable handler error;
// a throttling store says so in its type.
func TestWrapStoreFailure(t *testing.T) {
	for _, c := range []struct {
		name  string
		err   error
		typ   nexus.HandlerErrorType
		cause string
	}{
		{"down", errors.New("connection refused"), nexus.HandlerErrorTypeUnavailable, activity.ErrorTypeStore},
		{"throttled", store.ErrThrottled, nexus.HandlerErrorTypeResourceExhausted, activity.ErrorTypeStoreThrottled},
	} {
		t.Run(c.name, func(t *testing.T) {
			var l ledger
			h := nexusguard.MustWrap(newGuardOn(t, failingStore{memory.New(), c.err}), charge(&l))
			_, err := h(handlerContext(), Order{OrderID: "o-1"}, start("req-1"))
			cause(t, handlerError(t, err, c.typ, true), c.cause)
			if n := l.count("o-1"); n != 0 {
				t.Errorf("charged %d times, want 0", n)
			}
		})
	}
}

// With the guard disabled (IDEMGUARD_DISABLED) the handler runs on every
// start, and guard.Step inside it runs unguarded instead of failing.
func TestWrapDisabled(t *testing.T) {
	t.Setenv(adapt.DisableEnv, "true")
	var l ledger
	h := nexusguard.MustWrap(newGuard(t), func(ctx context.Context, o Order, _ nexus.StartOperationOptions) (Receipt, error) {
		return guard.Step(ctx, "charge", func(ctx context.Context) (Receipt, error) {
			l.add(o.OrderID)
			return Receipt{OrderID: o.OrderID}, nil
		})
	})
	for range 2 {
		if _, err := h(handlerContext(), Order{OrderID: "o-1"}, start("req-1")); err != nil {
			t.Fatalf("start with the guard disabled: %v", err)
		}
	}
	if n := l.count("o-1"); n != 2 {
		t.Errorf("charged %d times, want 2 (no guard)", n)
	}
}

// Wrap reports what cannot work when it is called; MustWrap panics with
// the same error.
func TestWrapOptions(t *testing.T) {
	var l ledger
	g := newGuard(t)
	for _, c := range []struct {
		name string
		g    *guard.Guard
		opts []nexusguard.Option
	}{
		{"nil guard", nil, nil},
		{"a JMESPath expression that does not compile", g, []nexusguard.Option{nexusguard.WithGuardOptions(guard.WithKeyPath("a["))}},
		{"a key for every call", g, []nexusguard.Option{nexusguard.WithGuardOptions(guard.WithKey("k"))}},
		{"a claim token for every call", g, []nexusguard.Option{nexusguard.WithGuardOptions(adapt.WithClaimToken("t"))}},
		{"a codec of its own", g, []nexusguard.Option{nexusguard.WithGuardOptions(guard.WithCodec(adapt.JSON))}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := nexusguard.Wrap(c.g, charge(&l), c.opts...); err == nil {
				t.Fatal("Wrap succeeded")
			}
			defer func() {
				if recover() == nil {
					t.Error("MustWrap did not panic")
				}
			}()
			nexusguard.MustWrap(c.g, charge(&l), c.opts...)
		})
	}
	if _, err := nexusguard.Wrap(g, charge(&l), nexusguard.WithGuardOptions(guard.WithKeyPath("order_id"), guard.WithTTL(time.Minute))); err != nil {
		t.Errorf("Wrap with valid options: %v", err)
	}
}

// Guard options given to the wrapper apply to its calls: a key path, and
// payload validation of the caller's choice.
func TestWrapGuardOptions(t *testing.T) {
	var l ledger
	h := nexusguard.MustWrap(newGuard(t), charge(&l), nexusguard.WithGuardOptions(
		guard.WithKeyPath("order_id"), guard.WithPayloadValidation("order_id")))
	ctx := handlerContext()
	a, err := h(ctx, Order{OrderID: "o-1", Amount: 1}, start("req-1"))
	if err != nil {
		t.Fatal(err)
	}
	// Only the order ID is validated: another amount replays.
	if b, err := h(ctx, Order{OrderID: "o-1", Amount: 2}, start("req-2")); err != nil || b != a {
		t.Fatalf("= %+v, %v; want the first %+v", b, err, a)
	}
}

// A handler called outside the Nexus machinery, without a handler
// context, has no operation to scope its key by: it is refused.
func TestWrapOutsideHandlerContext(t *testing.T) {
	var l ledger
	_, err := nexusguard.MustWrap(newGuard(t), charge(&l))(context.Background(), Order{OrderID: "o-1"}, start("req-1"))
	handlerError(t, err, nexus.HandlerErrorTypeInternal, false)
	if n := l.count("o-1"); n != 0 {
		t.Errorf("charged %d times, want 0", n)
	}
}

// asyncOperation is a workflow-run operation in miniature: its start
// reserves stock (a side effect before the workflow), then returns a token
// and a link to the run it started.
type asyncOperation struct {
	nexus.UnimplementedOperation[Order, Receipt]
	l      *ledger
	starts atomic.Int32
}

func (*asyncOperation) Name() string { return operation }

func (a *asyncOperation) Start(ctx context.Context, o Order, opts nexus.StartOperationOptions) (nexus.HandlerStartOperationResult[Receipt], error) {
	if _, err := guard.Step(ctx, "reserve", func(ctx context.Context) (bool, error) {
		a.l.add("reserve " + o.OrderID)
		return true, nil
	}); err != nil {
		return nil, err
	}
	n := a.starts.Add(1)
	nexus.AddHandlerLinks(ctx, nexus.Link{URL: &url.URL{Scheme: "temporal", Path: "/namespaces/handler/workflows/wf-" + o.OrderID}, Type: "temporal.api.common.v1.Link.WorkflowEvent"})
	return &nexus.HandlerStartOperationResultAsync{OperationToken: fmt.Sprintf("token-%s-%d", o.OrderID, n)}, nil
}

// A wrapped operation replays an asynchronous start (a workflow-run
// operation's) with its token and its links, and a synchronous one with
// its value; steps work in its start.
func TestWrapOperation(t *testing.T) {
	t.Run("async", func(t *testing.T) {
		var l ledger
		a := &asyncOperation{l: &l}
		op := nexusguard.MustWrapOperation[Order, Receipt](newGuard(t), a)
		if op.Name() != operation {
			t.Errorf("Name() = %q, want %q", op.Name(), operation)
		}
		var tokens, links [2]string
		for i := range 2 {
			ctx := handlerContext()
			res, err := op.Start(ctx, Order{OrderID: "o-1"}, start("req-1"))
			if err != nil {
				t.Fatalf("start %d: %v", i+1, err)
			}
			async, ok := res.(*nexus.HandlerStartOperationResultAsync)
			if !ok {
				t.Fatalf("start %d = %T, want an async result", i+1, res)
			}
			tokens[i] = async.OperationToken
			var ls []string
			for _, l := range nexus.HandlerLinks(ctx) {
				ls = append(ls, l.Type+" "+l.URL.String())
			}
			links[i] = strings.Join(ls, ",")
		}
		if tokens[0] != tokens[1] || links[0] != links[1] || links[0] == "" {
			t.Errorf("tokens %q, links %q: want the first start's token and links replayed", tokens, links)
		}
		if n, r := a.starts.Load(), l.count("reserve o-1"); n != 1 || r != 1 {
			t.Errorf("started %d times, reserved %d times; want once each", n, r)
		}
	})
	t.Run("sync", func(t *testing.T) {
		var l ledger
		op := nexusguard.MustWrapOperation(newGuard(t), nexus.NewSyncOperation(operation, charge(&l)))
		var got [2]Receipt
		for i := range got {
			res, err := op.Start(handlerContext(), Order{OrderID: "o-1"}, start("req-1"))
			if err != nil {
				t.Fatal(err)
			}
			sync, ok := res.(*nexus.HandlerStartOperationResultSync[Receipt])
			if !ok {
				t.Fatalf("start %d = %T, want a sync result", i+1, res)
			}
			got[i] = sync.Value
		}
		if got[0] != got[1] || l.count("o-1") != 1 {
			t.Errorf("receipts %+v, charged %d times: want one charge replayed", got, l.count("o-1"))
		}
	})
	t.Run("async keyed by input", func(t *testing.T) {
		// Another operation (another request ID) whose input keys as
		// the first's would be handed a token without its callback
		// attached to the workflow: refused.
		var l ledger
		op := nexusguard.MustWrapOperation[Order, Receipt](newGuard(t, guard.WithKeyPath("order_id")), &asyncOperation{l: &l})
		if _, err := op.Start(handlerContext(), Order{OrderID: "o-1"}, start("req-1")); err != nil {
			t.Fatal(err)
		}
		if _, err := op.Start(handlerContext(), Order{OrderID: "o-1"}, start("req-1")); err != nil {
			t.Fatalf("the same request again: %v", err)
		}
		_, err := op.Start(handlerContext(), Order{OrderID: "o-1"}, start("req-2"))
		handlerError(t, err, nexus.HandlerErrorTypeConflict, false)
	})
}

// The definite-error predicate can be replaced: an operation error that
// is not definite releases the key, and the next start runs again.
func TestWrapDefiniteErrors(t *testing.T) {
	var runs atomic.Int32
	h := nexusguard.MustWrap(newGuard(t), func(ctx context.Context, o Order, _ nexus.StartOperationOptions) (Receipt, error) {
		runs.Add(1)
		return Receipt{}, nexus.NewOperationFailedErrorf("declined")
	}, nexusguard.WithGuardOptions(guard.WithDefiniteErrors(nil)))
	for range 2 {
		if _, err := h(handlerContext(), Order{OrderID: "o-1"}, start("req-1")); err == nil {
			t.Fatal("no error")
		}
	}
	if n := runs.Load(); n != 2 {
		t.Errorf("the handler ran %d times, want 2", n)
	}
}

// A start without a request ID (and no key path) has no key: it is
// refused as a bad request, never run unguarded.
func TestWrapNoRequestID(t *testing.T) {
	var l ledger
	_, err := nexusguard.MustWrap(newGuard(t), charge(&l))(handlerContext(), Order{OrderID: "o-1"}, start(""))
	cause(t, handlerError(t, err, nexus.HandlerErrorTypeBadRequest, false), activity.ErrorTypeKeyMissing)
	if n := l.count("o-1"); n != 0 {
		t.Errorf("charged %d times, want 0", n)
	}
}
