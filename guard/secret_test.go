package guard_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/telemetry"
)

// With WithKeySecret the key's hash, and the payload hash, are
// HMAC-SHA-256 under the secret: in the store's key, on spans and in logs
// alike, and the plain SHA-256 of the selection (which anyone could compute
// from a guessed order number) appears nowhere.
func TestKeySecretHidesLowEntropySelections(t *testing.T) {
	secret := []byte("rotate-me-yearly")
	const orderID = "o-1042"
	canonical := []byte(`"` + orderID + `"`) // the RFC 8785 form of the selection
	mac := hmac.New(sha256.New, secret)
	mac.Write(canonical)
	wantHash := hex.EncodeToString(mac.Sum(nil))
	plain := sha256.Sum256(canonical)
	plainHash := hex.EncodeToString(plain[:])
	amount := []byte(`42`)
	mac.Reset()
	mac.Write(amount)
	wantPayload := hex.EncodeToString(mac.Sum(nil))

	h := newOtel()
	var logs bytes.Buffer
	m, _ := newMemory()
	opts := append(h.opts, guard.WithKeySecret(secret), guard.WithKeyPath("id"), guard.WithPayloadValidation("amount"),
		guard.WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	g, err := guard.New(m, opts...)
	if err != nil {
		t.Fatal(err)
	}
	var key string
	if _, err := guard.Do(ctx, g, "charge", order{ID: orderID, Amount: 42}, func(ctx context.Context) (int, error) {
		key, _ = guard.KeyFromContext(ctx)
		return 1, nil
	}); err != nil {
		t.Fatal(err)
	}
	if key != "charge#"+wantHash {
		t.Fatalf("key %q, want charge#HMAC-SHA-256(secret, %s) = %s", key, canonical, wantHash)
	}
	rec := mustRecordOf(t, m, key)
	if rec.PayloadHash != wantPayload {
		t.Errorf("payload hash %q, want the HMAC %q", rec.PayloadHash, wantPayload)
	}
	if k, ph, err := g.Key("charge", order{ID: orderID, Amount: 42}); err != nil || k != key || ph != wantPayload {
		t.Errorf("Guard.Key = %q, %q, %v; want the call's key and payload hash", k, ph, err)
	}
	// A mismatch logs and traces the key hash: the HMAC, never SHA-256.
	if _, err := guard.Do(ctx, g, "charge", order{ID: orderID, Amount: 43}, func(context.Context) (int, error) { return 1, nil }); !errors.Is(err, guard.ErrPayloadMismatch) {
		t.Fatalf("other amount: %v, want ErrPayloadMismatch", err)
	}
	exec := spanNamed(t, h.ended(), telemetry.SpanExecute)
	wantAttr(t, exec, telemetry.KeyHashKey, wantHash)
	var seen []string
	for _, s := range h.ended() {
		for _, a := range s.Attributes() {
			seen = append(seen, a.Value.Emit())
		}
	}
	all := strings.Join(seen, " ") + logs.String()
	if strings.Contains(all, plainHash) {
		t.Errorf("the plain SHA-256 of the selection appears in spans or logs")
	}
	// Another secret gives other keys: its guard does not find the record.
	other, err := guard.New(m, guard.WithKeySecret([]byte("next-year")), guard.WithKeyPath("id"))
	if err != nil {
		t.Fatal(err)
	}
	if k, _, _ := other.Key("charge", order{ID: orderID}); k == key {
		t.Errorf("two secrets give the same key %q", k)
	}
	if _, err := guard.New(m, guard.WithKeySecret(nil)); !errors.Is(err, guard.ErrInvalidOption) {
		t.Errorf("WithKeySecret(nil) = %v, want ErrInvalidOption", err)
	}
}

// WithClockSkew sets how far past a holder's lease end a claimant waits, on
// its own clock, before taking the key over.
func TestClockSkewOption(t *testing.T) {
	for _, tc := range []struct {
		skew     time.Duration
		ahead    time.Duration // the claimant's clock over the holder's
		takeOver bool
	}{
		{5 * time.Second, 3 * time.Second, false},
		{5 * time.Second, 6*time.Second + 500*time.Millisecond, true},
		{0, 1500 * time.Millisecond, true},
	} {
		m := newMemoryStore()
		holderClock, claimantClock := newFakeClock(), newFakeClock()
		claimantClock.Advance(tc.ahead)
		holder := mustGuard(t, m, adapt.WithClock(holderClock), guard.WithLease(time.Second))
		claimant := mustGuard(t, m, adapt.WithClock(claimantClock), guard.WithClockSkew(tc.skew))
		inside, release := make(chan struct{}), make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			guard.Do(ctx, holder, "job", "k", func(context.Context) (int, error) { close(inside); <-release; return 1, nil })
		}()
		<-inside
		// The holder's lease ends 1 s after its claim; the claimant's clock
		// reads ahead past it.
		_, err := guard.Do(ctx, claimant, "job", "k", func(context.Context) (int, error) { return 2, nil })
		if took := err == nil; took != tc.takeOver {
			t.Errorf("skew %v, claimant ahead %v: took over %v (err %v), want %v", tc.skew, tc.ahead, took, err, tc.takeOver)
		}
		close(release)
		<-done
	}
	if _, err := guard.New(newMemoryStore(), guard.WithClockSkew(-time.Second)); !errors.Is(err, guard.ErrInvalidOption) {
		t.Errorf("WithClockSkew(-1s) = %v, want ErrInvalidOption", err)
	}
}
