package watermillguard_test

import (
	"context"
	"errors"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/internal/testing/teststores"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/memory"
	"github.com/idemguard/idemguard/watermillguard"
)

// deadClaim claims key under the middleware's default scope with a lease
// of a second that nobody extends: the claim of a consumer that died in
// the handler.
func deadClaim(t *testing.T, s store.Store, key string) {
	t.Helper()
	if _, _, err := adapt.Obtain(t.Context(), newGuard(t, s), watermillguard.DefaultScope, nil, guard.WithKey(key), guard.WithLease(time.Second)); err != nil {
		t.Fatal(err)
	}
}

// A delivery that finds its message claimed by a consumer that died
// waits, by default, until the claim's lease can have lapsed (its end plus
// the guard's clock skew), polling the store with backoff, and then runs
// the handler: it is not handed back to the broker to be redelivered in a
// loop.
func TestCrashedHolderIsWaitedFor(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store, n counter) {
		g := newGuard(t, s, guard.WithClockSkew(100*time.Millisecond))
		key := watermill.NewUUID()
		deadClaim(t, s, key)
		if n != nil {
			n.Reset()
		}
		var runs atomic.Int32
		_, err := through(t.Context(), newMiddleware(t, g), key, nil, func(context.Context, *message.Message) ([]*message.Message, error) {
			runs.Add(1)
			return nil, nil
		})
		if err != nil {
			t.Fatalf("the delivery returned %v; want it to wait for the dead consumer's lease and run the handler", err)
		}
		if runs.Load() != 1 {
			t.Errorf("the handler ran %d times, want 1", runs.Load())
		}
		// A lease of a second, polled with backoff from 20 ms to a second:
		// a handful of claims, then the completion.
		if n != nil && n.Total() > 20 {
			t.Errorf("%d round trips to the store (%s) while waiting for a one-second lease; want a few polls, not a loop", n.Total(), n)
		}
	})
}

// An in-progress duplicate is logged once per key and lease, below
// warning level: a consumer that meets the same held message on every
// redelivery writes one line, not one per delivery.
func TestInProgressLoggedOncePerLease(t *testing.T) {
	s := memory.New()
	var logs teststores.Logs
	mw := newMiddleware(t, newGuard(t, s), watermillguard.WithLogger(logs.Logger()),
		watermillguard.WithGuardOptions(guard.WithWait(0)))
	held := func(key string) {
		t.Helper()
		if _, _, err := adapt.Obtain(t.Context(), newGuard(t, s), watermillguard.DefaultScope, nil, guard.WithKey(key), guard.WithLease(time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	never := func(context.Context, *message.Message) ([]*message.Message, error) {
		t.Error("a duplicate ran the handler")
		return nil, nil
	}
	a, b := watermill.NewUUID(), watermill.NewUUID()
	held(a)
	held(b)
	for range 5 {
		for _, key := range []string{a, b} {
			if _, err := through(t.Context(), mw, key, nil, never); !errors.Is(err, guard.ErrInProgress) {
				t.Fatalf("duplicate of %s under guard.WithWait(0): %v; want guard.ErrInProgress", key, err)
			}
		}
	}
	perKey := map[string]int{}
	for _, r := range logs.Records(t) {
		if r["level"] != "INFO" {
			t.Errorf("logged at %v: %v; want INFO", r["level"], r)
		}
		id, _ := r[string(watermillguard.MessageIDKey)].(string)
		perKey[id]++
	}
	if perKey[a] != 1 || perKey[b] != 1 || len(perKey) != 2 {
		t.Errorf("records per message: %v; want one for each of %s and %s", perKey, a, b)
	}

	// The default, which waits: one record for the wait on a dead
	// consumer's claim.
	logs = teststores.Logs{}
	waiting := newMiddleware(t, newGuard(t, s, guard.WithClockSkew(100*time.Millisecond)), watermillguard.WithLogger(logs.Logger()))
	key := watermill.NewUUID()
	deadClaim(t, s, key)
	if _, err := through(t.Context(), waiting, key, nil, func(context.Context, *message.Message) ([]*message.Message, error) { return nil, nil }); err != nil {
		t.Fatal(err)
	}
	if recs := logs.Records(t); len(recs) != 1 || recs[0]["level"] != "INFO" {
		t.Errorf("waiting for a dead consumer's claim logged %v; want one INFO record", recs)
	}
}

// The lease of a message's claim is short by default, so that a consumer
// that dies holding it stalls the message for seconds, not a minute; the
// guard extends it while the handler runs. A lease given to guard.New or
// through WithGuardOptions wins.
func TestDefaultLease(t *testing.T) {
	s := memory.New()
	leaseOf := func(t *testing.T, g *guard.Guard, opts ...watermillguard.Option) time.Duration {
		t.Helper()
		key := watermill.NewUUID()
		var lease time.Duration
		_, err := through(t.Context(), newMiddleware(t, g, opts...), key, nil, func(context.Context, *message.Message) ([]*message.Message, error) {
			k, _, err := g.Key(watermillguard.DefaultScope, nil, guard.WithKey(key))
			if err != nil {
				return nil, err
			}
			rec, err := s.Get(t.Context(), k)
			if err != nil {
				return nil, err
			}
			lease = time.Until(rec.LeaseExpiresAt)
			return nil, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return lease
	}
	if got := leaseOf(t, newGuard(t, s)); got > 15*time.Second || got < 5*time.Second {
		t.Errorf("default lease of a message's claim: %v left; want between 5 and 15 s", got.Round(time.Millisecond))
	}
	if got := leaseOf(t, newGuard(t, s, guard.WithLease(40*time.Second))); got < 30*time.Second {
		t.Errorf("lease with guard.New(guard.WithLease(40s)): %v left; want the guard's", got.Round(time.Millisecond))
	}
	if got := leaseOf(t, newGuard(t, s, guard.WithLease(40*time.Second)), watermillguard.WithGuardOptions(guard.WithLease(25*time.Second))); got < 20*time.Second || got > 25*time.Second {
		t.Errorf("lease with WithGuardOptions(guard.WithLease(25s)): %v left; want it", got.Round(time.Millisecond))
	}
}

// Concurrent deliveries of one message in one process share one run by
// default: here two subscriptions of one process (two routers, each with
// a consumer group of its own, the handler of the same name) get the same
// message at once. The handler runs once, the other delivery waits for it
// and publishes the same produced message, and neither is nacked.
func TestConcurrentDeliveriesShareOneRun(t *testing.T) {
	eachBroker(t, func(t *testing.T, b *broker) {
		g := newGuard(t, memory.New())
		in, out := b.topic("orders"), b.topic("shipments")
		var entered, nacked, runs atomic.Int32
		both := make(chan struct{})
		for _, group := range []string{"east", "west"} {
			r, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
			if err != nil {
				t.Fatal(err)
			}
			r.AddMiddleware(
				func(h message.HandlerFunc) message.HandlerFunc {
					return func(msg *message.Message) ([]*message.Message, error) {
						if entered.Add(1) == 2 {
							close(both)
						}
						produced, err := h(msg)
						if err != nil {
							nacked.Add(1)
						}
						return produced, err
					}
				},
				watermillguard.MustMiddleware(g),
			)
			r.AddHandler("fulfil", in, b.sub(t, group), out, keepOpen(b.pub), func(msg *message.Message) ([]*message.Message, error) {
				runs.Add(1)
				select { // until the other delivery is in the middleware too
				case <-both:
				case <-time.After(10 * time.Second):
					return nil, errors.New("the other delivery did not come within 10 s")
				}
				time.Sleep(50 * time.Millisecond) // and has found the run
				shipped := message.NewMessage(watermill.NewUUID(), []byte(`{"shipped":true}`))
				return []*message.Message{shipped}, nil
			})
			runRouter(t, r)
		}
		if err := b.pub.Publish(in, message.NewMessage(watermill.NewUUID(), []byte(`{"order":1}`))); err != nil {
			t.Fatal(err)
		}
		var shipped []*message.Message
		eventually(t, "both deliveries publish the shipment", func() bool {
			shipped = b.published(t, out)
			return len(shipped) >= 2
		})
		if runs.Load() != 1 || nacked.Load() != 0 {
			t.Errorf("the handler ran %d times and %d deliveries were nacked; want one run, no nack", runs.Load(), nacked.Load())
		}
		if len(shipped) != 2 || shipped[0].UUID != shipped[1].UUID {
			t.Errorf("published %v; want the one shipment twice, under one UUID", uuids(shipped))
		}
	})
}

// Acceptance 2 of issue 32, the crashed consumer: on Redis Streams, two
// consumer processes set up as the docs tell a new user, one SIGKILLed in
// the handler after its side effect while it holds the message's claim,
// and the message published again (a publisher's retry, which reaches the
// other consumer at once). The other consumer waits for the dead one's
// lease instead of spinning: few rejected redeliveries (409,071 before),
// a log of kilobytes (114 MB before), the message completed within the
// lease and a few seconds of the kill (62 s before), its side effect once.
//
// With WATERMILLGUARD_CRASHED_BEFORE naming a test binary built from an
// earlier version of this package (with crashed_test.go in it), the same
// run measures that version too, with the docs' settings and with the
// subscriber's defaults, and logs both (docs/benchmarks.md).
func TestCrashedConsumerIsNotARetryStorm(t *testing.T) {
	if testing.Short() {
		t.Skip("starts consumer processes")
	}
	if before := os.Getenv("WATERMILLGUARD_CRASHED_BEFORE"); before != "" {
		for _, broker := range []string{brokerDefaults, brokerDocs} {
			t.Logf("before (%s), subscriber settings %q: %v", before, broker, runCrashedConsumers(t, before, broker))
		}
		t.Logf("this build, subscriber defaults: %v", runCrashedConsumers(t, os.Args[0], brokerDefaults))
	}
	f := runCrashedConsumers(t, os.Args[0], brokerDocs)
	t.Logf("this build, the docs' subscriber settings: %v", f)
	lease := watermillguard.DefaultLease
	if f.Rejected > 50 {
		t.Errorf("%d rejected redeliveries, want at most 50", f.Rejected)
	}
	if f.LogBytes > 100<<10 {
		t.Errorf("the consumers logged %s, want at most 100 KB", byteSize(f.LogBytes))
	}
	if f.Completed > lease+5*time.Second {
		t.Errorf("the message completed %v after the kill, want within the lease and 5 s (%v)", f.Completed.Round(100*time.Millisecond), lease+5*time.Second)
	}
	if f.Effects != 1 {
		t.Errorf("the message's side effect happened %d times, want once", f.Effects)
	}
}
