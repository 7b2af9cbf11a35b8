package watermillguard_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/memory"
	"github.com/idemguard/idemguard/watermillguard"
)

// A handler whose transaction its own condition refused (a debit the
// balance does not cover, through guard.DoTx) fails the same way on every
// redelivery: its error is permanent, for the poison queue, and still the
// refusal.
func TestRefusedHandlerIsPermanent(t *testing.T) {
	mw := newMiddleware(t, newGuard(t, memory.New()))
	var runs atomic.Int32
	refused := &adapt.RefusedError{Key: "debit#1", Err: &store.OpError{Store: "postgres", Op: "Tx.Commit", Err: errors.New("insufficient funds"), Refused: true}}
	body := func(context.Context, *message.Message) ([]*message.Message, error) {
		runs.Add(1)
		return nil, refused
	}
	_, err := through(t.Context(), mw, watermill.NewUUID(), nil, body)
	if !watermillguard.IsPermanent(err) || !errors.Is(err, guard.ErrRefused) {
		t.Errorf("a refused handler's delivery = %v; want a permanent error that is the refusal", err)
	}
}

// limitedStore is a memory store that holds keys of up to 2,048 bytes,
// as DynamoDB does.
type limitedStore struct{ *memory.Store }

func (limitedStore) MaxKeyBytes() int { return 2048 }

// A scope whose keys the store cannot hold is refused when the middleware
// is built, not on every delivery.
func TestScopeTooLongForTheStore(t *testing.T) {
	g := newGuard(t, limitedStore{memory.New()})
	_, err := watermillguard.Middleware(g, watermillguard.WithScope(strings.Repeat("s", 2100)))
	if !errors.Is(err, guard.ErrInvalidOption) {
		t.Errorf("Middleware with a 2,100-byte scope = %v, want ErrInvalidOption", err)
	}
	if _, err := watermillguard.Middleware(g, watermillguard.WithScope(strings.Repeat("s", 1983))); err != nil {
		t.Errorf("Middleware with the longest scope that fits = %v", err)
	}
}
