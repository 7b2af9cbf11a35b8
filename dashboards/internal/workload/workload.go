// Package workload drives the library through every outcome the operations
// dashboard charts — executed, replayed (from the store and from the local
// cache), shared, in progress, waited for, payload mismatches, errors, store
// errors, lease extensions and losses, a claim taken over after its lease
// lapsed, batches, and the HTTP and gRPC
// adapters' problem responses — with a meter provider the caller gives, so
// that the series the dashboard queries are the series the library really
// emits.
package workload

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/metric"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemguard/idemguard/grpcguard"
	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/httpguard"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/memory"
)

// Options tune a Workload.
type Options struct {
	// StoreLatency, if set, is how long each store call of the guards on
	// the real clock takes (a sleep before the in-memory call), so that a
	// rendered latency panel looks like a networked store's. Zero: the
	// in-memory store's own speed.
	StoreLatency func() time.Duration
}

// Workload holds the guards, stores and servers of a run. Rounds add to
// the same meter provider, so counters grow from round to round.
type Workload struct {
	opts  Options
	clock *fakeClock
	// Guards on the real clock over one store.
	cached, plain, other, waiter, validating *guard.Guard
	// A guard whose store fails every claim.
	flaky *guard.Guard
	// Guards on a fake clock over a store of their own: lease extensions
	// and a lost lease without waiting for real time.
	leased, taker *guard.Guard

	httpSrv  *httptest.Server
	grpcSrv  *grpc.Server
	grpcConn *grpc.ClientConn
	gate     *gate // holds the handlers' "slow" requests

	seq int
}

// New builds a Workload whose guards and adapters record with mp.
func New(mp metric.MeterProvider, opts Options) (*Workload, error) {
	w := &Workload{opts: opts, clock: &fakeClock{clockwork.NewFakeClockAt(time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC))}}
	quiet := guard.WithLogger(slog.New(slog.DiscardHandler))
	meter := guard.WithMeterProvider(mp)
	var s store.Store = memory.New()
	if opts.StoreLatency != nil {
		s = &slowStore{Store: s, delay: opts.StoreLatency}
	}
	var err error
	mk := func(s store.Store, o ...guard.Option) *guard.Guard {
		if err != nil {
			return nil
		}
		var g *guard.Guard
		g, err = guard.New(s, append([]guard.Option{quiet, meter}, o...)...)
		return g
	}
	w.cached = mk(s, guard.WithCache(1024, 0))
	w.plain = mk(s)
	w.other = mk(s)
	w.waiter = mk(s, guard.WithWait(5*time.Second), adapt.WithWaitBackoff(time.Millisecond, 5*time.Millisecond))
	w.validating = mk(s, guard.WithKeyPath("id"), guard.WithPayloadValidation("amount"))
	w.flaky = mk(&flakyStore{Store: memory.New()})
	fake := memory.New()
	w.leased = mk(fake, adapt.WithClock(w.clock), guard.WithLease(30*time.Second))
	w.taker = mk(fake, adapt.WithClock(w.clock), guard.WithLease(30*time.Second))
	if err != nil {
		return nil, err
	}
	if err := w.serve(mp, s, quiet, meter); err != nil {
		w.Close()
		return nil, err
	}
	return w, nil
}

// serve starts the HTTP and gRPC servers on loopback, each behind its
// OpenTelemetry instrumentation (otelhttp, otelgrpc) and the adapter.
func (w *Workload) serve(mp metric.MeterProvider, s store.Store, opts ...guard.Option) error {
	w.gate = new(gate)
	g, err := guard.New(s, opts...)
	if err != nil {
		return err
	}
	payments := http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if bytes.HasPrefix(body, []byte("slow")) {
			w.gate.block()
		}
		rw.Header().Set("Content-Type", "application/json")
		rw.WriteHeader(http.StatusCreated)
		fmt.Fprintf(rw, "{\"charged\": %q}\n", body)
	})
	// A duplicate of a running request is answered at once (409, Aborted)
	// rather than after the adapters' default wait, so that the problem
	// panels have their series.
	w.httpSrv = httptest.NewServer(otelhttp.NewHandler(httpguard.MustMiddleware(g, httpguard.WithGuardOptions(guard.WithWait(0)))(payments), "payments", otelhttp.WithMeterProvider(mp)))

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	w.grpcSrv = grpc.NewServer(
		grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithMeterProvider(mp))),
		grpc.UnaryInterceptor(grpcguard.MustUnaryServerInterceptor(g, grpcguard.WithGuardOptions(guard.WithWait(0)))),
	)
	w.grpcSrv.RegisterService(&paymentsDesc, &grpcPayments{gate: w.gate})
	go w.grpcSrv.Serve(lis)
	w.grpcConn, err = grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	return err
}

// Close stops the servers.
func (w *Workload) Close() {
	if w.httpSrv != nil {
		w.httpSrv.Close()
	}
	if w.grpcConn != nil {
		w.grpcConn.Close()
	}
	if w.grpcSrv != nil {
		w.grpcSrv.Stop()
	}
}

type order struct {
	ID     string `json:"id"`
	Amount int    `json:"amount"`
}

func (w *Workload) next(prefix string) string {
	w.seq++
	return fmt.Sprintf("%s-%06d", prefix, w.seq)
}

var errDeclined = errors.New("card declined")

// Round runs every scenario once, with n fresh keys where a scenario takes
// several (n ≥ 1; a larger n makes the round's rates larger). It returns an
// error when a scenario did not end as it should.
func (w *Workload) Round(ctx context.Context, n int) error {
	n = max(n, 1)
	for _, step := range []func(context.Context, int) error{
		w.executeAndReplay, w.shared, w.inProgressAndWait, w.mismatch, w.failures,
		w.extendAndLoseLease, w.batches, w.http, w.grpc,
	} {
		if err := step(ctx, n); err != nil {
			return err
		}
	}
	return nil
}

func expect(what string, got, want guard.Outcome, err error) error {
	if got != want {
		return fmt.Errorf("workload: %s ended %v (%v), want %v", what, got, err, want)
	}
	return nil
}

// executeAndReplay: n executed calls, their replays from the store (a guard
// without a cache) and from the local cache, and one unguarded call.
func (w *Workload) executeAndReplay(ctx context.Context, n int) error {
	one := func(context.Context) (int, error) { return 1, nil }
	for range n {
		id := w.next("charge")
		for _, c := range []struct {
			what string
			g    *guard.Guard
			want guard.Outcome
		}{
			{"a first call", w.cached, guard.OutcomeExecuted},
			{"a retry, from the store", w.plain, guard.OutcomeReplayed},
			{"a retry, from the cache", w.cached, guard.OutcomeReplayed},
		} {
			if _, out, err := adapt.Execute(ctx, c.g, "charge", id, one); out != c.want {
				return expect(c.what, out, c.want, err)
			}
		}
	}
	_, out, err := adapt.Execute(ctx, w.plain, "charge", map[string]any{}, one)
	return expect("a call with an empty key", out, guard.OutcomeUnguarded, err)
}

// shared: a duplicate joins a concurrent call with the same key in the same
// process and shares its result.
func (w *Workload) shared(ctx context.Context, _ int) error {
	id := w.next("charge")
	inside, release := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		guard.Do(ctx, w.waiter, "charge", id, func(context.Context) (int, error) { close(inside); <-release; return 1, nil })
	}()
	<-inside
	done := make(chan guard.Outcome, 1)
	go func() {
		_, out, _ := adapt.Execute(ctx, w.waiter, "charge", id, func(context.Context) (int, error) { return 2, nil })
		done <- out
	}()
	time.Sleep(10 * time.Millisecond) // let the duplicate join
	close(release)
	wg.Wait()
	out := <-done
	if out != guard.OutcomeShared && out != guard.OutcomeReplayed {
		return fmt.Errorf("workload: a concurrent duplicate ended %v, want shared or replayed", out)
	}
	return nil
}

// inProgressAndWait: while a call holds a key, a duplicate in another
// process (another guard) is turned away in Reject mode and, in Wait mode,
// waits and gets the holder's result.
func (w *Workload) inProgressAndWait(ctx context.Context, _ int) error {
	id := w.next("ship")
	inside, release := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		guard.Do(ctx, w.plain, "ship", id, func(context.Context) (int, error) { close(inside); <-release; return 1, nil })
	}()
	<-inside
	_, out, err := adapt.Execute(ctx, w.other, "ship", id, func(context.Context) (int, error) { return 2, nil })
	if !errors.Is(err, guard.ErrInProgress) {
		close(release)
		wg.Wait()
		return fmt.Errorf("workload: a duplicate in Reject mode ended %v, %v; want ErrInProgress", out, err)
	}
	time.AfterFunc(20*time.Millisecond, func() { close(release) })
	_, out, err = adapt.Execute(ctx, w.waiter, "ship", id, func(context.Context) (int, error) { return 3, nil })
	wg.Wait()
	return expect("a duplicate in Wait mode", out, guard.OutcomeReplayed, err)
}

// mismatch: a key reused with another payload.
func (w *Workload) mismatch(ctx context.Context, _ int) error {
	id := w.next("pay")
	one := func(context.Context) (int, error) { return 1, nil }
	if _, err := guard.Do(ctx, w.validating, "pay", order{ID: id, Amount: 100}, one); err != nil {
		return err
	}
	_, err := guard.Do(ctx, w.validating, "pay", order{ID: id, Amount: 250}, one)
	if !errors.Is(err, guard.ErrPayloadMismatch) {
		return fmt.Errorf("workload: a reused key with another payload: %v, want ErrPayloadMismatch", err)
	}
	return nil
}

// failures: a function that fails, and a store that fails.
func (w *Workload) failures(ctx context.Context, _ int) error {
	if _, err := guard.Do(ctx, w.plain, "charge", w.next("charge"), func(context.Context) (int, error) { return 0, errDeclined }); !errors.Is(err, errDeclined) {
		return fmt.Errorf("workload: a failing function: %v", err)
	}
	if _, err := guard.Do(ctx, w.flaky, "charge", w.next("charge"), func(context.Context) (int, error) { return 1, nil }); !errors.Is(err, guard.ErrStore) {
		return fmt.Errorf("workload: a failing store: %v, want ErrStore", err)
	}
	return nil
}

// extendAndLoseLease, on the fake clock: a call that runs past a third of
// its lease has it extended; a claim whose lease lapses is taken over (a
// takeover, idemguard.claim.taken_over), and its completion then fails
// with ErrLeaseLost (idemguard.lease.lost).
func (w *Workload) extendAndLoseLease(ctx context.Context, _ int) error {
	inside, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := guard.Do(ctx, w.leased, "export", w.next("export"), func(context.Context) (int, error) { close(inside); <-release; return 1, nil })
		done <- err
	}()
	<-inside
	for range 2 { // two extensions, each a third of the lease apart
		w.clock.BlockUntilContext(ctx, 1)
		w.clock.Advance(11 * time.Second)
	}
	w.clock.BlockUntilContext(ctx, 1)
	close(release)
	if err := <-done; err != nil {
		return fmt.Errorf("workload: a long call: %v", err)
	}

	id := w.next("export")
	cl, _, err := adapt.Obtain(ctx, w.leased, "export", id)
	if err != nil || cl == nil {
		return fmt.Errorf("workload: a claim: %v", err)
	}
	w.clock.Advance(45 * time.Second) // past the lease and the clock skew
	if _, out, err := adapt.Execute(ctx, w.taker, "export", id, func(context.Context) (int, error) { return 2, nil }); out != guard.OutcomeExecuted {
		return expect("a takeover", out, guard.OutcomeExecuted, err)
	}
	if _, err := adapt.Complete(ctx, w.leased, *cl, store.ResultValue, []byte("1")); !errors.Is(err, guard.ErrLeaseLost) {
		return fmt.Errorf("workload: completing a claim taken over: %v, want ErrLeaseLost", err)
	}
	return nil
}

// batches: a batch of n new items with a retried one and a reused key, and
// a batch that stops at its first failure, leaving items not run.
func (w *Workload) batches(ctx context.Context, n int) error {
	var in []order
	for range n + 2 {
		in = append(in, order{ID: w.next("settle"), Amount: 10})
	}
	fn := func(_ context.Context, o order) (int, error) {
		if o.Amount < 0 {
			return 0, errDeclined
		}
		return o.Amount, nil
	}
	guard.DoBatch(ctx, w.validating, "settle", in[:2], fn)
	retry := append([]order(nil), in...)
	retry[1].Amount = 99 // reused with another payload
	for _, r := range guard.DoBatch(ctx, w.validating, "settle", retry, fn) {
		if r.Err != nil && !errors.Is(r.Err, guard.ErrPayloadMismatch) {
			return fmt.Errorf("workload: a batch item: %v", r.Err)
		}
	}
	stop := []order{{ID: w.next("settle"), Amount: -1}, {ID: w.next("settle"), Amount: 1}, {ID: w.next("settle"), Amount: 2}}
	res := guard.DoBatch(ctx, w.validating, "settle", stop, fn, guard.WithStopOnError(), guard.WithConcurrency(1))
	if !errors.Is(res[2].Err, guard.ErrBatchStopped) {
		return fmt.Errorf("workload: an item after a batch stopped: %v, want ErrBatchStopped", res[2].Err)
	}
	return nil
}

// http: requests through otelhttp and httpguard: n fresh ones and their
// retries, and one of each problem: no key (400), a key reused with
// another body (422) and a duplicate while the first runs (409).
func (w *Workload) http(ctx context.Context, n int) error {
	post := func(key, body string) (int, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.httpSrv.URL+"/payments", bytes.NewBufferString(body))
		if err != nil {
			return 0, err
		}
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := w.httpSrv.Client().Do(req)
		if err != nil {
			return 0, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	want := func(what string, got, want int, err error) error {
		if err != nil || got != want {
			return fmt.Errorf("workload: HTTP %s: status %d (%v), want %d", what, got, err, want)
		}
		return nil
	}
	for range n {
		key := newKey()
		for _, what := range []string{"request", "retry"} {
			if code, err := post(key, "amount=10"); want(what, code, http.StatusCreated, err) != nil {
				return want(what, code, http.StatusCreated, err)
			}
		}
	}
	key := newKey()
	post(key, "amount=10")
	if code, err := post(key, "amount=99"); code != http.StatusUnprocessableEntity {
		return want("reused key", code, http.StatusUnprocessableEntity, err)
	}
	if code, err := post("", "amount=10"); code != http.StatusBadRequest {
		return want("request without a key", code, http.StatusBadRequest, err)
	}
	return w.duplicate(func(key string) (int, error) { return post(key, "slow") }, http.StatusConflict, http.StatusCreated)
}

// duplicate sends a request that blocks in the handler, then its duplicate,
// which must get conflict; then unblocks the first, which must get ok.
func (w *Workload) duplicate(send func(key string) (int, error), conflict, ok int) error {
	key := newKey()
	entered, release := w.gate.arm()
	first := make(chan error, 1)
	go func() {
		code, err := send(key)
		if err == nil && code != ok {
			err = fmt.Errorf("status %d, want %d", code, ok)
		}
		first <- err
	}()
	<-entered
	code, err := send(key)
	close(release)
	ferr := <-first
	if err != nil || code != conflict {
		return fmt.Errorf("workload: a duplicate of a running request: %d, %v; want %d", code, err, conflict)
	}
	if ferr != nil {
		return fmt.Errorf("workload: the running request: %v", ferr)
	}
	return nil
}

// grpc: calls through otelgrpc and grpcguard, as http does.
func (w *Workload) grpc(ctx context.Context, n int) error {
	call := func(key, v string) (codes.Code, error) {
		cctx := ctx
		if key != "" {
			cctx = metadata.AppendToOutgoingContext(ctx, "idempotency-key", key)
		}
		err := w.grpcConn.Invoke(cctx, chargeMethod, wrapperspb.String(v), new(wrapperspb.StringValue))
		st, ok := status.FromError(err)
		if !ok {
			return codes.Unknown, err
		}
		return st.Code(), nil
	}
	want := func(what string, got, want codes.Code, err error) error {
		if err != nil || got != want {
			return fmt.Errorf("workload: gRPC %s: %v (%v), want %v", what, got, err, want)
		}
		return nil
	}
	for range n {
		key := newKey()
		for _, what := range []string{"call", "retry"} {
			if c, err := call(key, "amount=10"); c != codes.OK {
				return want(what, c, codes.OK, err)
			}
		}
	}
	key := newKey()
	call(key, "amount=10")
	if c, err := call(key, "amount=99"); c != codes.FailedPrecondition {
		return want("reused key", c, codes.FailedPrecondition, err)
	}
	if c, err := call("", "amount=10"); c != codes.InvalidArgument {
		return want("call without a key", c, codes.InvalidArgument, err)
	}
	return w.duplicate(func(key string) (int, error) {
		c, err := call(key, "slow")
		return int(c), err
	}, int(codes.Aborted), int(codes.OK))
}

func newKey() string {
	return fmt.Sprintf("%016x%016x", rand.Uint64(), rand.Uint64())
}

// A handwritten gRPC service with well-known wrapper messages: no generated
// code.
const (
	serviceName  = "idemguard.demo.Payments"
	chargeMethod = "/" + serviceName + "/Charge"
)

type paymentsServer interface {
	Charge(context.Context, *wrapperspb.StringValue) (*wrapperspb.StringValue, error)
}

var paymentsDesc = grpc.ServiceDesc{
	ServiceName: serviceName,
	HandlerType: (*paymentsServer)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Charge",
		Handler: func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			call := func(ctx context.Context, req any) (any, error) {
				return srv.(paymentsServer).Charge(ctx, req.(*wrapperspb.StringValue))
			}
			return interceptor(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: chargeMethod}, call)
		},
	}},
}

type grpcPayments struct{ gate *gate }

func (p *grpcPayments) Charge(_ context.Context, req *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
	if req.GetValue() == "slow" {
		p.gate.block()
	}
	return wrapperspb.String("charged " + req.GetValue()), nil
}

// gate holds the "slow" requests of the HTTP and gRPC handlers until the
// workload releases them.
type gate struct {
	mu      sync.Mutex
	entered chan struct{}
	release chan struct{}
}

// arm makes the next slow request report on entered and wait for release
// to be closed.
func (g *gate) arm() (entered chan struct{}, release chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.entered, g.release = make(chan struct{}, 1), make(chan struct{})
	return g.entered, g.release
}

func (g *gate) block() {
	g.mu.Lock()
	entered, release := g.entered, g.release
	g.mu.Unlock()
	select {
	case entered <- struct{}{}:
	default:
	}
	<-release
}

// fakeClock is a adapt.Clock that moves only when told to.
type fakeClock struct{ *clockwork.FakeClock }

func (c *fakeClock) AfterFunc(d time.Duration, f func()) func() bool {
	return c.FakeClock.AfterFunc(d, f).Stop
}

// flakyStore fails every claim, as a store that cannot be reached does.
type flakyStore struct{ store.Store }

func (flakyStore) Name() string { return "memory" }

func (flakyStore) Acquire(context.Context, *store.Record, time.Time) (*store.Record, error) {
	return nil, errors.New("connection reset by peer")
}

// slowStore delays each store call by delay().
type slowStore struct {
	store.Store
	delay func() time.Duration
}

func (s *slowStore) Name() string { return "memory" }

func (s *slowStore) Acquire(ctx context.Context, rec *store.Record, now time.Time) (*store.Record, error) {
	time.Sleep(s.delay())
	return s.Store.Acquire(ctx, rec, now)
}

func (s *slowStore) Complete(ctx context.Context, rec *store.Record) error {
	time.Sleep(s.delay())
	return s.Store.Complete(ctx, rec)
}

func (s *slowStore) Get(ctx context.Context, key string) (*store.Record, error) {
	time.Sleep(s.delay())
	return s.Store.Get(ctx, key)
}
