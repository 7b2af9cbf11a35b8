package grpcguard_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemguard/idemguard/grpcguard"
	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/internal/testing/reqcount"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/memory"
)

func TestFirstRunsDuplicateReplays(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store, n *reqcount.Counter) {
		p := &payments{}
		conn := start(t, newGuard(t, s), p)
		first := charge(t, conn, "key-1", "100 EUR")
		if first.err != nil || first.value != "charge 1: 100 EUR" || statusOf(first) != "executed" {
			t.Fatalf("first: %q %v %v", first.value, first.err, first.header)
		}
		if _, err := time.Parse(time.RFC3339, first.header.Get(grpcguard.ExpiresMetadata)[0]); err != nil {
			t.Errorf("first expiry: %v", err)
		}
		if n != nil {
			if n.Total() != 2 {
				t.Errorf("first call sent %s, want the guard's floor of 2 round trips", n)
			}
			n.Reset()
		}
		replay := charge(t, conn, "key-1", "100 EUR")
		if replay.err != nil || replay.value != first.value || statusOf(replay) != "replayed" {
			t.Errorf("replay: %q %v %v; want %q replayed", replay.value, replay.err, replay.header, first.value)
		}
		if len(replay.header.Get(grpcguard.ExpiresMetadata)) != 1 {
			t.Errorf("replay without an expiry: %v", replay.header)
		}
		if n != nil {
			if n.Total() != 1 {
				t.Errorf("replay sent %s, want the guard's floor of 1 round trip", n)
			}
		}
		if got := p.runs.Load(); got != 1 || p.keyed.Load() != 1 {
			t.Errorf("handler ran %d times (%d with guard.KeyFromContext), want 1", got, p.keyed.Load())
		}
	})
}

func TestDifferentRequestSameKey(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store, _ *reqcount.Counter) {
		p := &payments{}
		conn := start(t, newGuard(t, s), p)
		charge(t, conn, "key-2", "100 EUR")
		r := charge(t, conn, "key-2", "999 EUR")
		wantRefusal(t, r.err, codes.FailedPrecondition, grpcguard.ReasonKeyReused)
		if got := p.runs.Load(); got != 1 {
			t.Errorf("handler ran %d times, want 1", got)
		}
	})
}

func TestConcurrentDuplicatesReject(t *testing.T) {
	const clients = 100
	eachStore(t, func(t *testing.T, s store.Store, _ *reqcount.Counter) {
		release := make(chan struct{})
		var once sync.Once
		p := &payments{block: func() {
			select {
			case <-release:
			case <-time.After(30 * time.Second):
				t.Error("the duplicates were not all turned away within 30 s")
			}
		}}
		conn := start(t, newGuard(t, s), p, grpcguard.WithGuardOptions(guard.WithWait(0), guard.WithLease(5*time.Second)))
		var aborted atomic.Int64
		replies := make([]reply, clients)
		var wg sync.WaitGroup
		for i := range clients {
			wg.Go(func() {
				replies[i] = charge(t, conn, "key-3", "5 EUR")
				if status.Code(replies[i].err) == codes.Aborted && aborted.Add(1) == clients-1 {
					once.Do(func() { close(release) })
				}
			})
		}
		wg.Wait()
		once.Do(func() { close(release) })
		ok := 0
		for _, r := range replies {
			if r.err == nil {
				ok++
				continue
			}
			st := wantRefusal(t, r.err, codes.Aborted, grpcguard.ReasonInProgress)
			var delay time.Duration
			for _, d := range st.Details() {
				if ri, isRI := d.(*errdetails.RetryInfo); isRI {
					delay = ri.GetRetryDelay().AsDuration()
				}
			}
			if delay < time.Second || delay > 7*time.Second {
				t.Errorf("RetryInfo delay %v, want whole seconds in [1 s, 7 s]", delay)
			}
		}
		if ok != 1 || aborted.Load() != clients-1 || p.runs.Load() != 1 {
			t.Errorf("%d ok, %d aborted, %d runs; want 1, %d, 1", ok, aborted.Load(), p.runs.Load(), clients-1)
		}
	})
}

func TestConcurrentDuplicatesWait(t *testing.T) {
	const clients = 100
	eachStore(t, func(t *testing.T, s store.Store, _ *reqcount.Counter) {
		var arrived atomic.Int64
		p := &payments{block: func() {
			deadline := time.Now().Add(30 * time.Second)
			for arrived.Load() < clients && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			time.Sleep(100 * time.Millisecond)
		}}
		icpt := grpcguard.MustUnaryServerInterceptor(newGuard(t, s))
		count := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			arrived.Add(1)
			return h(ctx, req)
		}
		conn := startWith(t, p, []grpc.ServerOption{grpc.ChainUnaryInterceptor(count, icpt)})
		replies := make([]reply, clients)
		var wg sync.WaitGroup
		for i := range clients {
			wg.Go(func() { replies[i] = charge(t, conn, "key-4", "7 EUR") })
		}
		wg.Wait()
		statuses := map[string]int{}
		for _, r := range replies {
			if r.err != nil || r.value != "charge 1: 7 EUR" {
				t.Errorf("reply %q %v, want the one run's", r.value, r.err)
			}
			statuses[statusOf(r)]++
		}
		if p.runs.Load() != 1 || statuses["executed"] != 1 || statuses["replayed"] != clients-1 {
			t.Errorf("%d runs, statuses %v; want 1 run, 1 executed, %d replayed", p.runs.Load(), statuses, clients-1)
		}
	})
}

func TestErrorPolicy(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store, _ *reqcount.Counter) {
		p := &payments{fail: func(run int64, req string) error {
			switch {
			case req == "flaky" && run == 1:
				return status.Error(codes.Unavailable, "downstream timeout")
			case req == "declined":
				st, _ := status.New(codes.FailedPrecondition, "card declined").WithDetails(&errdetails.ErrorInfo{Reason: "DECLINED", Domain: "payments"})
				return st.Err()
			}
			return nil
		}}
		conn := start(t, newGuard(t, s), p, grpcguard.WithCodePolicy(clientErrors))
		// A server failure releases the key: the retry runs again.
		r1 := charge(t, conn, "key-5", "flaky")
		if status.Code(r1.err) != codes.Unavailable || statusOf(r1) != "released" {
			t.Errorf("first: %v %v, want Unavailable, released", r1.err, r1.header)
		}
		r2 := charge(t, conn, "key-5", "flaky")
		if r2.err != nil || r2.value != "charge 2: flaky" || statusOf(r2) != "executed" {
			t.Errorf("retry: %q %v %v, want the second run", r2.value, r2.err, r2.header)
		}
		// A client error the policy stores is the answer: stored and
		// replayed with its details.
		d1 := charge(t, conn, "key-6", "declined")
		d2 := charge(t, conn, "key-6", "declined")
		if statusOf(d1) != "executed" || statusOf(d2) != "replayed" {
			t.Errorf("declined: statuses %q, %q", statusOf(d1), statusOf(d2))
		}
		s1, s2 := status.Convert(d1.err), status.Convert(d2.err)
		if s2.Code() != codes.FailedPrecondition || s2.Message() != s1.Message() || len(s2.Details()) != 1 {
			t.Errorf("replayed error %v %v, want %v %v", s2.Code(), s2.Details(), s1.Code(), s1.Details())
		}
		if got := p.runs.Load(); got != 3 {
			t.Errorf("handler ran %d times, want 3", got)
		}
	})
}

// clientErrors stores the codes that map to a 4xx, as the documentation of
// WithCodePolicy shows.
func clientErrors(c codes.Code) bool {
	switch c {
	case codes.InvalidArgument, codes.NotFound, codes.AlreadyExists, codes.PermissionDenied,
		codes.FailedPrecondition, codes.OutOfRange, codes.Unauthenticated:
		return true
	}
	return false
}

func TestMissingOrInvalidKey(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store, n *reqcount.Counter) {
		p := &payments{}
		conn := start(t, newGuard(t, s), p)
		wantRefusal(t, charge(t, conn, "", "x").err, codes.InvalidArgument, grpcguard.ReasonKeyMissing)
		for _, key := range []string{strings.Repeat("k", 257), `"unclosed`, `"a", "b"`} {
			wantRefusal(t, charge(t, conn, key, "x").err, codes.InvalidArgument, grpcguard.ReasonKeyInvalid)
		}
		twice := charge(t, conn, "a", "x", "idempotency-key", "b")
		wantRefusal(t, twice.err, codes.InvalidArgument, grpcguard.ReasonKeyInvalid)
		if p.runs.Load() != 0 || (n != nil && n.Total() != 0) {
			t.Errorf("refused calls ran (%d) or reached the store", p.runs.Load())
		}
	})
}

func TestPrincipals(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store, _ *reqcount.Counter) {
		p := &payments{}
		tenant := func(ctx context.Context) string {
			md, _ := metadata.FromIncomingContext(ctx)
			if v := md.Get("x-tenant"); len(v) == 1 {
				return v[0]
			}
			return ""
		}
		conn := start(t, newGuard(t, s), p, grpcguard.WithPrincipal(tenant))
		a1 := charge(t, conn, "shared", "x", "x-tenant", "a")
		b1 := charge(t, conn, "shared", "x", "x-tenant", "b")
		a2 := charge(t, conn, "shared", "x", "x-tenant", "a")
		b2 := charge(t, conn, "shared", "x", "x-tenant", "b")
		if a1.value != "charge 1: x" || b1.value != "charge 2: x" || a2.value != a1.value || b2.value != b1.value {
			t.Errorf("a: %q %q, b: %q %q; want each tenant its own run, replayed", a1.value, a2.value, b1.value, b2.value)
		}
		wantRefusal(t, charge(t, conn, "shared", "x").err, codes.Unauthenticated, grpcguard.ReasonPrincipalMissing)
	})
}

func TestResponseTooLargeToStore(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store, _ *reqcount.Counter) {
		p := &payments{}
		conn := start(t, newGuard(t, s), p, grpcguard.WithMaxResponseBytes(1024))
		r1 := charge(t, conn, "key-7", "big:1")
		if r1.err != nil || len(r1.value) != 4096 {
			t.Fatalf("first: %d bytes, %v", len(r1.value), r1.err)
		}
		wantRefusal(t, charge(t, conn, "key-7", "big:1").err, codes.AlreadyExists, grpcguard.ReasonResponseUnavailable)
		if got := p.runs.Load(); got != 1 {
			t.Errorf("handler ran %d times, want 1", got)
		}
	})
}

// The client interceptor gives keyless calls a key; gRPC's own retries
// resend it, so a retried call is one call.
func TestClientInterceptor(t *testing.T) {
	p := &payments{fail: func(run int64, _ string) error {
		if run == 1 {
			return status.Error(codes.Unavailable, "try again")
		}
		return nil
	}}
	icpt := grpcguard.MustUnaryServerInterceptor(newGuard(t, memory.New()))
	retry := `{"methodConfig":[{"name":[{"service":"` + serviceName + `"}],"retryPolicy":{"maxAttempts":3,"initialBackoff":"0.01s","maxBackoff":"0.1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}]}`
	conn := startWith(t, p, []grpc.ServerOption{grpc.UnaryInterceptor(icpt)},
		grpc.WithUnaryInterceptor(grpcguard.UnaryClientInterceptor()), grpc.WithDefaultServiceConfig(retry))
	var header metadata.MD
	out := new(wrapperspb.StringValue)
	if err := conn.Invoke(context.Background(), chargeMethod, wrapperspb.String("x"), out, grpc.Header(&header)); err != nil {
		t.Fatal(err)
	}
	if out.GetValue() != "charge 2: x" || p.runs.Load() != 2 {
		t.Errorf("%q after %d runs; want the retry's answer", out.GetValue(), p.runs.Load())
	}
}

func TestMethodsAndOptional(t *testing.T) {
	p := &payments{}
	conn := start(t, newGuard(t, memory.New()), p, grpcguard.WithMethods("/other.Service/Method"))
	if r := charge(t, conn, "", "x"); r.err != nil || statusOf(r) != "" {
		t.Errorf("unguarded method: %v %v", r.err, r.header)
	}
	conn2 := start(t, newGuard(t, memory.New()), p, grpcguard.WithKeyOptional())
	if r := charge(t, conn2, "", "x"); r.err != nil || statusOf(r) != "" {
		t.Errorf("keyless call: %v %v", r.err, r.header)
	}
}

func TestInvalidOptions(t *testing.T) {
	g := newGuard(t, memory.New())
	for name, opt := range map[string]grpcguard.Option{
		"ttl":       grpcguard.WithGuardOptions(guard.WithTTL(0)),
		"wait":      grpcguard.WithGuardOptions(guard.WithWait(-1)),
		"lease":     grpcguard.WithGuardOptions(guard.WithLease(-1)),
		"one key":   grpcguard.WithGuardOptions(guard.WithKey("k")),
		"key path":  grpcguard.WithGuardOptions(guard.WithKeyPath("id")),
		"codec":     grpcguard.WithGuardOptions(guard.WithCodec(adapt.JSON)),
		"methods":   grpcguard.WithMethods("Charge"),
		"length":    grpcguard.WithKeyLength(0, 1),
		"principal": grpcguard.WithPrincipal(nil),
		"policy":    grpcguard.WithCodePolicy(nil),
		"types":     grpcguard.WithTypes(nil),
		"scope":     grpcguard.WithScope(""),
	} {
		if _, err := grpcguard.UnaryServerInterceptor(g, opt); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := grpcguard.UnaryServerInterceptor(nil); err == nil {
		t.Error("nil guard: no error")
	}
}
