package grpcguard_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemguard/idemguard/grpcguard"
	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/testing/reqcount"
	"github.com/idemguard/idemguard/internal/testing/teststores"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/memory"
)

// failWith is a payments server whose every run fails with code, or
// succeeds for codes.OK.
func failWith(code codes.Code) *payments {
	return &payments{fail: func(run int64, _ string) error {
		if code == codes.OK {
			return nil
		}
		return status.Errorf(code, "run %d failed", run)
	}}
}

// Only responses are stored by default, as httpguard stores only
// successful responses: a handler's error releases the key and the retry
// runs again.
func TestOnlyResponsesStoredByDefault(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store, _ *reqcount.Counter) {
		g := newGuard(t, s)
		for _, code := range []codes.Code{codes.OK, codes.InvalidArgument, codes.NotFound, codes.FailedPrecondition,
			codes.PermissionDenied, codes.Internal, codes.Unavailable, codes.ResourceExhausted} {
			p := failWith(code)
			conn := start(t, g, p)
			key := "code-" + code.String()
			r1 := charge(t, conn, key, "x")
			r2 := charge(t, conn, key, "x")
			want1, want2, runs := "released", "released", int64(2)
			if code == codes.OK {
				want1, want2, runs = "executed", "replayed", 1
			}
			if status.Code(r1.err) != code || status.Code(r2.err) != code || statusOf(r1) != want1 || statusOf(r2) != want2 || p.runs.Load() != runs {
				t.Errorf("%v: %v (%s) then %v (%s) after %d runs; want %s then %s after %d",
					code, r1.err, statusOf(r1), r2.err, statusOf(r2), p.runs.Load(), want1, want2, runs)
			}
		}
	})
}

// With errors cached, the codes that ask the client to retry later are
// still never stored.
func TestCachedErrorsNeverStoreRetryLater(t *testing.T) {
	g := newGuard(t, memory.New())
	for code, stored := range map[codes.Code]bool{
		codes.InvalidArgument: true, codes.FailedPrecondition: true, codes.Internal: true, codes.Unknown: true,
		codes.Canceled: false, codes.DeadlineExceeded: false, codes.ResourceExhausted: false, codes.Aborted: false, codes.Unavailable: false,
	} {
		p := failWith(code)
		conn := start(t, g, p, grpcguard.WithCacheErrors())
		key := "cached-" + code.String()
		charge(t, conn, key, "x")
		r := charge(t, conn, key, "x")
		want, runs := "released", int64(2)
		if stored {
			want, runs = "replayed", 1
		}
		if statusOf(r) != want || p.runs.Load() != runs {
			t.Errorf("%v: the retry is %q after %d runs, want %q after %d", code, statusOf(r), p.runs.Load(), want, runs)
		}
	}
}

// burst sends n concurrent duplicates through icpt to a handler that
// holds the key until all have arrived, and returns how many succeeded.
func burst(t *testing.T, icpt grpc.UnaryServerInterceptor, n int) (ok int, runs int64) {
	t.Helper()
	var arrived atomic.Int64
	p := &payments{block: func() {
		for deadline := time.Now().Add(20 * time.Second); arrived.Load() < int64(n) && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(100 * time.Millisecond)
	}}
	count := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		arrived.Add(1)
		return h(ctx, req)
	}
	conn := startWith(t, p, []grpc.ServerOption{grpc.ChainUnaryInterceptor(count, icpt)})
	replies := make([]reply, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { replies[i] = charge(t, conn, "burst", "7 EUR") })
	}
	wg.Wait()
	for _, r := range replies {
		if r.err == nil {
			ok++
		}
	}
	return ok, p.runs.Load()
}

// A duplicate that arrives while the first call runs waits for its
// response by default.
func TestDuplicatesWaitByDefault(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store, _ *reqcount.Counter) {
		if ok, runs := burst(t, grpcguard.MustUnaryServerInterceptor(newGuard(t, s)), 10); ok != 10 || runs != 1 {
			t.Errorf("%d of 10 calls succeeded after %d runs; want all after one run", ok, runs)
		}
	})
}

// What the user configured on the guard reaches the interceptor's calls.
func TestGuardDefaultsReachInterceptor(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store, _ *reqcount.Counter) {
		g := newGuard(t, s, guard.WithWait(10*time.Second), guard.WithTTL(time.Hour))
		if ok, runs := burst(t, grpcguard.MustUnaryServerInterceptor(g), 10); ok != 10 || runs != 1 {
			t.Errorf("guard.WithWait: %d of 10 calls succeeded after %d runs; want all after one run", ok, runs)
		}
		start0 := time.Now()
		r := charge(t, start(t, g, &payments{}), "ttl", "x")
		v := r.header.Get(grpcguard.ExpiresMetadata)
		if len(v) != 1 {
			t.Fatalf("no expiry: %v", r.header)
		}
		exp, err := time.Parse(time.RFC3339, v[0])
		if err != nil {
			t.Fatal(err)
		}
		if d := exp.Sub(start0); d < time.Hour-2*time.Second || d > time.Hour+2*time.Second {
			t.Errorf("guard.WithTTL(1h): the record expires in %v", d)
		}
	})
}

// Callers with different credentials never share a record: without
// WithPrincipal, the authorization metadata (hashed) is part of the key.
func TestCallersDoNotShareKeys(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store, _ *reqcount.Counter) {
		p := &payments{}
		conn := start(t, newGuard(t, s), p)
		alice := charge(t, conn, "shared", "x", "authorization", "Bearer alice")
		bob := charge(t, conn, "shared", "x", "authorization", "Bearer bob")
		again := charge(t, conn, "shared", "x", "authorization", "Bearer alice")
		if alice.value != "charge 1: x" || bob.value != "charge 2: x" || again.value != alice.value || statusOf(again) != "replayed" {
			t.Errorf("alice %q, bob %q, alice again %q (%s); want two runs, alice's replayed", alice.value, bob.value, again.value, statusOf(again))
		}
	})
}

// Keys of up to 256 characters are accepted.
func TestKeysUpTo256(t *testing.T) {
	conn := start(t, newGuard(t, memory.New()), &payments{})
	if r := charge(t, conn, strings.Repeat("k", 256), "x"); r.err != nil {
		t.Errorf("a 256-character key: %v", r.err)
	}
	wantRefusal(t, charge(t, conn, strings.Repeat("k", 257), "x").err, codes.InvalidArgument, grpcguard.ReasonKeyInvalid)
}

// idempotency-key-expires is the same on the first response and on every
// replay, on every store.
func TestExpiresSameOnEveryReplay(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store, _ *reqcount.Counter) {
		conn := start(t, newGuard(t, s), &payments{})
		want := charge(t, conn, "expires", "x").header.Get(grpcguard.ExpiresMetadata)
		for i := range 3 {
			r := charge(t, conn, "expires", "x")
			if got := r.header.Get(grpcguard.ExpiresMetadata); len(got) != 1 || len(want) != 1 || got[0] != want[0] || statusOf(r) != "replayed" {
				t.Errorf("replay %d: expires %q (%s), first %q", i, got, statusOf(r), want)
			}
		}
	})
}

// A store failure that becomes Unavailable is logged with its cause.
func TestStoreFailureLogged(t *testing.T) {
	var logs teststores.Logs
	conn := start(t, newGuard(t, failingStore{memory.New()}), &payments{}, grpcguard.WithLogger(logs.Logger()))
	wantRefusal(t, charge(t, conn, "k-503", "x").err, codes.Unavailable, grpcguard.ReasonStoreUnavailable)
	found := false
	for _, rec := range logs.Records(t) {
		errText, _ := rec["error"].(string)
		found = found || strings.Contains(errText, "connection refused")
	}
	if !found {
		t.Errorf("log records %v: none has the store's error", logs.Records(t))
	}
}

type failingStore struct{ store.Store }

func (failingStore) Acquire(context.Context, *store.Record, time.Time) (*store.Record, error) {
	return nil, fmt.Errorf("dial tcp 127.0.0.1:6379: connection refused")
}

// stepPayments charges in a guard.Step, then fails its first run with
// Unavailable.
type stepPayments struct{ charges, runs atomic.Int64 }

func (p *stepPayments) Charge(ctx context.Context, req *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
	ch, err := guard.Step(ctx, "charge", func(context.Context) (string, error) {
		return fmt.Sprintf("ch_%d", p.charges.Add(1)), nil
	})
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if p.runs.Add(1) == 1 {
		return nil, status.Error(codes.Unavailable, "the ledger is down")
	}
	return wrapperspb.String(ch), nil
}

// A guard.Step inside a handler replays after Unavailable released the
// call: the retry succeeds and the charge happened once.
func TestStepReplaysAfterUnavailable(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store, _ *reqcount.Counter) {
		p := &stepPayments{}
		conn := start(t, newGuard(t, s), p)
		if r := charge(t, conn, "step", "x"); status.Code(r.err) != codes.Unavailable {
			t.Fatalf("first: %v", r.err)
		}
		r := charge(t, conn, "step", "x")
		if r.err != nil || r.value != "ch_1" || p.charges.Load() != 1 {
			t.Errorf("retry: %q %v after %d charges; want ch_1 after one charge", r.value, r.err, p.charges.Load())
		}
	})
}

// The order of precedence: WithGuardOptions over guard.New's defaults
// over the interceptor's own (a TTL of 24 h, wait mode).
func TestGuardOptionsPrecedence(t *testing.T) {
	ttl := func(g *guard.Guard, opts ...grpcguard.Option) time.Duration {
		t.Helper()
		start0 := time.Now()
		v := charge(t, start(t, g, &payments{}, opts...), "ttl", "x").header.Get(grpcguard.ExpiresMetadata)
		if len(v) != 1 {
			t.Fatalf("expiry metadata %q", v)
		}
		exp, err := time.Parse(time.RFC3339, v[0])
		if err != nil {
			t.Fatal(err)
		}
		return exp.Sub(start0).Round(time.Minute)
	}
	if got := ttl(newGuard(t, memory.New())); got != 24*time.Hour {
		t.Errorf("default TTL %v, want 24h", got)
	}
	if got := ttl(newGuard(t, memory.New(), guard.WithTTL(time.Hour)), grpcguard.WithGuardOptions(guard.WithTTL(2*time.Hour))); got != 2*time.Hour {
		t.Errorf("WithGuardOptions(WithTTL(2h)) over guard.New(WithTTL(1h)): TTL %v", got)
	}
	if ok, runs := burst(t, grpcguard.MustUnaryServerInterceptor(newGuard(t, memory.New(), guard.WithWait(0))), 5); ok != 1 || runs != 1 {
		t.Errorf("guard.New(WithWait(0)): %d of 5 calls succeeded after %d runs; want one", ok, runs)
	}
	if ok, _ := burst(t, grpcguard.MustUnaryServerInterceptor(newGuard(t, memory.New(), guard.WithWait(0)), grpcguard.WithGuardOptions(guard.WithWait(10*time.Second))), 5); ok != 5 {
		t.Errorf("WithGuardOptions(WithWait) over guard.New(WithWait(0)): %d of 5 calls succeeded", ok)
	}
}

// WithSharedKeys: callers share keys whatever their authorization.
func TestSharedKeys(t *testing.T) {
	p := &payments{}
	conn := start(t, newGuard(t, memory.New()), p, grpcguard.WithSharedKeys())
	a := charge(t, conn, "public", "x", "authorization", "Bearer alice")
	b := charge(t, conn, "public", "x", "authorization", "Bearer bob")
	if b.value != a.value || statusOf(b) != "replayed" {
		t.Errorf("bob got %q (%s), want alice's %q replayed", b.value, statusOf(b), a.value)
	}
}
