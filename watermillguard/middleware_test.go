package watermillguard_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/memory"
	"github.com/idemguard/idemguard/watermillguard"
)

// sameMessages fails the test unless got holds the messages of want: the
// same UUIDs, metadata and payloads, in order.
func sameMessages(t *testing.T, what string, got, want []*message.Message) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d messages, want %d", what, len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.UUID != w.UUID || string(g.Payload) != string(w.Payload) || !maps.Equal(g.Metadata, w.Metadata) {
			t.Errorf("%s: message %d is %s %v %s, want %s %v %s", what, i, g.UUID, g.Metadata, g.Payload, w.UUID, w.Metadata, w.Payload)
		}
	}
}

// trips checks that n (nil for the memory store) counted want round trips
// since its last reset, and resets it.
func trips(t *testing.T, n counter, what string, want int) {
	t.Helper()
	if n == nil {
		return
	}
	if got := n.Total(); got != want {
		t.Errorf("%s: %d round trips to the store (%s), want %d", what, got, n, want)
	}
	n.Reset()
}

// Claim, run, complete: the first delivery runs the handler and stores
// what it produced; a redelivery replays the same messages, with the
// same UUIDs, without running it, at one round trip to the store.
func TestRedeliveryReplaysProducedMessages(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store, n counter) {
		mw := newMiddleware(t, newGuard(t, s))
		ctx := t.Context()
		var runs atomic.Int32
		body := func(ctx context.Context, msg *message.Message) ([]*message.Message, error) {
			runs.Add(1)
			return produce(msg.UUID, 2), nil
		}
		key := watermill.NewUUID()
		first, err := through(ctx, mw, key, []byte(`{"order":1}`), body)
		if err != nil || runs.Load() != 1 || len(first) != 2 {
			t.Fatalf("first delivery: %d messages, %v, %d runs", len(first), err, runs.Load())
		}
		trips(t, n, "first delivery", 2)
		for i := range 2 {
			again, err := through(ctx, mw, key, []byte(`{"order":1}`), body)
			if err != nil {
				t.Fatalf("redelivery %d: %v", i, err)
			}
			sameMessages(t, fmt.Sprintf("redelivery %d", i), again, first)
			trips(t, n, "redelivery of a handled message", 1)
		}
		if runs.Load() != 1 {
			t.Errorf("the handler ran %d times, want 1", runs.Load())
		}
		// A handler that produces nothing is replayed as nothing.
		none, err := through(ctx, mw, watermill.NewUUID(), nil, func(context.Context, *message.Message) ([]*message.Message, error) { return nil, nil })
		if err != nil || none != nil {
			t.Errorf("a handler producing nothing: %v, %v", none, err)
		}
	})
}

// A released error lets the redelivery run the handler again; a definite
// one is recorded, returned as a PermanentError, and replayed as one.
func TestHandlerErrors(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store, n counter) {
		mw := newMiddleware(t, newGuard(t, s))
		ctx := t.Context()
		t.Run("released", func(t *testing.T) {
			var runs atomic.Int32
			errFlaky := errors.New("inventory service unavailable")
			body := func(ctx context.Context, msg *message.Message) ([]*message.Message, error) {
				if runs.Add(1) == 1 {
					return produce("lost", 1), errFlaky
				}
				return produce("kept", 1), nil
			}
			key := watermill.NewUUID()
			out, err := through(ctx, mw, key, nil, body)
			if !errors.Is(err, errFlaky) || watermillguard.IsPermanent(err) || out != nil {
				t.Fatalf("failed delivery: %v, %v; want the handler's error, not permanent, no messages", out, err)
			}
			out, err = through(ctx, mw, key, nil, body)
			if err != nil || runs.Load() != 2 || len(out) != 1 || out[0].Metadata.Get("source") != "kept" {
				t.Fatalf("redelivery: %v, %v after %d runs", out, err, runs.Load())
			}
		})
		t.Run("definite", func(t *testing.T) {
			var runs atomic.Int32
			errDeclined := errors.New("card declined")
			body := func(ctx context.Context, msg *message.Message) ([]*message.Message, error) {
				runs.Add(1)
				return nil, guard.Definite(errDeclined)
			}
			key := watermill.NewUUID()
			if n != nil {
				n.Reset()
			}
			for i := range 3 {
				_, err := through(ctx, mw, key, nil, body)
				var p *watermillguard.PermanentError
				if !errors.As(err, &p) || p.UUID != key || !strings.Contains(err.Error(), "card declined") {
					t.Fatalf("delivery %d: %v; want a PermanentError for %s with the handler's message", i, err, key)
				}
				if i == 0 && !errors.Is(err, errDeclined) {
					t.Errorf("the first delivery's error %v does not wrap the handler's", err)
				}
				if i == 0 {
					trips(t, n, "a definite error", 2)
				} else {
					trips(t, n, "its replay", 1)
				}
			}
			if runs.Load() != 1 {
				t.Errorf("the handler ran %d times, want 1", runs.Load())
			}
		})
	})
}

// A handler of two guarded steps that fails after the first and is
// redelivered runs the first step's side effect once.
func TestStepsInsideTheHandler(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store, _ counter) {
		mw := newMiddleware(t, newGuard(t, s))
		var reserved, charged, attempts atomic.Int32
		body := func(ctx context.Context, msg *message.Message) ([]*message.Message, error) {
			attempt := attempts.Add(1)
			hold, err := guard.Step(ctx, "reserve", func(ctx context.Context) (string, error) {
				reserved.Add(1)
				return "hold-" + msg.UUID, nil
			})
			if err != nil {
				return nil, err
			}
			if _, err := guard.Step(ctx, "charge", func(ctx context.Context) (int, error) {
				if attempt == 1 {
					return 0, errors.New("payment provider timed out")
				}
				charged.Add(1)
				return 1250, nil
			}); err != nil {
				return nil, err
			}
			return []*message.Message{message.NewMessage(watermill.NewUUID(), []byte(hold))}, nil
		}
		key := watermill.NewUUID()
		if _, err := through(t.Context(), mw, key, nil, body); err == nil {
			t.Fatal("the first delivery succeeded; want the charge's error")
		}
		out, err := through(t.Context(), mw, key, nil, body)
		if err != nil || len(out) != 1 || string(out[0].Payload) != "hold-"+key {
			t.Fatalf("redelivery: %v, %v", out, err)
		}
		if _, err := through(t.Context(), mw, key, nil, body); err != nil {
			t.Fatal(err)
		}
		if reserved.Load() != 1 || charged.Load() != 1 || attempts.Load() != 2 {
			t.Errorf("reserved %d, charged %d, handler attempts %d; want 1, 1, 2", reserved.Load(), charged.Load(), attempts.Load())
		}
	})
}

// A duplicate delivered while another consumer handles the message waits
// for it, by default or for guard.WithWait's budget, and gets the same
// messages; under guard.WithWait(0) it gets *adapt.InProgressError at once
// (nacked, not permanent).
func TestDuplicateInProgress(t *testing.T) {
	s := memory.New()
	// Two guards on one store are two consumer processes.
	holder := newMiddleware(t, newGuard(t, s))
	started, release := make(chan struct{}), make(chan struct{})
	key := watermill.NewUUID()
	var produced []*message.Message
	done := make(chan error)
	go func() {
		_, err := through(t.Context(), holder, key, nil, func(ctx context.Context, msg *message.Message) ([]*message.Message, error) {
			close(started)
			<-release
			produced = produce(key, 1)
			return produced, nil
		})
		done <- err
	}()
	<-started
	other := newGuard(t, s)
	never := func(context.Context, *message.Message) ([]*message.Message, error) {
		t.Error("the duplicate ran the handler")
		return nil, nil
	}
	_, err := through(t.Context(), newMiddleware(t, other, watermillguard.WithGuardOptions(guard.WithWait(0))), key, nil, never)
	if !errors.Is(err, guard.ErrInProgress) || watermillguard.IsPermanent(err) {
		t.Fatalf("duplicate in progress under guard.WithWait(0): %v; want guard.ErrInProgress, not permanent", err)
	}
	waiting := map[string]message.HandlerMiddleware{
		"by default":     newMiddleware(t, other),
		"guard.WithWait": newMiddleware(t, other, watermillguard.WithGuardOptions(guard.WithWait(10*time.Second), adapt.WithWaitBackoff(5*time.Millisecond, 20*time.Millisecond))),
	}
	got := map[string]chan []*message.Message{}
	for name, mw := range waiting {
		ch := make(chan []*message.Message, 1)
		got[name] = ch
		go func() {
			out, err := through(t.Context(), mw, key, nil, never)
			if err != nil {
				t.Errorf("the duplicate waiting %s: %v; want it to wait for the holder", name, err)
			}
			ch <- out
		}()
	}
	time.Sleep(100 * time.Millisecond)
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for name, ch := range got {
		sameMessages(t, "the duplicate waiting "+name, <-ch, produced)
	}
}

// Concurrent deliveries in one process share one run; each gets messages
// of its own to publish, with the same UUIDs.
func TestSharedDeliveriesGetCopies(t *testing.T) {
	g := newGuard(t, memory.New())
	mw := newMiddleware(t, g, watermillguard.WithGuardOptions(guard.WithWait(10*time.Second)))
	key := watermill.NewUUID()
	var runs atomic.Int32
	gate := make(chan struct{})
	var wg sync.WaitGroup
	outs := make([][]*message.Message, 8)
	for i := range outs {
		wg.Go(func() {
			out, err := through(t.Context(), mw, key, nil, func(context.Context, *message.Message) ([]*message.Message, error) {
				runs.Add(1)
				<-gate
				return produce(key, 2), nil
			})
			if err != nil {
				t.Error(err)
			}
			outs[i] = out
		})
	}
	time.Sleep(50 * time.Millisecond)
	close(gate)
	wg.Wait()
	if runs.Load() != 1 {
		t.Fatalf("the handler ran %d times, want 1", runs.Load())
	}
	seen := map[*message.Message]bool{}
	for i, out := range outs {
		sameMessages(t, fmt.Sprintf("delivery %d", i), out, outs[0])
		for _, m := range out {
			if seen[m] {
				t.Fatalf("delivery %d got a message value another delivery got too", i)
			}
			seen[m] = true
		}
	}
}

// The key can come from a metadata field or from the payload; a message
// that cannot be keyed is a PermanentError and runs nothing.
func TestKeys(t *testing.T) {
	g := newGuard(t, memory.New())
	ctx := t.Context()
	var runs atomic.Int32
	body := func(context.Context, *message.Message) ([]*message.Message, error) {
		runs.Add(1)
		return nil, nil
	}
	deliverWith := func(mw message.HandlerMiddleware, uuid string, payload string, md map[string]string) error {
		msg := message.NewMessage(uuid, []byte(payload))
		for k, v := range md {
			msg.Metadata.Set(k, v)
		}
		msg.SetContext(ctx)
		_, err := deliver(mw, msg, body)
		return err
	}
	check := func(what string, err error, wantRuns int32, wantErr error) {
		t.Helper()
		switch {
		case wantErr == nil && err != nil:
			t.Errorf("%s: %v", what, err)
		case wantErr != nil && (!errors.Is(err, wantErr) || !watermillguard.IsPermanent(err)):
			t.Errorf("%s: %v; want a PermanentError matching %v", what, err, wantErr)
		}
		if got := runs.Swap(0); got != wantRuns {
			t.Errorf("%s: the handler ran %d times, want %d", what, got, wantRuns)
		}
	}

	t.Run("uuid", func(t *testing.T) {
		mw := newMiddleware(t, g, watermillguard.WithScope("uuid"))
		check("first", deliverWith(mw, "m-1", "not json", nil), 1, nil)
		check("same UUID, other payload", deliverWith(mw, "m-1", "other", nil), 0, nil)
		check("empty UUID", deliverWith(mw, "", "", nil), 0, guard.ErrKeyMissing)
	})
	t.Run("metadata", func(t *testing.T) {
		mw := newMiddleware(t, g, watermillguard.WithScope("metadata"), watermillguard.WithKeyFromMetadata("event_id"))
		check("first", deliverWith(mw, "m-1", "", map[string]string{"event_id": "e-1"}), 1, nil)
		check("another UUID, same event", deliverWith(mw, "m-2", "", map[string]string{"event_id": "e-1"}), 0, nil)
		check("same UUID, another event", deliverWith(mw, "m-2", "", map[string]string{"event_id": "e-2"}), 1, nil)
		check("no field", deliverWith(mw, "m-3", "", nil), 0, guard.ErrKeyMissing)
	})
	t.Run("payload", func(t *testing.T) {
		mw := newMiddleware(t, g, watermillguard.WithScope("payload"), watermillguard.WithKeyFromPayload(),
			watermillguard.WithGuardOptions(guard.WithKeyPath("order_id")))
		check("first", deliverWith(mw, "m-1", `{"order_id":"o-1","n":1}`, nil), 1, nil)
		check("another UUID, same order", deliverWith(mw, "m-2", `{"n":2,"order_id":"o-1"}`, nil), 0, nil)
		check("another order", deliverWith(mw, "m-2", `{"order_id":"o-2"}`, nil), 1, nil)
		check("not JSON", deliverWith(mw, "m-4", `order_id=o-3`, nil), 0, watermillguard.ErrPayloadNotJSON)
		check("empty", deliverWith(mw, "m-5", ``, nil), 0, guard.ErrInvalidInput)
		check("no order_id", deliverWith(mw, "m-6", `{"n":1}`, nil), 0, guard.ErrKeyMissing)
		whole := newMiddleware(t, g, watermillguard.WithScope("payload-whole"), watermillguard.WithKeyFromPayload())
		check("whole payload", deliverWith(whole, "m-1", `{"a":1,"b":2}`, nil), 1, nil)
		check("same JSON, other spacing and order", deliverWith(whole, "m-2", `{ "b":2, "a":1 }`, nil), 0, nil)
	})
}

// With payload validation, a redelivered UUID with another payload is a
// PermanentError carrying guard's *MismatchError, not a silent duplicate;
// a payload that is not JSON cannot be validated.
func TestPayloadValidation(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store, _ counter) {
		mw := newMiddleware(t, newGuard(t, s), watermillguard.WithGuardOptions(guard.WithPayloadValidation("amount")))
		ctx := t.Context()
		var runs atomic.Int32
		body := func(context.Context, *message.Message) ([]*message.Message, error) {
			runs.Add(1)
			return nil, nil
		}
		key := watermill.NewUUID()
		if _, err := through(ctx, mw, key, []byte(`{"amount":100,"note":"a"}`), body); err != nil {
			t.Fatal(err)
		}
		if _, err := through(ctx, mw, key, []byte(`{"amount":100,"note":"b"}`), body); err != nil {
			t.Errorf("same amount, another note: %v", err)
		}
		_, err := through(ctx, mw, key, []byte(`{"amount":999}`), body)
		var mm *adapt.MismatchError
		if !errors.As(err, &mm) || !watermillguard.IsPermanent(err) {
			t.Errorf("another amount: %v; want a PermanentError holding a *adapt.MismatchError", err)
		}
		_, err = through(ctx, mw, watermill.NewUUID(), []byte(`amount=1`), body)
		if !errors.Is(err, watermillguard.ErrPayloadNotJSON) || !watermillguard.IsPermanent(err) {
			t.Errorf("a payload that is not JSON: %v", err)
		}
		if runs.Load() != 1 {
			t.Errorf("the handler ran %d times, want 1", runs.Load())
		}
	})
}

// The middleware's TTL gives way to the guard's, and WithGuardOptions
// overrides both.
func TestDefaultsGiveWay(t *testing.T) {
	ttlOf := func(t *testing.T, s *memory.Store, g *guard.Guard, opts ...watermillguard.Option) time.Duration {
		t.Helper()
		key := watermill.NewUUID()
		if _, err := through(t.Context(), newMiddleware(t, g, opts...), key, nil, func(context.Context, *message.Message) ([]*message.Message, error) { return nil, nil }); err != nil {
			t.Fatal(err)
		}
		k, _, err := g.Key(watermillguard.DefaultScope, nil, guard.WithKey(key))
		if err != nil {
			t.Fatal(err)
		}
		rec, err := s.Get(t.Context(), k)
		if err != nil || rec == nil {
			t.Fatalf("record of %s: %v, %v", k, rec, err)
		}
		return time.Until(rec.ExpiresAt).Round(time.Hour)
	}
	s := memory.New()
	if got := ttlOf(t, s, newGuard(t, s)); got != watermillguard.DefaultTTL {
		t.Errorf("TTL %v, want the middleware's %v", got, watermillguard.DefaultTTL)
	}
	if got := ttlOf(t, s, newGuard(t, s, guard.WithTTL(3*time.Hour))); got != 3*time.Hour {
		t.Errorf("TTL %v, want the guard's 3h", got)
	}
	if got := ttlOf(t, s, newGuard(t, s, guard.WithTTL(3*time.Hour)), watermillguard.WithGuardOptions(guard.WithTTL(5*time.Hour))); got != 5*time.Hour {
		t.Errorf("TTL %v, want WithGuardOptions' 5h", got)
	}
}

// With an outcome hook of the user's on the guard, the middleware still
// tells a recorded definite error (permanent) from a released one.
func TestUserOutcomeHook(t *testing.T) {
	var seen atomic.Int32
	g := newGuard(t, memory.New(), guard.WithOutcomeHook(func(context.Context, string, *store.Record, guard.Outcome) { seen.Add(1) }))
	mw := newMiddleware(t, g)
	_, err := through(t.Context(), mw, watermill.NewUUID(), nil, func(context.Context, *message.Message) ([]*message.Message, error) {
		return nil, guard.Definite(errors.New("declined"))
	})
	if !watermillguard.IsPermanent(err) {
		t.Errorf("definite error: %v; want permanent", err)
	}
	_, err = through(t.Context(), mw, watermill.NewUUID(), nil, func(context.Context, *message.Message) ([]*message.Message, error) {
		return nil, errors.New("flaky")
	})
	if err == nil || watermillguard.IsPermanent(err) {
		t.Errorf("released error: %v; want it returned, not permanent", err)
	}
	if seen.Load() != 1 {
		t.Errorf("the user's hook ran %d times, want 1 (the recorded definite error)", seen.Load())
	}
}

// A custom definite-error predicate given through WithGuardOptions.
func TestDefiniteErrorsPredicate(t *testing.T) {
	errRejected := errors.New("order rejected")
	mw := newMiddleware(t, newGuard(t, memory.New()), watermillguard.WithGuardOptions(guard.WithDefiniteErrors(func(err error) bool { return errors.Is(err, errRejected) })))
	var runs atomic.Int32
	body := func(context.Context, *message.Message) ([]*message.Message, error) {
		runs.Add(1)
		return nil, fmt.Errorf("validating: %w", errRejected)
	}
	key := watermill.NewUUID()
	for i := range 2 {
		if _, err := through(t.Context(), mw, key, nil, body); !watermillguard.IsPermanent(err) {
			t.Errorf("delivery %d: %v; want permanent", i, err)
		}
	}
	if runs.Load() != 1 {
		t.Errorf("the handler ran %d times, want 1", runs.Load())
	}
}

// IDEMGUARD_DISABLED makes the middleware a pass-through.
func TestDisabled(t *testing.T) {
	t.Setenv(adapt.DisableEnv, "true")
	mw := newMiddleware(t, newGuard(t, memory.New()))
	var runs atomic.Int32
	for range 2 {
		if _, err := through(t.Context(), mw, "m-1", nil, func(context.Context, *message.Message) ([]*message.Message, error) {
			runs.Add(1)
			return nil, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if runs.Load() != 2 {
		t.Errorf("the handler ran %d times, want 2", runs.Load())
	}
}

func TestInvalidOptions(t *testing.T) {
	g := newGuard(t, memory.New())
	for name, opts := range map[string][]watermillguard.Option{
		"empty scope":          {watermillguard.WithScope("")},
		"empty field":          {watermillguard.WithKeyFromMetadata("")},
		"bad key path":         {watermillguard.WithKeyFromPayload(), watermillguard.WithGuardOptions(guard.WithKeyPath("order_id["))},
		"bad validation":       {watermillguard.WithGuardOptions(guard.WithPayloadValidation("a[?"))},
		"negative lease":       {watermillguard.WithGuardOptions(guard.WithLease(-time.Second))},
		"negative wait budget": {watermillguard.WithGuardOptions(guard.WithWait(-1))},
		"nil codec (guard's)":  {watermillguard.WithGuardOptions(guard.WithCodec(nil))},
		"a codec":              {watermillguard.WithGuardOptions(guard.WithCodec(adapt.JSON))},
		"an explicit key":      {watermillguard.WithGuardOptions(guard.WithKey("k"))},
		"an explicit key, the key from the payload": {watermillguard.WithKeyFromPayload(), watermillguard.WithGuardOptions(guard.WithKey("k"))},
		"a claim token": {watermillguard.WithGuardOptions(adapt.WithClaimToken("t"))},
	} {
		if _, err := watermillguard.Middleware(g, opts...); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := watermillguard.Middleware(nil); err == nil {
		t.Error("nil guard: no error")
	}
	defer func() {
		if recover() == nil {
			t.Error("Middleware with an invalid option did not panic")
		}
	}()
	watermillguard.MustMiddleware(g, watermillguard.WithScope(""))
}
