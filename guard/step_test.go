package guard_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/memory"
)

// A call of three side effects fails in its third step; the retry replays
// the first two from their records and runs only the third.
func TestStepReplaysCompletedSteps(t *testing.T) {
	m, cs := newMemory()
	g := mustGuard(t, cs)
	effects := map[string]int{}
	failThird := true
	invoice := func(ctx context.Context) (string, error) {
		pdf, err := guard.Step(ctx, "render", func(context.Context) (string, error) { effects["render"]++; return "inv.pdf", nil })
		if err != nil {
			return "", err
		}
		if _, err := guard.Step(ctx, "email", func(context.Context) (int, error) { effects["email"]++; return 1, nil }); err != nil {
			return "", err
		}
		return guard.Step(ctx, "ledger", func(context.Context) (string, error) {
			effects["ledger"]++
			if failThird {
				return "", errors.New("ledger down")
			}
			return "posted " + pdf, nil
		})
	}
	if _, err := guard.Do(ctx, g, "invoice", "inv-1", invoice); err == nil {
		t.Fatal("first attempt succeeded; want the third step's error")
	}
	failThird = false
	v, out, err := guard.Execute(ctx, g, "invoice", "inv-1", invoice)
	if err != nil || v != "posted inv.pdf" || out != guard.OutcomeExecuted {
		t.Fatalf("retry = %q, %v, %v", v, out, err)
	}
	if effects["render"] != 1 || effects["email"] != 1 || effects["ledger"] != 2 {
		t.Errorf("side effects %v; want render and email once, ledger twice (failed, then ran)", effects)
	}
	// The call itself now replays; its steps are not consulted.
	if v, out, err := guard.Execute(ctx, g, "invoice", "inv-1", invoice); err != nil || out != guard.OutcomeReplayed || v != "posted inv.pdf" {
		t.Errorf("third call = %q, %v, %v; want a replay", v, out, err)
	}
	// Steps of another call are its own.
	if _, err := guard.Do(ctx, g, "invoice", "inv-2", invoice); err != nil || effects["render"] != 2 {
		t.Errorf("another invoice: %v, effects %v", err, effects)
	}
	if n := m.Len(); n != 8 {
		t.Errorf("%d records; want 8 (two calls of three steps each, and the calls)", n)
	}
}

func TestStepOutsideAGuardedCall(t *testing.T) {
	ran := false
	_, err := guard.Step(context.Background(), "email", func(context.Context) (int, error) { ran = true; return 1, nil })
	if !errors.Is(err, guard.ErrNotInCall) || ran {
		t.Errorf("Step outside a call = %v (ran %v); want ErrNotInCall without running", err, ran)
	}
}

// Inside a call that runs unguarded (a disabled guard, an empty key
// selection), steps run unguarded too.
func TestStepInUnguardedCall(t *testing.T) {
	t.Setenv(guard.DisableEnv, "true")
	_, cs := newMemory()
	g := mustGuard(t, cs)
	runs := 0
	for range 2 {
		if _, err := guard.Do(ctx, g, "job", "k", func(ctx context.Context) (int, error) {
			return guard.Step(ctx, "s", func(context.Context) (int, error) { runs++; return runs, nil })
		}); err != nil {
			t.Fatal(err)
		}
	}
	if runs != 2 || cs.acquires.Load() != 0 {
		t.Errorf("%d runs, %d claims; want 2 runs and no store call", runs, cs.acquires.Load())
	}
}

// An activity that renders an invoice, e-mails it and posts it to the
// ledger fails at the ledger. Retried, it sends no second e-mail.
func ExampleStep() {
	g, err := guard.New(memory.New())
	if err != nil {
		panic(err)
	}
	ledgerUp := false
	sendInvoice := func(ctx context.Context, id string) (string, error) {
		pdf, err := guard.Step(ctx, "render", func(context.Context) (string, error) {
			fmt.Println("rendering", id)
			return id + ".pdf", nil
		})
		if err != nil {
			return "", err
		}
		if _, err := guard.Step(ctx, "email", func(context.Context) (bool, error) {
			fmt.Println("e-mailing", pdf)
			return true, nil
		}); err != nil {
			return "", err
		}
		return guard.Step(ctx, "ledger", func(context.Context) (string, error) {
			if !ledgerUp {
				return "", errors.New("ledger unavailable")
			}
			fmt.Println("posting", id)
			return "posted", nil
		})
	}
	send, err := guard.Wrap(g, "send-invoice", sendInvoice)
	if err != nil {
		panic(err)
	}
	_, err = send(context.Background(), "inv-7")
	fmt.Println("attempt 1:", err)
	ledgerUp = true
	res, err := send(context.Background(), "inv-7")
	fmt.Println("attempt 2:", res, err)
	// Output:
	// rendering inv-7
	// e-mailing inv-7.pdf
	// attempt 1: ledger unavailable
	// posting inv-7
	// attempt 2: posted <nil>
}

// A step does not inherit what observes the enclosing call's own result:
// its result filter and replay hook.
func TestStepDoesNotInheritResultFilterOrHook(t *testing.T) {
	_, cs := newMemory()
	g := mustGuard(t, cs)
	var filtered int
	var hooked []string
	call := func(ctx context.Context) (string, error) {
		n, err := guard.Step(ctx, "count", func(context.Context) (int, error) { return 7, nil })
		return fmt.Sprint(n), err
	}
	opts := []guard.CallOption{
		guard.WithResultFilter(func(v any) bool {
			if _, ok := v.(string); !ok {
				filtered++ // a step's result reached the call's filter
			}
			return true
		}),
		guard.WithOutcomeHook(func(_ context.Context, key string, _ *store.Record, out guard.Outcome) {
			hooked = append(hooked, out.String())
		}),
	}
	for i := range 2 {
		if _, err := guard.Do(ctx, g, "job", fmt.Sprint("k", i), call, opts...); err != nil {
			t.Fatal(err)
		}
	}
	if filtered != 0 {
		t.Errorf("the call's result filter saw %d step results", filtered)
	}
	// The hook sees each call's record once (recorded, then replayed); its
	// steps are not consulted.
	if _, err := guard.Do(ctx, g, "job", "k0", call, opts...); err != nil || !slices.Equal(hooked, []string{"executed", "executed", "replayed"}) {
		t.Errorf("replay: %v, hook saw %v; want the two calls executed, then one replayed", err, hooked)
	}
}
