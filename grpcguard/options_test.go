package grpcguard_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemguard/idemguard/grpcguard"
	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/testing/reqcount"
	"github.com/idemguard/idemguard/internal/testing/teststores"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/memory"
)

// With WithCacheErrors every error but the retry-later codes is the
// answer: a server failure, which releases the key by default
// (TestOnlyResponsesStoredByDefault), is stored and replayed with its code
// and message, and the handler runs once.
func TestCacheErrors(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store, _ *reqcount.Counter) {
		p := &payments{fail: func(run int64, _ string) error {
			return status.Errorf(codes.Internal, "downstream failure on run %d", run)
		}}
		conn := start(t, newGuard(t, s), p, grpcguard.WithCacheErrors())
		r1 := charge(t, conn, "key-all", "x")
		r2 := charge(t, conn, "key-all", "x")
		if statusOf(r1) != "executed" || statusOf(r2) != "replayed" {
			t.Errorf("statuses %q, %q; want executed, replayed", statusOf(r1), statusOf(r2))
		}
		s1, s2 := status.Convert(r1.err), status.Convert(r2.err)
		if s1.Code() != codes.Internal || s2.Code() != codes.Internal || s2.Message() != "downstream failure on run 1" {
			t.Errorf("errors %v and %v, want the first run's Internal twice", r1.err, r2.err)
		}
		if len(r2.trailer.Get(grpcguard.ExpiresMetadata)) != 1 {
			t.Errorf("replayed error without an expiry in its trailer: %v", r2.trailer)
		}
		if got := p.runs.Load(); got != 1 {
			t.Errorf("handler ran %d times, want 1", got)
		}
	})
}

// WithSkip passes the calls its predicate names through unguarded: here
// the calls to Charge that carry x-internal. The predicate gets the call's
// context and full method name; the calls it does not skip are guarded.
func TestSkip(t *testing.T) {
	var mu sync.Mutex
	var methods []string // protected by mu
	skip := func(ctx context.Context, fullMethod string) bool {
		mu.Lock()
		methods = append(methods, fullMethod)
		mu.Unlock()
		md, _ := metadata.FromIncomingContext(ctx)
		return fullMethod == chargeMethod && len(md.Get("x-internal")) > 0
	}
	p := &payments{}
	conn := start(t, newGuard(t, memory.New()), p, grpcguard.WithSkip(skip))
	for i := range 2 {
		r := charge(t, conn, "key-skip", "x", "x-internal", "1")
		if r.err != nil || r.value != fmt.Sprintf("charge %d: x", i+1) || statusOf(r) != "" {
			t.Errorf("skipped call %d: %q %v %v, want a fresh run without status metadata", i, r.value, r.err, r.header)
		}
	}
	if r := charge(t, conn, "", "x", "x-internal", "1"); r.err != nil {
		t.Errorf("skipped call without a key: %v", r.err)
	}
	wantRefusal(t, charge(t, conn, "", "x").err, codes.InvalidArgument, grpcguard.ReasonKeyMissing)
	if r := charge(t, conn, "key-skip", "x"); statusOf(r) != "executed" {
		t.Errorf("call not skipped: %q %v %v, want it guarded", r.value, r.err, r.header)
	}
	if got := p.runs.Load(); got != 4 || p.keyed.Load() != 1 {
		t.Errorf("handler ran %d times (%d guarded), want 4 (1)", got, p.keyed.Load())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(methods) != 5 || slices.IndexFunc(methods, func(m string) bool { return m != chargeMethod }) >= 0 {
		t.Errorf("the predicate saw methods %q, want %s for each of the 5 calls", methods, chargeMethod)
	}
}

// WithKeyMetadata reads the key from another metadata key (given in any
// case: gRPC metadata keys are lowercase); the default one is then not
// read.
func TestKeyMetadata(t *testing.T) {
	p := &payments{}
	conn := start(t, newGuard(t, memory.New()), p, grpcguard.WithKeyMetadata("X-Request-Key"))
	st := wantRefusal(t, charge(t, conn, "key-md", "x").err, codes.InvalidArgument, grpcguard.ReasonKeyMissing)
	if !strings.Contains(st.Message(), "x-request-key") {
		t.Errorf("refusal %q does not name the metadata key x-request-key", st.Message())
	}
	r1 := charge(t, conn, "", "x", "x-request-key", "key-md")
	r2 := charge(t, conn, "", "x", "x-request-key", "key-md")
	if r1.err != nil || statusOf(r1) != "executed" || statusOf(r2) != "replayed" || r2.value != r1.value {
		t.Errorf("keyed in x-request-key: %q %v %q, then %q %v %q; want executed, then the same value replayed",
			r1.value, r1.err, statusOf(r1), r2.value, r2.err, statusOf(r2))
	}
	if got := p.runs.Load(); got != 1 {
		t.Errorf("handler ran %d times, want 1", got)
	}
}

// WithKeyPattern: a key the pattern does not match is refused with
// InvalidArgument before the handler runs; one it matches is guarded.
func TestKeyPattern(t *testing.T) {
	p := &payments{}
	conn := start(t, newGuard(t, memory.New()), p, grpcguard.WithKeyPattern(regexp.MustCompile(`^ord_[0-9]{6}$`)))
	for _, key := range []string{"order-1", "ord_12345", "ord_1234567", `"ord_12345x"`} {
		st := wantRefusal(t, charge(t, conn, key, "x").err, codes.InvalidArgument, grpcguard.ReasonKeyInvalid)
		if !strings.Contains(st.Message(), "required format") {
			t.Errorf("key %s: refusal %q does not say the key has the wrong format", key, st.Message())
		}
	}
	if got := p.runs.Load(); got != 0 {
		t.Errorf("handler ran %d times for refused keys, want 0", got)
	}
	r1 := charge(t, conn, "ord_123456", "x")
	r2 := charge(t, conn, `"ord_123456"`, "x")
	if r1.err != nil || statusOf(r1) != "executed" || statusOf(r2) != "replayed" {
		t.Errorf("matching key, bare then quoted: %v %q, %v %q; want executed, replayed", r1.err, statusOf(r1), r2.err, statusOf(r2))
	}
}

// WithStrictKey refuses a bare key and accepts its quoted form.
func TestStrictKey(t *testing.T) {
	p := &payments{}
	conn := start(t, newGuard(t, memory.New()), p, grpcguard.WithStrictKey())
	st := wantRefusal(t, charge(t, conn, "bare", "x").err, codes.InvalidArgument, grpcguard.ReasonKeyInvalid)
	if !strings.Contains(st.Message(), "double quotes") {
		t.Errorf("refusal %q does not say the key must be quoted", st.Message())
	}
	if r := charge(t, conn, `"quoted"`, "x"); r.err != nil || statusOf(r) != "executed" {
		t.Errorf("quoted key: %v %q, want executed", r.err, statusOf(r))
	}
	if got := p.runs.Load(); got != 1 {
		t.Errorf("handler ran %d times, want 1", got)
	}
}

// WithFingerprint decides which calls under one key are the same one.
// Here it is the method and the request's amount (before ";"): another
// note replays, another amount fails with FailedPrecondition. A
// fingerprint that fails fails the call with Internal before the handler
// runs.
func TestFingerprint(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store, _ *reqcount.Counter) {
		var mu sync.Mutex
		var seen []string // "method request" of each call fingerprinted; protected by mu
		byAmount := func(fullMethod string, req any) (string, error) {
			v := req.(*wrapperspb.StringValue).GetValue()
			mu.Lock()
			seen = append(seen, fullMethod+" "+v)
			mu.Unlock()
			amount, _, _ := strings.Cut(v, ";")
			return fullMethod + " " + amount, nil
		}
		p := &payments{}
		conn := start(t, newGuard(t, s), p, grpcguard.WithFingerprint(byAmount))
		first := charge(t, conn, "key-fp", "100 EUR;web")
		again := charge(t, conn, "key-fp", "100 EUR;phone")
		if first.err != nil || first.value != "charge 1: 100 EUR;web" || statusOf(again) != "replayed" || again.value != first.value {
			t.Errorf("another note: %q %v, then %q %v %q; want the first run replayed", first.value, first.err, again.value, again.err, statusOf(again))
		}
		wantRefusal(t, charge(t, conn, "key-fp", "999 EUR;web").err, codes.FailedPrecondition, grpcguard.ReasonKeyReused)
		if got := p.runs.Load(); got != 1 {
			t.Errorf("handler ran %d times, want 1", got)
		}
		mu.Lock()
		want := []string{chargeMethod + " 100 EUR;web", chargeMethod + " 100 EUR;phone", chargeMethod + " 999 EUR;web"}
		if !slices.Equal(seen, want) {
			t.Errorf("the fingerprint saw %q, want %q", seen, want)
		}
		mu.Unlock()

		broken := start(t, newGuard(t, s), p, grpcguard.WithFingerprint(func(string, any) (string, error) {
			return "", errors.New("no amount")
		}))
		if r := charge(t, broken, "key-fp-err", "x"); status.Code(r.err) != codes.Internal || !strings.Contains(status.Convert(r.err).Message(), "no amount") {
			t.Errorf("failing fingerprint: %v, want Internal with its error", r.err)
		}
		if got := p.runs.Load(); got != 1 {
			t.Errorf("handler ran %d times after a failing fingerprint, want 1", got)
		}
	})
}

// WithFingerprint(nil) turns the fingerprint off: a key reused with
// another request replays the first response.
func TestFingerprintOff(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store, _ *reqcount.Counter) {
		p := &payments{}
		conn := start(t, newGuard(t, s), p, grpcguard.WithFingerprint(nil))
		first := charge(t, conn, "key-nofp", "100 EUR")
		other := charge(t, conn, "key-nofp", "999 EUR")
		if first.err != nil || other.err != nil || statusOf(other) != "replayed" || other.value != "charge 1: 100 EUR" {
			t.Errorf("another request: %q %v %q, want the first response replayed", other.value, other.err, statusOf(other))
		}
		if got := p.runs.Load(); got != 1 {
			t.Errorf("handler ran %d times, want 1", got)
		}
	})
}

// unrecorded is a store whose completions fail: the handler runs, and its
// response cannot be recorded.
type unrecorded struct{ store.Store }

func (unrecorded) Complete(context.Context, *store.Record) error {
	return errors.New("connection reset by peer")
}

// WithLogger: a response the handler returned but the store could not
// record is returned as it is, without status metadata, and the
// interceptor logs it at level Error on its logger, with the method and
// the error.
func TestLogger(t *testing.T) {
	var logs teststores.Logs
	p := &payments{}
	// A 1 s lease: the guard retries the completion while the lease holds.
	g := newGuard(t, unrecorded{memory.New()}, guard.WithLogger(slog.New(slog.DiscardHandler)))
	conn := start(t, g, p, grpcguard.WithGuardOptions(guard.WithLease(time.Second)), grpcguard.WithLogger(logs.Logger()))
	r := charge(t, conn, "key-log", "x")
	if r.err != nil || r.value != "charge 1: x" || statusOf(r) != "" {
		t.Errorf("call: %q %v, status %q; want the handler's response without status metadata", r.value, r.err, statusOf(r))
	}
	recs := logs.Records(t)
	if len(recs) != 1 {
		t.Fatalf("the interceptor logged %d records, want 1: %v", len(recs), recs)
	}
	rec := recs[0]
	msg, _ := rec["msg"].(string)
	errText, _ := rec["error"].(string)
	if rec["level"] != "ERROR" || !strings.Contains(msg, "not recorded") || rec["method"] != chargeMethod || !strings.Contains(errText, "connection reset by peer") {
		t.Errorf("log record %v: want level ERROR, a message that says the response was not recorded, method %s and the store's error", rec, chargeMethod)
	}
}
