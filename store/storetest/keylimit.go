package storetest

import (
	"crypto/rand"
	"errors"
	"testing"
	"time"

	"github.com/idemguard/idemguard/store"
)

// cheapKeyLimit is the longest stated key limit the suite checks: a store
// that holds longer keys (Redis, 512 MB) holds every key the guard makes.
const cheapKeyLimit = 1 << 20

// runKeyLimiter checks that a store implementing [store.KeyLimiter] holds
// keys of exactly the length it states: the guard refuses longer ones,
// so a stated limit the store cannot hold would fail every call whose key
// is near it.
func runKeyLimiter(t *testing.T, newStore MakeStore) {
	t.Run("KeyLimiter", func(t *testing.T) {
		s := newStore(t)
		l, ok := s.(store.KeyLimiter)
		if !ok {
			t.Skipf("%T does not implement store.KeyLimiter: the guard sends keys of any length", s)
		}
		n := l.MaxKeyBytes()
		switch {
		case n <= 0:
			t.Skipf("%T states no key limit", s)
		case n > cheapKeyLimit:
			t.Skipf("%T holds keys of up to %d bytes: more than the suite checks", s, n)
		}
		t.Run("LongestKey", func(t *testing.T) { testLongestKey(t, newHarness(t, s), n) })
	})
}

// testLongestKey runs a key of exactly n bytes that does not compress
// (random printable characters) through every method of the store.
func testLongestKey(t *testing.T, h *harness, n int) {
	key := incompressibleKey(n)
	rec := h.claim(key, time.Minute)
	if old, err := h.s.Acquire(h.ctx, rec, h.t0); err != nil || old != nil {
		t.Fatalf("Acquire of a %d-byte key, the length the store states it holds = %v", n, short(err))
	}
	if got, err := h.s.Get(h.ctx, key); err != nil || got.Key != key {
		t.Fatalf("Get of the %d-byte key = %v", n, short(err))
	}
	if old := h.conflict(t, h.claim(key, time.Minute), h.t0); old.Key != key || old.Token != rec.Token {
		t.Errorf("the conflict on a %d-byte key returned %d bytes of key, token %q; want the claim", n, len(old.Key), old.Token)
	}
	if err := h.s.Extend(h.ctx, key, rec.Token, h.t0.Add(2*time.Minute), h.t0.Add(time.Hour)); err != nil {
		t.Fatalf("Extend of a %d-byte key = %v", n, short(err))
	}
	done := *rec
	done.Status, done.Result, done.ExpiresAt = store.StatusCompleted, []byte(`"long"`), h.t0.Add(2*time.Hour)
	if err := h.s.Complete(h.ctx, &done); err != nil {
		t.Fatalf("Complete of a %d-byte key = %v", n, short(err))
	}
	if got, err := h.s.Get(h.ctx, key); err != nil || got.Status != store.StatusCompleted || string(got.Result) != `"long"` {
		t.Errorf("the completed %d-byte key reads back %v", n, short(err))
	}
	if bg, ok := h.s.(store.BatchGetter); ok {
		recs, err := bg.GetMany(h.ctx, []string{key})
		if err != nil && !errors.Is(err, store.ErrSkip) {
			t.Errorf("GetMany of a %d-byte key = %v", n, short(err))
		}
		if err == nil && (len(recs) != 1 || recs[key] == nil || recs[key].Key != key) {
			t.Errorf("GetMany of a %d-byte key returned %d records, not its own", n, len(recs))
		}
	}
	other := incompressibleKey(n)
	claim := h.claim(other, time.Minute)
	if _, err := h.s.Acquire(h.ctx, claim, h.t0); err != nil {
		t.Fatalf("Acquire of another %d-byte key = %v", n, short(err))
	}
	if err := h.s.Release(h.ctx, other, claim.Token); err != nil {
		t.Fatalf("Release of a %d-byte key = %v", n, short(err))
	}
	if _, err := h.s.Get(h.ctx, other); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Get of a released %d-byte key = %v, want ErrNotFound", n, short(err))
	}
}

// short is err's text without the kilobytes of key a store's error may
// quote.
func short(err error) string {
	if err == nil {
		return "<nil>"
	}
	s := err.Error()
	if len(s) > 300 {
		s = s[:150] + " … " + s[len(s)-150:]
	}
	return s
}

// incompressibleKey returns a key of n bytes: "scope#" and random printable
// ASCII, which no store compresses below its length.
func incompressibleKey(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	for i := range b {
		b[i] = '!' + b[i]%94
	}
	copy(b, "scope#")
	return string(b)
}
