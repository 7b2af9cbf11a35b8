package guard_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/store"
)

// limitedStore is a counting memory store that holds keys of up to max
// bytes (store.KeyLimiter).
type limitedStore struct {
	*countingStore
	max int
}

func (s limitedStore) MaxKeyBytes() int { return s.max }

func (s limitedStore) calls() int64 {
	return s.acquires.Load() + s.completes.Load() + s.extends.Load() + s.releases.Load() + s.gets.Load()
}

// limitedTxStore is a limitedStore that begins transactions.
type limitedTxStore struct{ limitedStore }

func (s limitedTxStore) Begin(ctx context.Context) (store.Tx[*fakeTx], error) {
	return txStore{s.limitedStore.countingStore.Store.(*memoryStore).Store}.Begin(ctx)
}

const keyLimit = 200

func newLimited() limitedStore {
	return limitedStore{countingStore: newCounting(newMemoryStore()), max: keyLimit}
}

// checkShort fails unless err is short and says the length and the limit:
// an error about a long key must not echo it.
func checkShort(t *testing.T, err error, length int) {
	t.Helper()
	msg := err.Error()
	if len(msg) > 400 {
		t.Errorf("error is %d bytes long; want it short, the key clipped: %q", len(msg), msg)
	}
	for _, want := range []string{itoa(length), itoa(keyLimit)} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not give %s", msg, want)
		}
	}
}

func itoa(n int) string {
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

// A scope whose keys the store cannot hold is refused where it is fixed
// (Wrap, WrapTx, CheckScope) as an invalid option, and a call's key as
// invalid input, before any store call: never a store error.
func TestKeyLimit(t *testing.T) {
	fn := func(context.Context) (int, error) { return 1, nil }
	fits := strings.Repeat("s", keyLimit-1-64)
	long := fits + "x"

	s := newLimited()
	g := mustGuard(t, s)
	if err := g.CheckScope(fits); err != nil {
		t.Errorf("CheckScope(a scope whose keys are %d bytes, the limit) = %v", keyLimit, err)
	}
	err := g.CheckScope(long)
	if !errors.Is(err, guard.ErrInvalidOption) {
		t.Fatalf("CheckScope(a scope one byte too long) = %v, want ErrInvalidOption", err)
	}
	checkShort(t, err, len(long))

	if _, err := guard.Wrap(g, long, func(ctx context.Context, in string) (int, error) { return 1, nil }); !errors.Is(err, guard.ErrInvalidOption) {
		t.Errorf("Wrap with a scope too long = %v, want ErrInvalidOption", err)
	}
	if _, err := guard.WrapTx(mustGuard(t, limitedTxStore{s}), long, func(ctx context.Context, tx *fakeTx, in string) (int, error) { return 1, nil }); !errors.Is(err, guard.ErrInvalidOption) {
		t.Errorf("WrapTx with a scope too long = %v, want ErrInvalidOption", err)
	}

	if v, err := guard.Do(ctx, g, fits, "k", fn); err != nil || v != 1 {
		t.Fatalf("Do whose key is the limit's length = %d, %v", v, err)
	}
	before := s.calls()
	_, out, err := adapt.Execute(ctx, g, long, "k", fn)
	if !errors.Is(err, guard.ErrInvalidInput) || errors.Is(err, guard.ErrStore) || out != 0 {
		t.Fatalf("Do whose key is too long = %v, %v; want ErrInvalidInput and no outcome", out, err)
	}
	checkShort(t, err, len(long)+1+64)
	if n := s.calls() - before; n != 0 {
		t.Errorf("Do whose key is too long made %d store calls, want none", n)
	}
	if _, _, err := adapt.Obtain(ctx, g, long, "k"); !errors.Is(err, guard.ErrInvalidInput) {
		t.Errorf("Claim whose key is too long = %v, want ErrInvalidInput", err)
	}

	// A step's key is longer than its call's: refused when the step is
	// called, before its store calls; the call goes on.
	step := strings.Repeat("n", 20)
	var stepErr error
	if _, err := guard.Do(ctx, g, fits[:len(fits)-len(step)], "k2", func(ctx context.Context) (int, error) {
		before = s.calls()
		_, stepErr = guard.Step(ctx, step, fn)
		if n := s.calls() - before; n != 0 {
			t.Errorf("a step whose key is too long made %d store calls, want none", n)
		}
		return 1, nil
	}); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(stepErr, guard.ErrInvalidInput) {
		t.Errorf("Step whose key is too long = %v, want ErrInvalidInput", stepErr)
	}

	// A store without a limit takes any scope.
	huge := strings.Repeat("h", 100<<10)
	if err := mustGuard(t, newMemoryStore()).CheckScope(huge); err != nil {
		t.Errorf("CheckScope on a store without a key limit = %v", err)
	}
}

// A clipped key is cut on a character boundary, so the error stays valid
// UTF-8.
func TestKeyLimitClipsOnCharacters(t *testing.T) {
	g := mustGuard(t, newLimited())
	err := g.CheckScope(strings.Repeat("é", keyLimit))
	if err == nil || !strings.Contains(err.Error(), "…") || !isUTF8(err.Error()) {
		t.Errorf("CheckScope(a long scope of two-byte characters) = %q; want it clipped on a character boundary", err)
	}
}

func isUTF8(s string) bool { return strings.ToValidUTF8(s, "\uFFFD") == s }
