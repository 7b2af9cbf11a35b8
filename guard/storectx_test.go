package guard

import (
	"context"
	"errors"
	"testing"
	"time"
)

type storeCtxKey struct{}

func TestStoreContextLazy(t *testing.T) {
	parent, cancelParent := context.WithCancel(context.WithValue(context.Background(), storeCtxKey{}, "v"))
	ctx := newStoreContext(parent, time.Hour)
	cancel := ctx.cancel
	defer cancel()
	cancelParent() // the caller's cancellation does not reach it

	if dl, ok := ctx.Deadline(); !ok || time.Until(dl) < 59*time.Minute {
		t.Errorf("Deadline() = %v, %v; want an hour from now", dl, ok)
	}
	if err := ctx.Err(); err != nil {
		t.Errorf("Err() = %v before the deadline", err)
	}
	if v := ctx.Value(storeCtxKey{}); v != "v" {
		t.Errorf("Value() = %v; want the parent's value", v)
	}
	if ctx.std.Load() != nil {
		t.Fatal("Deadline, Err and Value made the timer; only Done should")
	}
	select {
	case <-ctx.Done():
		t.Fatal("Done() closed before the deadline")
	default:
	}
	if ctx.std.Load() == nil {
		t.Fatal("Done() did not make the standard context")
	}
	if v := ctx.Value(storeCtxKey{}); v != "v" {
		t.Errorf("Value() = %v after Done; want the parent's value", v)
	}
	cancel()
	<-ctx.Done()
	if err := ctx.Err(); !errors.Is(err, context.Canceled) {
		t.Errorf("Err() = %v after cancel; want context.Canceled", err)
	}
}

func TestStoreContextDeadline(t *testing.T) {
	// Err notices the deadline without Done having been asked for.
	ctx := newStoreContext(context.Background(), time.Millisecond)
	defer ctx.cancel()
	time.Sleep(5 * time.Millisecond)
	if err := ctx.Err(); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Err() = %v after the deadline; want DeadlineExceeded", err)
	}
	select {
	case <-ctx.Done():
	default:
		t.Error("Err() reported the deadline but Done() is open")
	}

	// A context derived from it ends with it, as from a standard context.
	ctx = newStoreContext(context.Background(), 20*time.Millisecond)
	defer ctx.cancel()
	child, cancelChild := context.WithCancel(ctx)
	defer cancelChild()
	select {
	case <-child.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("a derived context did not end at the deadline")
	}
	if err := child.Err(); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("derived Err() = %v; want DeadlineExceeded", err)
	}
}

func TestStoreContextCanceledFirst(t *testing.T) {
	ctx := newStoreContext(context.Background(), time.Hour)
	ctx.cancel()
	if err := ctx.Err(); !errors.Is(err, context.Canceled) {
		t.Errorf("Err() = %v after cancel; want context.Canceled", err)
	}
	select {
	case <-ctx.Done():
	default:
		t.Error("Done() open after cancel")
	}
}
