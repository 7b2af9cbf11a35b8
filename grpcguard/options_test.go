package grpcguard_test

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/idemguard/idemguard/grpcguard"
	"github.com/idemguard/idemguard/store/memory"
)

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
