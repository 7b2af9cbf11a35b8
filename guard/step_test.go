package guard_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
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
	v, out, err := adapt.Execute(ctx, g, "invoice", "inv-1", invoice)
	if err != nil || v != "posted inv.pdf" || out != guard.OutcomeExecuted {
		t.Fatalf("retry = %q, %v, %v", v, out, err)
	}
	if effects["render"] != 1 || effects["email"] != 1 || effects["ledger"] != 2 {
		t.Errorf("side effects %v; want render and email once, ledger twice (failed, then ran)", effects)
	}
	// The call itself now replays; its steps are not consulted.
	if v, out, err := adapt.Execute(ctx, g, "invoice", "inv-1", invoice); err != nil || out != guard.OutcomeReplayed || v != "posted inv.pdf" {
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
	if !errors.Is(err, adapt.ErrNotInCall) || ran {
		t.Errorf("Step outside a call = %v (ran %v); want ErrNotInCall without running", err, ran)
	}
}

// Inside a call that runs unguarded (a disabled guard, an empty key
// selection), steps run unguarded too.
func TestStepInUnguardedCall(t *testing.T) {
	t.Setenv(adapt.DisableEnv, "true")
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

// responseCodec stores only *response values, as an HTTP layer's codec
// stores only its responses.
type responseCodec struct{}

type response struct{ Status int }

func (responseCodec) Marshal(v any) ([]byte, error) {
	r, ok := v.(*response)
	if !ok {
		return nil, fmt.Errorf("responseCodec: %T is not a response", v)
	}
	return []byte(fmt.Sprint(r.Status)), nil
}

func (responseCodec) Unmarshal(data []byte, v any) error {
	r, ok := v.(**response)
	if !ok {
		return fmt.Errorf("responseCodec: %T is not a response", v)
	}
	*r = &response{}
	_, err := fmt.Sscan(string(data), &(*r).Status)
	return err
}

// A step encodes its value with the guard's codec, not with the codec the
// enclosing call's adapter set for its own result: inside an HTTP handler
// whose call stores responses only, a step that charged a card and whose
// request then failed (releasing the call's key) replays on the retry
// instead of failing with ErrResultUnavailable for the step's whole TTL.
func TestStepUsesTheGuardsCodec(t *testing.T) {
	m, _ := newMemory()
	g := mustGuard(t, m)
	var charges int
	fail := true
	handler := func(ctx context.Context) (*response, error) {
		receipt, err := guard.Step(ctx, "charge", func(context.Context) (charge, error) {
			charges++
			return charge{ChargeID: "ch_1", Amount: 100}, nil
		})
		if err != nil {
			return nil, err
		}
		if receipt.ChargeID != "ch_1" {
			return nil, fmt.Errorf("step replayed %+v", receipt)
		}
		if fail {
			fail = false
			return nil, errors.New("503: the mailer is down") // releases the call's key
		}
		return &response{Status: 201}, nil
	}
	if _, err := guard.Do(ctx, g, "http", "key-1", handler, guard.WithCodec(responseCodec{})); err == nil {
		t.Fatal("the first request did not fail")
	}
	resp, err := guard.Do(ctx, g, "http", "key-1", handler, guard.WithCodec(responseCodec{}))
	if err != nil || resp.Status != 201 {
		t.Fatalf("retry = %+v, %v; want 201 with the charge step replayed", resp, err)
	}
	if charges != 1 {
		t.Errorf("the card was charged %d times", charges)
	}
}

// A step's definite error stays definite when it is replayed, so the
// enclosing call (and its adapter) treats it as the definite outcome it
// was, not as a failure to retry.
func TestStepDefiniteErrorStaysDefinite(t *testing.T) {
	m, _ := newMemory()
	g := mustGuard(t, m)
	declined := guard.Definite(errors.New("card declined"))
	var seen []bool
	call := func(ctx context.Context) (string, error) {
		_, err := guard.Step(ctx, "charge", func(context.Context) (string, error) { return "", declined })
		seen = append(seen, guard.IsDefinite(err))
		return "", errors.New("wrapped, not definite") // releases the call
	}
	for range 2 {
		_, _ = guard.Do(ctx, g, "job", "k", call)
	}
	if !slices.Equal(seen, []bool{true, true}) {
		t.Errorf("IsDefinite of the step's error, run then replayed: %v; want true both times", seen)
	}
}
