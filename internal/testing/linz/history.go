package linz

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/idemguard/idemguard/store"
)

// History is a record of operations on a store: each with the time it was
// called and the time it returned, its arguments and its answer. An
// operation whose answer was lost (a timeout, a cut connection, any error
// other than the contract's own sentinels) is kept as possibly applied:
// its answer unknown and its return at infinity, as Porcupine takes it.
// [RecordHistory] makes one; [History.Check] checks it. A History is safe
// for concurrent recording.
type History struct {
	base  time.Time // the time the recorder's clock starts at: a whole second
	start time.Time // real time, for call and return times

	mu  sync.Mutex
	ops []porcupine.Operation // protected by mu
}

func newHistory(base time.Time) *History {
	return &History{base: base.Truncate(time.Second), start: time.Now()}
}

// Len returns the number of operations recorded.
func (h *History) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.ops)
}

// operations returns a copy of the recorded operations.
func (h *History) operations() []porcupine.Operation {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]porcupine.Operation(nil), h.ops...)
}

// rel returns t as nanoseconds after the history's base time.
func (h *History) rel(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.Sub(h.base).Nanoseconds()
}

// abs is the inverse of rel.
func (h *History) abs(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return h.base.Add(time.Duration(n))
}

func (h *History) mrec(r *store.Record) mrec {
	m := mrec{
		status:  r.Status,
		token:   r.Token,
		payload: r.PayloadHash,
		kind:    r.ResultKind,
		result:  string(r.Result),
		exp:     h.rel(r.ExpiresAt),
	}
	if !r.LeaseExpiresAt.IsZero() {
		m.lease = h.rel(r.LeaseExpiresAt)
	}
	return m
}

func (h *History) record(m mrec, key string) *store.Record {
	r := &store.Record{
		Key:            key,
		Status:         m.status,
		Token:          m.token,
		PayloadHash:    m.payload,
		ResultKind:     m.kind,
		ExpiresAt:      h.abs(m.exp),
		LeaseExpiresAt: h.abs(m.lease),
	}
	if m.result != "" {
		r.Result = []byte(m.result)
	}
	return r
}

// now returns the real time since the history began, for call and return
// times.
func (h *History) now() int64 { return int64(time.Since(h.start)) }

// add records an operation called at call that answered out. An unknown
// answer returns at infinity, unless over says the operation is known to
// be over when its caller heard the error (a fault the recorder injected in
// its own process): then it returns now, with any answer. A Get whose
// answer was lost tells nothing and is left out.
func (h *History) add(call int64, in input, out output, over bool) {
	ret := h.now()
	if out.res == resUnknown {
		if in.kind == opGet {
			return
		}
		if !over {
			ret = math.MaxInt64
		}
	}
	h.mu.Lock()
	h.ops = append(h.ops, porcupine.Operation{ClientId: in.client, Input: in, Call: call, Output: out, Return: ret})
	h.mu.Unlock()
}

// classify turns a store's answer into the model's.
func classify(err error) output {
	switch {
	case err == nil:
		return output{res: resOK}
	case errors.Is(err, store.ErrConflict):
		return output{res: resConflict}
	case errors.Is(err, store.ErrTokenMismatch):
		return output{res: resMismatch}
	case errors.Is(err, store.ErrNotFound):
		return output{res: resNotFound}
	}
	msg := err.Error()
	if len(msg) > 120 {
		msg = msg[:120] + "…"
	}
	return output{res: resUnknown, err: msg}
}

// CheckResult is what [History.Check] found.
type CheckResult struct {
	// Linearizable reports that the checker found an order of the
	// operations, each at a point between its call and its return, that
	// the store contract's sequential model accepts.
	Linearizable bool
	// TimedOut reports that the checker gave up: the history is neither
	// shown linearizable nor shown not to be.
	TimedOut bool
	// Ops and Unknown count the operations checked and those whose answer
	// was lost; Keys the keys they touched.
	Ops, Unknown, Keys int
	// Elapsed is how long the check took, the search for a minimal
	// failing history included.
	Elapsed time.Duration
	// Visualization is the path of the HTML file Porcupine wrote of a
	// history that is not linearizable (or whose check timed out);
	// MinimalVisualization that of its minimal failing part.
	Visualization, MinimalVisualization string
	// Minimal lists the operations of the smallest failing part of the
	// history the checker found, one per line, in call order, each with
	// its client, its call and return times (real milliseconds since the
	// history began) and its answer. Operations marked "any answer" had
	// their answer dropped by the search: what is left is still not
	// linearizable without them.
	Minimal []string
}

// String sums the result up in one line.
func (r *CheckResult) String() string {
	verdict := "linearizable"
	switch {
	case r.TimedOut:
		verdict = "UNKNOWN (the checker timed out)"
	case !r.Linearizable:
		verdict = "NOT LINEARIZABLE"
	}
	return fmt.Sprintf("%s: %d operations on %d keys, %d with lost answers, checked in %v",
		verdict, r.Ops, r.Keys, r.Unknown, r.Elapsed.Round(time.Millisecond))
}

// Report is r as a failure message: the verdict, the files and the
// minimal failing operations.
func (r *CheckResult) Report() string {
	var b strings.Builder
	b.WriteString(r.String())
	if r.Visualization != "" {
		fmt.Fprintf(&b, "\nPorcupine's visualisation of the history: %s", r.Visualization)
	}
	if r.MinimalVisualization != "" {
		fmt.Fprintf(&b, "\nand of its minimal failing part: %s", r.MinimalVisualization)
	}
	if len(r.Minimal) > 0 {
		fmt.Fprintf(&b, "\nminimal failing operations (%d):", len(r.Minimal))
		for i, l := range r.Minimal {
			if i == maxReported {
				fmt.Fprintf(&b, "\n  … %d more, in the visualisation", len(r.Minimal)-i)
				break
			}
			b.WriteString("\n  ")
			b.WriteString(l)
		}
	}
	return b.String()
}

// maxReported is the most minimal failing operations a report lists.
const maxReported = 40

// CheckOptions adjust [History.Check].
type CheckOptions struct {
	// Timeout bounds the check of the whole history; zero means a
	// minute. The search for a minimal failing part has the same again.
	Timeout time.Duration
	// Dir is where the visualisations of a failing history are written;
	// empty means the environment variable IDEMGUARD_LINZ_DIR, or the
	// system's temporary directory.
	Dir string
	// Name names the files written, after a sanitised form of it; empty
	// means "history".
	Name string
	// ShrinkTimeout bounds the search for a minimal failing part of a
	// history that is not linearizable; zero means 20 seconds (or
	// Timeout, if shorter). The part found when it runs out is reported.
	ShrinkTimeout time.Duration
}

// VisualizationDirEnv names the directory where failing histories'
// visualisations are written, when [CheckOptions.Dir] is empty.
const VisualizationDirEnv = "IDEMGUARD_LINZ_DIR"

// Check checks h for linearizability against the store contract's model,
// for a store that keeps times at precision p. When h is not linearizable
// it writes Porcupine's visualisation of it and of its minimal failing
// part, and lists that part's operations (see [CheckResult]).
func (h *History) Check(p Precision, o CheckOptions) *CheckResult {
	began := time.Now()
	if o.Timeout <= 0 {
		o.Timeout = time.Minute
	}
	ops := settle(h.operations())
	res := &CheckResult{Ops: len(ops)}
	keys := map[string]bool{}
	for _, op := range ops {
		keys[op.Input.(input).key] = true
		if op.Output.(output).res == resUnknown {
			res.Unknown++
		}
	}
	res.Keys = len(keys)
	model := p.model(h.base)
	deadline := began.Add(o.Timeout)
	// A linearizable history is usually shown so quickly; proving that one
	// is not can take the checker long when many answers were lost, and a
	// window of the history that fails proves it as well (see window).
	verdict := porcupine.CheckOperationsTimeout(model, ops, min(o.Timeout, 10*time.Second))
	if verdict == porcupine.Unknown {
		if illegalWindow(p.wildModel(h.base), ops, deadline) {
			verdict = porcupine.Illegal
		} else if d := time.Until(deadline); d > 0 {
			verdict = porcupine.CheckOperationsTimeout(model, ops, d)
		}
	}
	res.Linearizable = verdict == porcupine.Ok
	res.TimedOut = verdict == porcupine.Unknown
	if res.Linearizable {
		res.Elapsed = time.Since(began)
		return res
	}
	name := o.Name
	if name == "" {
		name = "history"
	}
	// The visualisation shows the longest linearizable prefixes the
	// checker found; a search cut short shows those it had found.
	_, info := porcupine.CheckOperationsVerbose(model, ops, max(time.Until(deadline), 10*time.Second))
	res.Visualization = writeVisualization(model, info, o.Dir, name)
	if !res.TimedOut {
		if o.ShrinkTimeout <= 0 {
			o.ShrinkTimeout = min(o.Timeout, 20*time.Second)
		}
		if min, m := h.shrink(p, ops, time.Now().Add(o.ShrinkTimeout)); min != nil {
			_, minfo := porcupine.CheckOperationsVerbose(m, min, o.ShrinkTimeout)
			res.MinimalVisualization = writeVisualization(m, minfo, o.Dir, name+"-minimal")
			res.Minimal = h.lines(min)
		}
	}
	res.Elapsed = time.Since(began)
	return res
}

var unsafeName = regexp.MustCompile(`[^a-zA-Z0-9_.-]+`)

// writeVisualization writes Porcupine's HTML of info and returns its path,
// or a note of why it could not.
func writeVisualization(m porcupine.Model, info porcupine.LinearizationInfo, dir, name string) string {
	if dir == "" {
		dir = os.Getenv(VisualizationDirEnv)
	}
	if dir == "" {
		dir = os.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Sprintf("(not written: %v)", err)
	}
	f, err := os.CreateTemp(dir, "idemguard-linz-"+unsafeName.ReplaceAllString(name, "-")+"-*.html")
	if err != nil {
		return fmt.Sprintf("(not written: %v)", err)
	}
	werr := porcupine.Visualize(m, info, f)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return fmt.Sprintf("%s (incomplete: %v)", f.Name(), werr)
	}
	abs, err := filepath.Abs(f.Name())
	if err != nil {
		return f.Name()
	}
	return abs
}

// minStep is the least time each check of the search for a minimal
// failing history gets: a part whose check takes longer counts as not
// failing, which only leaves the result larger. A part of a long history
// gets as long as its whole key took to check, twice over.
const minStep = 250 * time.Millisecond

// illegal reports whether the checker shows ops not linearizable before
// deadline, within step.
func illegal(m porcupine.Model, ops []porcupine.Operation, deadline time.Time, step time.Duration) bool {
	d := min(time.Until(deadline), step)
	if d <= 0 {
		return false
	}
	return porcupine.CheckOperationsTimeout(m, ops, d) == porcupine.Illegal
}

// window cuts from ops, the operations of one key, the part that overlaps
// the real-time interval [from, to]: operations that returned before from
// are dropped, and so are those called after to; those still running at
// from or at to keep their effect but lose their answer. Checked from a
// state the model knows nothing about, a window of a linearizable history
// is linearizable: a window that is not shows a failure.
func window(ops []porcupine.Operation, from, to int64) []porcupine.Operation {
	var w []porcupine.Operation
	for _, op := range ops {
		if op.Return < from || op.Call > to {
			continue
		}
		if op.Call < from || op.Return > to {
			op = forget(op)
			if op.Input.(input).kind == opGet {
				continue // an unknown read tells nothing
			}
		}
		w = append(w, op)
	}
	return w
}

// forget drops op's answer: it may have run, with any answer.
func forget(op porcupine.Operation) porcupine.Operation {
	out := op.Output.(output)
	if out.res != resUnknown {
		op.Output = output{res: resUnknown, err: "any answer"}
	}
	op.Return = math.MaxInt64
	return op
}

// illegalWindow looks for a window of ops (see window) of a couple of
// hundred operations of one key that is not linearizable from a state the
// model knows nothing about, which shows that ops is not.
func illegalWindow(wild porcupine.Model, ops []porcupine.Operation, deadline time.Time) bool {
	const size = 200
	for _, part := range partitionByKey(ops) {
		sorted := append([]porcupine.Operation(nil), part...)
		sort.Slice(sorted, func(i, j int) bool { return sorted[i].Call < sorted[j].Call })
		for i := 0; i < len(sorted); i += size / 2 {
			end := min(i+size, len(sorted)) - 1
			if illegal(wild, window(sorted, sorted[i].Call, sorted[end].Call), deadline, 4*minStep) {
				return true
			}
			if time.Now().After(deadline) {
				return false
			}
		}
	}
	return false
}

// shrink returns a small part of ops, a history that is not linearizable,
// that is still not: the key that fails, cut to the shortest window of
// time that fails, with every answer that the failure does not need
// dropped. It returns that part and the model it fails, or nil if it
// finds nothing before deadline.
func (h *History) shrink(p Precision, ops []porcupine.Operation, deadline time.Time) ([]porcupine.Operation, porcupine.Model) {
	// From a state it knows nothing about, the model can start a window
	// anywhere; a failure that needs the key to start absent keeps its
	// start.
	wild, init := p.wildModel(h.base), p.model(h.base)
	var (
		bad  []porcupine.Operation
		m    porcupine.Model
		step = minStep
	)
	find := func(model porcupine.Model) bool {
		for _, part := range partitionByKey(ops) {
			began := time.Now()
			if illegal(model, part, deadline, time.Until(deadline)) {
				bad, m, step = part, model, max(minStep, 2*time.Since(began))
				return true
			}
		}
		return false
	}
	if !find(wild) && !find(init) {
		return nil, porcupine.Model{}
	}
	times := make([]int64, 0, 2*len(bad))
	for _, op := range bad {
		times = append(times, op.Call)
		if op.Return != math.MaxInt64 {
			times = append(times, op.Return)
		}
	}
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	first := int64(math.MinInt64)
	// The earliest end: the first time t such that the window up to t
	// fails (a window that fails goes on failing as it grows).
	lo, hi := 0, len(times)-1
	for lo < hi {
		mid := (lo + hi) / 2
		if illegal(m, window(bad, first, times[mid]), deadline, step) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	to := times[lo]
	w := window(bad, first, to)
	if !illegal(m, w, deadline, step) {
		return bad, m
	}
	if m.Init().([]any)[0].(state).wild {
		// The latest start, given that end.
		lo, hi = 0, lo
		for lo < hi {
			mid := (lo + hi + 1) / 2
			if illegal(m, window(bad, times[mid], to), deadline, step) {
				lo = mid
			} else {
				hi = mid - 1
			}
		}
		if cut := window(bad, times[lo], to); illegal(m, cut, deadline, step) {
			w = cut
		}
	}
	// Drop the answers the failure does not need: halves, then quarters,
	// down to one at a time.
	var known []int
	for i, op := range w {
		if op.Output.(output).res != resUnknown {
			known = append(known, i)
		}
	}
	for size := max(len(known)/2, 1); ; size /= 2 {
		for start := 0; start < len(known); start += size {
			try := append([]porcupine.Operation(nil), w...)
			changed := false
			for _, i := range known[start:min(start+size, len(known))] {
				if try[i].Output.(output).res != resUnknown {
					try[i], changed = forget(try[i]), true
				}
			}
			if changed && illegal(m, try, deadline, step) {
				w = try
			}
		}
		if size == 1 {
			break
		}
	}
	kept := w[:0:0]
	for _, op := range w {
		if op.Input.(input).kind != opGet || op.Output.(output).res != resUnknown {
			kept = append(kept, op)
		}
	}
	w = kept
	sort.SliceStable(w, func(i, j int) bool { return w[i].Call < w[j].Call })
	return w, m
}

// lines writes ops one per line.
func (h *History) lines(ops []porcupine.Operation) []string {
	out := make([]string, len(ops))
	for i, op := range ops {
		in := op.Input.(input)
		ret := "∞"
		if op.Return != math.MaxInt64 {
			ret = fmt.Sprintf("%.3fms", float64(op.Return)/1e6)
		}
		out[i] = fmt.Sprintf("client %d [%.3fms, %s] key %s: %s",
			in.client, float64(op.Call)/1e6, ret, in.key, describe(h.base, in, op.Output.(output)))
	}
	return out
}
