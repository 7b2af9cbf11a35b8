package guard_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/internal/testing/teststores"
	"github.com/idemguard/idemguard/store/memory"
	"github.com/idemguard/idemguard/telemetry"
)

// A call that runs unguarded because its key selected nothing is never
// silent: it is counted under the outcome unguarded, and logged as a
// warning at most once per scope per minute, with the number of such
// calls since the last warning. Before, every call logged at Info, which
// the default logger drops and a debug logger floods with.
func TestUnguardedRunsAreLoggedOncePerScopePerMinute(t *testing.T) {
	var logs teststores.Logs
	h := newOtel()
	clock := newFakeClock()
	g, err := guard.New(memory.New(), append(h.opts, guard.WithLogger(logs.Logger()), adapt.WithClock(clock), guard.WithKeyPath("id"))...)
	if err != nil {
		t.Fatal(err)
	}
	call := func(scope string) {
		t.Helper()
		if _, out, err := adapt.Execute(ctx, g, scope, order{}, func(context.Context) (int, error) { return 1, nil }); err != nil || out != guard.OutcomeUnguarded {
			t.Fatalf("call in %s = %v, %v; want unguarded", scope, out, err)
		}
	}
	warnings := func() map[string][]float64 { // the calls each warning counts, by scope
		out := map[string][]float64{}
		for _, r := range logs.Records(t) {
			if r["msg"] == nil || r["level"] != "WARN" {
				t.Errorf("log record %v; want warnings only", r)
				continue
			}
			scope, _ := r["idemguard.scope"].(string)
			n, _ := r["idemguard.unguarded.calls"].(float64)
			out[scope] = append(out[scope], n)
		}
		return out
	}
	for range 3 {
		call("debit")
	}
	call("credit")
	if got := warnings(); len(got["debit"]) != 1 || len(got["credit"]) != 1 || got["debit"][0] != 1 {
		t.Fatalf("warnings %v; want one per scope, the first counting its own call", got)
	}
	clock.Advance(59 * time.Second)
	call("debit")
	if got := warnings(); len(got["debit"]) != 1 {
		t.Fatalf("warnings %v within the minute; want no second one", got)
	}
	clock.Advance(time.Second)
	call("debit")
	if got := warnings()["debit"]; len(got) != 2 || got[1] != 4 {
		t.Errorf("debit's warnings count %v calls; want [1 4]: the 4 since the first", got)
	}
	if n := callCount(t, h, "debit", telemetry.OutcomeUnguarded); n != 5 {
		t.Errorf("%d debit calls counted as unguarded; want 5", n)
	}
}

// A transactional call promises exactly once, so it requires a key by
// default: an empty selection is ErrKeyMissing, and the function does not
// run, unless the call or the guard's defaults say WithRequireKey(false).
func TestDoTxRequiresAKey(t *testing.T) {
	s := txStore{memory.New()}
	runs := 0
	fn := func(_ context.Context, _ *fakeTx) (int, error) { runs++; return 7, nil }
	keyless := map[string]any{"note": "no id"}
	byID := guard.WithKeyPath("id")

	g := mustGuard(t, s, byID)
	if _, out, err := adapt.ExecuteTx(ctx, g, "move", keyless, fn); !errors.Is(err, guard.ErrKeyMissing) || out != 0 || runs != 0 {
		t.Errorf("ExecuteTx without a key = %v, %v after %d runs; want ErrKeyMissing, nothing run", out, err, runs)
	}
	wrapped, err := guard.WrapTx(g, "move", func(ctx context.Context, tx *fakeTx, _ map[string]any) (int, error) { return fn(ctx, tx) })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wrapped(ctx, keyless); !errors.Is(err, guard.ErrKeyMissing) || runs != 0 {
		t.Errorf("WrapTx without a key = %v after %d runs; want ErrKeyMissing", err, runs)
	}
	if _, out, err := adapt.Execute(ctx, g, "move", keyless, func(context.Context) (int, error) { return 1, nil }); err != nil || out != guard.OutcomeUnguarded {
		t.Errorf("Execute without a key = %v, %v; want it unguarded, as before", out, err)
	}

	if _, out, err := adapt.ExecuteTx(ctx, g, "move", keyless, fn, guard.WithRequireKey(false)); err != nil || out != guard.OutcomeUnguarded || runs != 1 {
		t.Errorf("ExecuteTx with WithRequireKey(false) = %v, %v after %d runs; want unguarded", out, err, runs)
	}
	optOut := mustGuard(t, s, byID, guard.WithRequireKey(false))
	if _, out, err := adapt.ExecuteTx(ctx, optOut, "move", keyless, fn); err != nil || out != guard.OutcomeUnguarded || runs != 2 {
		t.Errorf("ExecuteTx on a guard built WithRequireKey(false) = %v, %v after %d runs; want unguarded", out, err, runs)
	}
	if _, out, err := adapt.ExecuteTx(ctx, optOut, "move", keyless, fn, guard.WithTTL(time.Minute)); err != nil || out != guard.OutcomeUnguarded || runs != 3 {
		t.Errorf("the same with a call option = %v, %v after %d runs; want the guard's default kept", out, err, runs)
	}
	if _, err := guard.DoTx(ctx, optOut, "move", keyless, fn, guard.WithRequireKey(true)); !errors.Is(err, guard.ErrKeyMissing) {
		t.Errorf("a call's WithRequireKey(true) over the guard's false = %v; want ErrKeyMissing", err)
	}
}

// The zero Outcome, which a call returns with an error that ended it
// before it got an outcome, prints a name; the outcomes that are
// telemetry's labels too print them.
func TestOutcomeNames(t *testing.T) {
	for o, want := range map[guard.Outcome]string{
		0:                      "none",
		guard.OutcomeExecuted:  telemetry.OutcomeExecuted,
		guard.OutcomeReplayed:  telemetry.OutcomeReplayed,
		guard.OutcomeShared:    "shared",
		guard.OutcomeUnguarded: telemetry.OutcomeUnguarded,
		guard.OutcomeReleased:  "released",
	} {
		if got := o.String(); got != want {
			t.Errorf("Outcome(%d).String() = %q, want %q", uint8(o), got, want)
		}
	}
}
