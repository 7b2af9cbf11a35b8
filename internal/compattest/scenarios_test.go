package compattest

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemguard/idemguard/grpcguard"
	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/httpguard"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/store"
)

// The scenarios of the golden records: each writes one kind of record
// through the guard and its adapters (write, at the golden clock), and
// reads what it wrote back through them (read, ten minutes later, on the
// records as the golden set keeps them): what a newer build does with
// the records an older one left. write and read make the same call, so
// that they derive the same key.

type order struct {
	ID     string `json:"id"`
	Amount int    `json:"amount"`
	Note   string `json:"note,omitempty"`
}

type receipt struct {
	Charge string `json:"charge"`
	Amount int    `json:"amount"`
	Note   string `json:"note,omitempty"`
}

// env is what a scenario runs with: a guard on the space's store, on a
// clock that stands still, and a count of the functions that ran.
type env struct {
	sp    *space
	clock *stillClock
	base  time.Time // the clock when the records were written
	g     *guard.Guard
	// snap, during write, takes the records written so far, for a
	// scenario that must be caught half way (a call that crashed).
	snap func()

	mu  sync.Mutex
	ran map[string]int // protected by mu
}

func (e *env) run(name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ran == nil {
		e.ran = map[string]int{}
	}
	e.ran[name]++
}

func (e *env) runs(name string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.ran[name]
}

// stillClock is a guard clock that reads a time the test sets; nothing
// scheduled on it ever fires, so no lease is extended behind the test's back.
type stillClock struct {
	mu sync.Mutex
	t  time.Time // protected by mu
}

func (c *stillClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *stillClock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

func (c *stillClock) AfterFunc(time.Duration, func()) func() bool { return func() bool { return true } }

type scenario struct {
	name  string
	tx    bool // needs a store with transactions
	write func(ctx context.Context, e *env) error
	read  func(ctx context.Context, e *env) error
}

// keyed are the options of the guarded calls: a key from the order's ID,
// and its amount checked against the record's payload hash.
var keyed = []guard.CallOption{guard.WithKeyPath("id"), guard.WithPayloadValidation("amount")}

func opts(more ...guard.CallOption) []guard.CallOption {
	return append(append([]guard.CallOption(nil), keyed...), more...)
}

// replayed checks that a call was a replay that did not run its function.
func (e *env) replayed(fn string, out guard.Outcome, err error) error {
	if n := e.runs(fn); n != 0 {
		return fmt.Errorf("the function ran %d times; want a replay", n)
	}
	if out != guard.OutcomeReplayed {
		return fmt.Errorf("outcome %v (%v); want replayed", out, err)
	}
	return nil
}

var scenarios = []scenario{
	{
		// A claim in progress, its lease still running at read time:
		// another call is refused with the holder's lease end.
		name: "in-progress",
		write: func(ctx context.Context, e *env) error {
			cl, _, err := adapt.Obtain(ctx, e.g, "golden-claim", order{ID: "o-1", Amount: 100}, opts(guard.WithLease(2*time.Hour))...)
			if err == nil && cl == nil {
				err = errors.New("Claim found a record; want a claim")
			}
			return err
		},
		read: func(ctx context.Context, e *env) error {
			_, _, err := adapt.Execute(ctx, e.g, "golden-claim", order{ID: "o-1", Amount: 100}, func(context.Context) (receipt, error) {
				e.run("claim")
				return receipt{}, nil
			}, opts(guard.WithWait(0))...)
			var busy *adapt.InProgressError
			switch {
			case e.runs("claim") != 0:
				return errors.New("the function ran over a live claim")
			case !errors.As(err, &busy):
				return fmt.Errorf("call over a live claim = %v; want guard.ErrInProgress", err)
			case !busy.LeaseExpiresAt.Equal(e.base.Add(2 * time.Hour)):
				return fmt.Errorf("the holder's lease ends at %v; want %v", busy.LeaseExpiresAt, e.base.Add(2*time.Hour))
			}
			return nil
		},
	},
	{
		// A value, replayed; the same key with another amount is refused.
		name: "value",
		write: func(ctx context.Context, e *env) error {
			_, err := guard.Do(ctx, e.g, "golden-value", order{ID: "o-2", Amount: 250}, func(context.Context) (receipt, error) {
				return receipt{Charge: "ch_2", Amount: 250}, nil
			}, keyed...)
			return err
		},
		read: func(ctx context.Context, e *env) error {
			v, out, err := adapt.Execute(ctx, e.g, "golden-value", order{ID: "o-2", Amount: 250}, func(context.Context) (receipt, error) {
				e.run("value")
				return receipt{}, nil
			}, keyed...)
			if err := e.replayed("value", out, err); err != nil {
				return err
			}
			if err != nil || v != (receipt{Charge: "ch_2", Amount: 250}) {
				return fmt.Errorf("replay = %+v, %v; want the stored receipt", v, err)
			}
			_, err = guard.Do(ctx, e.g, "golden-value", order{ID: "o-2", Amount: 999}, func(context.Context) (receipt, error) {
				e.run("value")
				return receipt{}, nil
			}, keyed...)
			if !errors.Is(err, guard.ErrPayloadMismatch) || e.runs("value") != 0 {
				return fmt.Errorf("another amount under the key = %v; want guard.ErrPayloadMismatch", err)
			}
			return nil
		},
	},
	{
		// A definite error, replayed as that error.
		name: "definite-error",
		write: func(ctx context.Context, e *env) error {
			_, err := guard.Do(ctx, e.g, "golden-error", order{ID: "o-3", Amount: 300}, func(context.Context) (receipt, error) {
				return receipt{}, guard.Definite(errors.New("card declined"))
			}, keyed...)
			if err == nil || err.Error() != "card declined" {
				return fmt.Errorf("the call returned %v; want its definite error", err)
			}
			return nil
		},
		read: func(ctx context.Context, e *env) error {
			_, out, err := adapt.Execute(ctx, e.g, "golden-error", order{ID: "o-3", Amount: 300}, func(context.Context) (receipt, error) {
				e.run("error")
				return receipt{}, nil
			}, keyed...)
			if rerr := e.replayed("error", out, err); rerr != nil {
				return rerr
			}
			if err == nil || err.Error() != "card declined" || !guard.IsDefinite(err) {
				return fmt.Errorf("replay = %v; want the definite error \"card declined\"", err)
			}
			return nil
		},
	},
	{
		// A result that could not be stored: the call completed, and its
		// replays say so without running it again.
		name: "unavailable",
		write: func(ctx context.Context, e *env) error {
			_, err := guard.Do(ctx, e.g, "golden-unavailable", order{ID: "o-4", Amount: 400}, func(context.Context) (any, error) {
				return make(chan int), nil // not JSON
			}, keyed...)
			return err
		},
		read: func(ctx context.Context, e *env) error {
			_, out, err := adapt.Execute(ctx, e.g, "golden-unavailable", order{ID: "o-4", Amount: 400}, func(context.Context) (any, error) {
				e.run("unavailable")
				return nil, nil
			}, keyed...)
			if e.runs("unavailable") != 0 || out != guard.OutcomeReplayed || !errors.Is(err, guard.ErrResultUnavailable) {
				return fmt.Errorf("replay = %v, %v (%d runs); want guard.ErrResultUnavailable and no run", out, err, e.runs("unavailable"))
			}
			return nil
		},
	},
	{
		// A result over the stores' compression threshold (16 KiB):
		// gzipped where the store compresses.
		name: "large",
		write: func(ctx context.Context, e *env) error {
			_, err := guard.Do(ctx, e.g, "golden-large", order{ID: "o-5", Amount: 500}, func(context.Context) (receipt, error) {
				return receipt{Charge: "ch_5", Amount: 500, Note: largeNote}, nil
			}, keyed...)
			return err
		},
		read: func(ctx context.Context, e *env) error {
			v, out, err := adapt.Execute(ctx, e.g, "golden-large", order{ID: "o-5", Amount: 500}, func(context.Context) (receipt, error) {
				e.run("large")
				return receipt{}, nil
			}, keyed...)
			if err := e.replayed("large", out, err); err != nil {
				return err
			}
			if err != nil || v != (receipt{Charge: "ch_5", Amount: 500, Note: largeNote}) {
				return fmt.Errorf("replay of the large receipt = %.60v…, %v", v, err)
			}
			return nil
		},
	},
	{
		// A call that crashed after its step completed: its claim in
		// progress with a lease that has lapsed at read time, and the
		// step's record. The next call takes over and replays the step.
		name: "step",
		write: func(ctx context.Context, e *env) error {
			_, err := guard.Do(ctx, e.g, "golden-step", order{ID: "o-6", Amount: 600}, func(ctx context.Context) (receipt, error) {
				if _, err := guard.Step(ctx, "reserve", func(context.Context) (receipt, error) {
					return receipt{Charge: "res_6", Amount: 600}, nil
				}); err != nil {
					return receipt{}, err
				}
				e.snap() // the crash: what is stored now is what the next call finds
				return receipt{}, errCrashed
			}, opts(guard.WithLease(time.Minute))...)
			if !errors.Is(err, errCrashed) {
				return fmt.Errorf("the call returned %v; want the crash", err)
			}
			return nil
		},
		read: func(ctx context.Context, e *env) error {
			v, out, err := adapt.Execute(ctx, e.g, "golden-step", order{ID: "o-6", Amount: 600}, func(ctx context.Context) (receipt, error) {
				e.run("step-call")
				r, err := guard.Step(ctx, "reserve", func(context.Context) (receipt, error) {
					e.run("reserve")
					return receipt{}, nil
				})
				return receipt{Charge: "ch_6", Amount: r.Amount, Note: r.Charge}, err
			}, opts(guard.WithLease(time.Minute))...)
			switch {
			case err != nil || out != guard.OutcomeExecuted:
				return fmt.Errorf("the call after the crash = %v, %v; want it run", out, err)
			case e.runs("reserve") != 0:
				return errors.New("the completed step ran again")
			case v != (receipt{Charge: "ch_6", Amount: 600, Note: "res_6"}):
				return fmt.Errorf("the call got %+v from its step; want the stored reservation", v)
			}
			return nil
		},
	},
	{
		// httpguard's stored response: status, headers, body.
		name: "http",
		write: func(ctx context.Context, e *env) error {
			rec := serveHTTP(ctx, e, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("Location", "/charges/ch_7")
				w.WriteHeader(http.StatusCreated)
				fmt.Fprint(w, `{"charge":"ch_7"}`)
			})
			if rec.Code != http.StatusCreated {
				return fmt.Errorf("the first request got %d %s", rec.Code, rec.Body)
			}
			return nil
		},
		read: func(ctx context.Context, e *env) error {
			rec := serveHTTP(ctx, e, func(w http.ResponseWriter, r *http.Request) {
				e.run("http")
				w.WriteHeader(http.StatusTeapot)
			})
			h := rec.Header()
			switch {
			case e.runs("http") != 0:
				return errors.New("the handler ran again")
			case rec.Code != http.StatusCreated || rec.Body.String() != `{"charge":"ch_7"}`:
				return fmt.Errorf("replay = %d %q; want 201 and the stored body", rec.Code, rec.Body)
			case h.Get("Content-Type") != "application/json" || h.Get("Location") != "/charges/ch_7" || h.Get("Idempotency-Key-Status") != "replayed":
				return fmt.Errorf("replayed headers %v; want the stored Content-Type and Location, and Idempotency-Key-Status: replayed", h)
			}
			return nil
		},
	},
	{
		// grpcguard's stored response message.
		name: "grpc",
		write: func(ctx context.Context, e *env) error {
			resp, err := callGRPC(ctx, e, "o-8", func(context.Context, any) (any, error) { return wrapperspb.String("ch_8"), nil })
			if err != nil || resp.(*wrapperspb.StringValue).GetValue() != "ch_8" {
				return fmt.Errorf("the first call = %v, %v", resp, err)
			}
			return nil
		},
		read: func(ctx context.Context, e *env) error {
			resp, err := callGRPC(ctx, e, "o-8", func(context.Context, any) (any, error) {
				e.run("grpc")
				return wrapperspb.String("again"), nil
			})
			if e.runs("grpc") != 0 || err != nil || !proto.Equal(resp.(proto.Message), wrapperspb.String("ch_8")) {
				return fmt.Errorf("replay = %v, %v (%d runs); want the stored message and no run", resp, err, e.runs("grpc"))
			}
			return nil
		},
	},
	{
		// grpcguard's stored error status (a code its policy stores).
		name: "grpc-error",
		write: func(ctx context.Context, e *env) error {
			_, err := callGRPC(ctx, e, "o-9", func(context.Context, any) (any, error) {
				return nil, status.Error(codes.NotFound, "no such order")
			})
			if status.Code(err) != codes.NotFound {
				return fmt.Errorf("the first call = %v; want NotFound", err)
			}
			return nil
		},
		read: func(ctx context.Context, e *env) error {
			_, err := callGRPC(ctx, e, "o-9", func(context.Context, any) (any, error) {
				e.run("grpc-error")
				return wrapperspb.String("found"), nil
			})
			if st := status.Convert(err); e.runs("grpc-error") != 0 || st.Code() != codes.NotFound || st.Message() != "no such order" {
				return fmt.Errorf("replay = %v (%d runs); want the stored NotFound and no run", err, e.runs("grpc-error"))
			}
			return nil
		},
	},
	{
		// A completion written inside the store's transaction (DoTx).
		name: "tx",
		tx:   true,
		write: func(ctx context.Context, e *env) error {
			_, _, err := e.sp.execTx(ctx, e.g, "golden-tx", order{ID: "o-10", Amount: 1000}, func(context.Context) (receipt, error) {
				return receipt{Charge: "ch_10", Amount: 1000}, nil
			}, keyed...)
			return err
		},
		read: func(ctx context.Context, e *env) error {
			v, out, err := e.sp.execTx(ctx, e.g, "golden-tx", order{ID: "o-10", Amount: 1000}, func(context.Context) (receipt, error) {
				e.run("tx")
				return receipt{}, nil
			}, keyed...)
			if err := e.replayed("tx", out, err); err != nil {
				return err
			}
			if err != nil || v != (receipt{Charge: "ch_10", Amount: 1000}) {
				return fmt.Errorf("replay = %+v, %v; want the stored receipt", v, err)
			}
			return nil
		},
	},
}

var errCrashed = errors.New("crashed after the step")

// largeNote makes a receipt just over the stores' compression threshold
// (16 KiB) that compresses well.
var largeNote = strings.Repeat("the same line of a long receipt, again. ", 420)

// serveHTTP sends the scenario's request through httpguard to handler.
func serveHTTP(ctx context.Context, e *env, handler http.HandlerFunc) *httptest.ResponseRecorder {
	h := httpguard.MustMiddleware(e.g, httpguard.WithScope("golden-http"))(handler)
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/charges", strings.NewReader(`{"order":"o-7","amount":700}`))
	req.Header.Set("Idempotency-Key", `"golden-http-7"`)
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// callGRPC sends a unary call for order id through grpcguard's
// interceptor to handler.
func callGRPC(ctx context.Context, e *env, id string, handler grpc.UnaryHandler) (any, error) {
	in := grpcguard.MustUnaryServerInterceptor(e.g, grpcguard.WithScope("golden-grpc"),
		grpcguard.WithCodePolicy(func(c codes.Code) bool { return c == codes.NotFound }))
	ctx = metadata.NewIncomingContext(ctx, metadata.Pairs("idempotency-key", "golden-grpc-"+id))
	return in(ctx, wrapperspb.String(id), &grpc.UnaryServerInfo{FullMethod: "/golden.v1.Charges/Charge"}, handler)
}

// storeRecord is a record as JSON, for the golden files: what the current
// code must read from the golden item. A result longer than a kilobyte is
// kept as its length and SHA-256.
type storeRecord struct {
	Status         string     `json:"status"`
	Token          string     `json:"token"`
	PayloadHash    string     `json:"payload_hash,omitempty"`
	ResultKind     string     `json:"result_kind"`
	Result         *blob      `json:"result,omitempty"`
	ExpiresAt      time.Time  `json:"expires_at"`
	LeaseExpiresAt *time.Time `json:"lease_expires_at,omitempty"`
}

// maxShownResult is the longest result a golden record shows as it is.
const maxShownResult = 1 << 10

func recordJSON(r *store.Record) storeRecord {
	out := storeRecord{
		Status:      r.Status.String(),
		Token:       r.Token,
		PayloadHash: r.PayloadHash,
		ResultKind:  r.ResultKind.String(),
		ExpiresAt:   r.ExpiresAt.UTC(),
	}
	if len(r.Result) > 0 {
		b := blob(r.Result)
		if len(b) > maxShownResult {
			b = blob(fmt.Sprintf("%d bytes, SHA-256 %x", len(r.Result), sha256.Sum256(r.Result)))
		}
		out.Result = &b
	}
	if !r.LeaseExpiresAt.IsZero() {
		l := r.LeaseExpiresAt.UTC()
		out.LeaseExpiresAt = &l
	}
	return out
}

// sameRecord reports how got differs from want, or "".
func sameRecord(got, want storeRecord) string {
	var d []string
	if got.Status != want.Status || got.Token != want.Token || got.PayloadHash != want.PayloadHash || got.ResultKind != want.ResultKind {
		d = append(d, fmt.Sprintf("status/token/hash/kind %s/%s/%s/%s, want %s/%s/%s/%s",
			got.Status, got.Token, got.PayloadHash, got.ResultKind, want.Status, want.Token, want.PayloadHash, want.ResultKind))
	}
	if (got.Result == nil) != (want.Result == nil) || (got.Result != nil && *got.Result != *want.Result) {
		d = append(d, fmt.Sprintf("result %.80q, want %.80q", deref(got.Result), deref(want.Result)))
	}
	if !got.ExpiresAt.Equal(want.ExpiresAt) {
		d = append(d, fmt.Sprintf("expires %v, want %v", got.ExpiresAt, want.ExpiresAt))
	}
	if (got.LeaseExpiresAt == nil) != (want.LeaseExpiresAt == nil) || (got.LeaseExpiresAt != nil && !got.LeaseExpiresAt.Equal(*want.LeaseExpiresAt)) {
		d = append(d, fmt.Sprintf("lease %v, want %v", got.LeaseExpiresAt, want.LeaseExpiresAt))
	}
	return strings.Join(d, "; ")
}

func deref(b *blob) string {
	if b == nil {
		return "<none>"
	}
	return string(*b)
}

// newEnv is an env on sp at the clock t, whose guard's store is s.
func newEnv(t *testing.T, sp *space, s store.Store, at time.Time) *env {
	t.Helper()
	e := &env{sp: sp, clock: &stillClock{t: at}, base: at, snap: func() {}}
	g, err := guard.New(s, adapt.WithClock(e.clock), guard.WithTTL(24*time.Hour), guard.WithLease(5*time.Minute),
		guard.WithLogger(discardLogger))
	if err != nil {
		t.Fatal(err)
	}
	e.g = g
	return e
}
