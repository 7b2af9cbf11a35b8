package linz

import (
	"context"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/memory"
)

const ms = int64(time.Millisecond)

// hist builds a history by hand: each op is called at call and returns at
// ret (real milliseconds; ret < 0 for a lost answer).
type hist struct{ ops []porcupine.Operation }

func (h *hist) add(client int, call, ret int64, in input, out output) {
	in.client = client
	if in.key == "" {
		in.key = "k"
	}
	op := porcupine.Operation{ClientId: client, Input: in, Call: call * ms, Output: out, Return: ret * ms}
	if ret < 0 {
		op.Return = math.MaxInt64
		op.Output = output{res: resUnknown}
	}
	h.ops = append(h.ops, op)
}

func claimRec(tok string, lease, exp int64) mrec {
	return mrec{status: store.StatusInProgress, token: tok, lease: lease * ms, exp: exp * ms}
}

func acquire(tok string, now, lease, exp int64) input {
	return input{kind: opAcquire, rec: claimRec(tok, lease, exp), now: now * ms, token: tok}
}

func complete(tok string, exp int64) input {
	return input{kind: opComplete, token: tok, rec: mrec{status: store.StatusCompleted, token: tok, exp: exp * ms}}
}

func release(tok string) input { return input{kind: opRelease, token: tok} }

func get() input { return input{kind: opGet} }

var (
	ok       = output{res: resOK}
	mismatch = output{res: resMismatch}
	notFound = output{res: resNotFound}
)

func conflict(r mrec) output { return output{res: resConflict, rec: r, hasRec: true} }
func found(r mrec) output    { return output{res: resOK, rec: r, hasRec: true} }

func completed(tok string, exp int64) mrec {
	return mrec{status: store.StatusCompleted, token: tok, exp: exp * ms}
}

func TestModel(t *testing.T) {
	exact := Precision{}
	seconds := Precision{Expiry: time.Second, Lease: time.Millisecond}
	for _, tc := range []struct {
		name string
		p    Precision
		ok   bool
		ops  func(h *hist)
	}{
		{"one claim", exact, true, func(h *hist) {
			h.add(0, 0, 1, acquire("a", 100, 200, 1000), ok)
			h.add(1, 2, 3, acquire("b", 150, 300, 1000), conflict(claimRec("a", 200, 1000)))
			h.add(0, 4, 5, complete("a", 5000), ok)
			h.add(1, 6, 7, get(), found(completed("a", 5000)))
		}},
		{"two claims of a live record", exact, false, func(h *hist) {
			h.add(0, 0, 1, acquire("a", 100, 200, 1000), ok)
			h.add(1, 2, 3, acquire("b", 150, 300, 1000), ok)
		}},
		{"concurrent claims, one wins", exact, true, func(h *hist) {
			h.add(0, 0, 10, acquire("a", 100, 200, 1000), conflict(claimRec("b", 300, 1000)))
			h.add(1, 1, 9, acquire("b", 150, 300, 1000), ok)
		}},
		{"a conflict must return the record it met", exact, false, func(h *hist) {
			h.add(0, 0, 1, acquire("a", 100, 200, 1000), ok)
			h.add(1, 2, 3, acquire("b", 150, 300, 1000), conflict(claimRec("a", 250, 1000)))
		}},
		{"takeover after the lease", exact, true, func(h *hist) {
			h.add(0, 0, 1, acquire("a", 100, 200, 1000), ok)
			h.add(1, 2, 3, acquire("b", 200, 300, 1000), found(claimRec("a", 200, 1000)))
			h.add(0, 4, 5, complete("a", 5000), mismatch)
			h.add(0, 6, 7, release("a"), mismatch)
		}},
		{"a takeover must report the claim replaced", exact, false, func(h *hist) {
			h.add(0, 0, 1, acquire("a", 100, 200, 1000), ok)
			h.add(1, 2, 3, acquire("b", 200, 300, 1000), ok)
		}},
		{"and no other", exact, false, func(h *hist) {
			h.add(0, 0, 1, acquire("a", 100, 200, 1000), ok)
			h.add(1, 2, 3, acquire("b", 200, 300, 1000), found(claimRec("c", 200, 1000)))
		}},
		{"a fresh claim reports none", exact, false, func(h *hist) {
			h.add(0, 0, 1, acquire("a", 100, 200, 1000), found(claimRec("c", 50, 1000)))
		}},
		{"an expired claim replaced is no takeover", exact, true, func(h *hist) {
			h.add(0, 0, 1, acquire("a", 100, 200, 1000), ok)
			h.add(1, 2, 3, acquire("b", 1000, 1100, 2000), ok)
		}},
		{"nor reported as one", exact, false, func(h *hist) {
			h.add(0, 0, 1, acquire("a", 100, 200, 1000), ok)
			h.add(1, 2, 3, acquire("b", 1000, 1100, 2000), found(claimRec("a", 200, 1000)))
		}},
		{"a claim that expires within the second may be either", seconds, true, func(h *hist) {
			h.add(0, 0, 1, acquire("a", 100, 200, 1500), ok)
			h.add(1, 2, 3, acquire("b", 1600, 1700, 3000), found(mrec{status: store.StatusInProgress, token: "a", lease: 200 * ms, exp: 2000 * ms}))
			h.add(2, 4, 5, acquire("c", 1600, 1700, 3000), conflict(claimRec("b", 1700, 3000)))
		}},
		{"a zombie's completion lands", exact, false, func(h *hist) {
			h.add(0, 0, 1, acquire("a", 100, 200, 1000), ok)
			h.add(1, 2, 3, acquire("b", 200, 300, 1000), found(claimRec("a", 200, 1000)))
			h.add(0, 4, 5, complete("a", 5000), ok)
		}},
		{"a zombie's release lands", exact, false, func(h *hist) {
			h.add(0, 0, 1, acquire("a", 100, 200, 1000), ok)
			h.add(1, 2, 3, acquire("b", 200, 300, 1000), found(claimRec("a", 200, 1000)))
			h.add(0, 4, 5, release("a"), ok)
		}},
		{"a completed record is never released", exact, false, func(h *hist) {
			h.add(0, 0, 1, acquire("a", 100, 200, 1000), ok)
			h.add(0, 2, 3, complete("a", 5000), ok)
			h.add(0, 4, 5, release("a"), ok)
		}},
		{"completed, expired, claimed again", exact, true, func(h *hist) {
			h.add(0, 0, 1, acquire("a", 100, 200, 1000), ok)
			h.add(0, 2, 3, complete("a", 500), ok)
			h.add(1, 4, 5, acquire("b", 499, 600, 1000), conflict(completed("a", 500)))
			h.add(1, 6, 7, acquire("b", 500, 600, 1000), ok)
		}},
		{"a lost claim may have landed", exact, true, func(h *hist) {
			h.add(0, 0, -1, acquire("a", 100, 200, 1000), output{})
			h.add(1, 2, 3, get(), found(claimRec("a", 200, 1000)))
			h.add(1, 4, 5, acquire("b", 150, 300, 1000), conflict(claimRec("a", 200, 1000)))
		}},
		{"a lost claim may not have landed", exact, true, func(h *hist) {
			h.add(0, 0, -1, acquire("a", 100, 200, 1000), output{})
			h.add(1, 2, 3, get(), notFound)
			h.add(1, 4, 5, acquire("b", 150, 300, 1000), ok)
		}},
		{"a lost claim lands late, after a release", exact, true, func(h *hist) {
			h.add(1, 0, 1, acquire("b", 100, 300, 1000), ok)
			h.add(0, 2, -1, acquire("a", 90, 200, 1000), output{})
			h.add(1, 3, 4, release("b"), ok)
			h.add(1, 5, 6, get(), found(claimRec("a", 200, 1000)))
		}},
		{"a retried claim meets its first attempt", exact, true, func(h *hist) {
			h.add(0, 0, -1, acquire("a", 100, 200, 1000), output{})
			h.add(0, 2, 3, acquire("a", 100, 200, 1000), conflict(claimRec("a", 200, 1000)))
		}},
		{"a claim is not seen before it was made", exact, false, func(h *hist) {
			h.add(1, 0, 1, get(), found(claimRec("a", 200, 1000)))
			h.add(0, 2, -1, acquire("a", 100, 200, 1000), output{})
		}},
		{"expiry rounded up to the second", seconds, true, func(h *hist) {
			h.add(0, 0, 1, acquire("a", 100, 200, 1000), ok)
			h.add(0, 2, 3, complete("a", 1500), ok)
			h.add(1, 4, 5, acquire("b", 1700, 1800, 3000), conflict(mrec{status: store.StatusCompleted, token: "a", exp: 2000 * ms}))
			h.add(1, 6, 7, acquire("b", 1800, 1900, 3000), ok)
		}},
		{"but no further", seconds, false, func(h *hist) {
			h.add(0, 0, 1, acquire("a", 100, 200, 1000), ok)
			h.add(0, 2, 3, complete("a", 1500), ok)
			h.add(1, 4, 5, acquire("b", 2000, 2100, 3000), conflict(mrec{status: store.StatusCompleted, token: "a", exp: 2000 * ms}))
		}},
		{"and never down", seconds, false, func(h *hist) {
			h.add(0, 0, 1, acquire("a", 100, 200, 1000), ok)
			h.add(0, 2, 3, complete("a", 1500), ok)
			h.add(1, 4, 5, get(), found(mrec{status: store.StatusCompleted, token: "a", exp: 1000 * ms}))
		}},
		{"exact stores are held to it", exact, false, func(h *hist) {
			h.add(0, 0, 1, acquire("a", 100, 200, 1000), ok)
			h.add(0, 2, 3, complete("a", 1500), ok)
			h.add(1, 4, 5, acquire("b", 1700, 1800, 3000), conflict(completed("a", 1500)))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h hist
			tc.ops(&h)
			got := porcupine.CheckOperations(tc.p.model(time.Time{}), h.ops)
			if got != tc.ok {
				t.Errorf("linearizable = %v, want %v", got, tc.ok)
			}
			if got := porcupine.CheckOperations(tc.p.model(time.Time{}), settle(h.ops)); got != tc.ok {
				t.Errorf("settled: linearizable = %v, want %v", got, tc.ok)
			}
		})
	}
}

// The recorder's workload meets what the checker must judge: takeovers
// whose late writes are fenced off, lost answers and their retries,
// conflicts, records that expire and are claimed again.
func TestRecordHistoryWorkload(t *testing.T) {
	h, err := RecordHistory(context.Background(), memory.New(), HistoryConfig{Faults: 0.1, Seed: 7, Ops: 3000})
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for _, op := range h.operations() {
		in, out := op.Input.(input), op.Output.(output)
		counts[in.kind.String()+" "+out.res.String()]++
		if in.retry {
			counts["retry"]++
		}
	}
	t.Logf("%d operations: %v", h.Len(), counts)
	for _, want := range []string{
		"Acquire ok", "Acquire conflict", "Acquire unknown", "Complete ok", "Complete token mismatch",
		"Extend ok", "Extend token mismatch", "Release ok", "Release token mismatch", "Get ok", "retry",
	} {
		if counts[want] == 0 {
			t.Errorf("no %q in the history", want)
		}
	}
	if h.Len() < 2700 || h.Len() > 3000 {
		t.Errorf("%d operations recorded, want about 3000", h.Len())
	}
	if res := h.Check(Precision{}, CheckOptions{Dir: t.TempDir()}); !res.Linearizable {
		t.Errorf("the memory store's history: %s", res.Report())
	}
}

// A history that is not linearizable is reported with Porcupine's
// visualisation, written to the file the report names, and with its
// minimal failing operations.
func TestCheckWritesVisualization(t *testing.T) {
	dir := t.TempDir()
	h, err := RecordHistory(context.Background(), claimAlways{memory.New()}, HistoryConfig{Seed: 3, Ops: 500})
	if err != nil {
		t.Fatal(err)
	}
	res := h.Check(Precision{}, CheckOptions{Dir: dir, Name: "claim/always"})
	if res.Linearizable || res.TimedOut {
		t.Fatalf("a store whose claims always succeed: %s", res)
	}
	report := res.Report()
	for _, path := range []string{res.Visualization, res.MinimalVisualization} {
		if !strings.HasPrefix(path, dir) || !strings.Contains(path, "claim-always") {
			t.Errorf("visualisation at %q, want a file in %s named after the check", path, dir)
			continue
		}
		if !strings.Contains(report, path) {
			t.Errorf("the report does not name %s:\n%s", path, report)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), "<html") || !strings.Contains(string(b), "Acquire(") {
			t.Errorf("%s is not Porcupine's visualisation of the history (%d bytes)", path, len(b))
		}
	}
	if n := len(res.Minimal); n == 0 || n > 10 {
		t.Errorf("%d minimal failing operations, want a few:\n%s", n, report)
	}
	if !strings.Contains(report, "minimal failing operations") {
		t.Errorf("the report lists no minimal failing operations:\n%s", report)
	}
	t.Log(report)
}

// The minimal failing part is itself not linearizable, and its key's
// whole history is: shrinking keeps the failure and loses the rest.
func TestShrinkKeepsTheFailure(t *testing.T) {
	h, err := RecordHistory(context.Background(), releaseIgnoresToken{memory.New()}, HistoryConfig{Faults: 0.1, Seed: 11, Ops: 2000})
	if err != nil {
		t.Fatal(err)
	}
	p := Precision{}
	ops := h.operations()
	if porcupine.CheckOperations(p.model(h.base), ops) {
		t.Skip("this history of the mutant happens to be linearizable")
	}
	min, m := h.shrink(p, ops, time.Now().Add(20*time.Second))
	if min == nil {
		t.Fatal("shrink found nothing")
	}
	if porcupine.CheckOperations(m, min) {
		t.Errorf("the minimal part is linearizable")
	}
	if len(min) >= len(ops)/10 {
		t.Errorf("the minimal part has %d of %d operations", len(min), len(ops))
	}
	t.Logf("%d operations, minimal part %d:\n%s", len(ops), len(min), strings.Join(h.lines(min), "\n"))
}
