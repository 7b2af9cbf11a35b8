package linz

import (
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/idemguard/idemguard/store"
)

// Precision is how finely a store keeps a record's times, as the store
// contract allows: ExpiresAt rounded up, never down, to a multiple of
// Expiry, and LeaseExpiresAt to within Lease. Liveness is then decided on
// the rounded times, so a record may stay live up to that much longer than
// the times the caller gave. The model accepts either answer inside those
// windows, and a returned record whose times are so rounded. The zero
// value is exact (the memory store). Both must divide a second.
type Precision struct {
	// Expiry is the step ExpiresAt is rounded up to: a second for
	// DynamoDB and Redis, a microsecond for PostgreSQL.
	Expiry time.Duration
	// Lease is the step LeaseExpiresAt is rounded to: a millisecond for
	// DynamoDB and Redis, a microsecond for PostgreSQL.
	Lease time.Duration
}

// opKind names a store operation in a history.
type opKind uint8

const (
	opAcquire opKind = iota + 1
	opComplete
	opExtend
	opRelease
	opGet
)

func (k opKind) String() string {
	switch k {
	case opAcquire:
		return "Acquire"
	case opComplete:
		return "Complete"
	case opExtend:
		return "Extend"
	case opRelease:
		return "Release"
	case opGet:
		return "Get"
	}
	return fmt.Sprintf("op(%d)", uint8(k))
}

// mrec is a record as the model keeps it: comparable, times in
// nanoseconds after the history's base time (a whole second, so that
// rounding to a store's precision is rounding of these numbers), lease 0
// for none.
type mrec struct {
	status  store.Status
	token   string
	payload string
	kind    store.ResultKind
	result  string
	exp     int64
	lease   int64
}

// input is one operation's call, as recorded.
type input struct {
	kind   opKind
	key    string
	client int
	rec    mrec  // Acquire: the claim; Complete: the completion (its token is the caller's)
	now    int64 // Acquire
	token  string
	lease  int64 // Extend
	exp    int64 // Extend
	synth  bool  // a Release the recorder added for a store that may give back a failed claim
	retry  bool  // the caller's second attempt of the same request
}

// result is what an operation answered.
type result uint8

const (
	resUnknown  result = iota // the answer was lost: the operation may or may not have run
	resOK                     // nil
	resConflict               // store.ErrConflict
	resMismatch               // store.ErrTokenMismatch
	resNotFound               // store.ErrNotFound
)

func (r result) String() string {
	switch r {
	case resOK:
		return "ok"
	case resConflict:
		return "conflict"
	case resMismatch:
		return "token mismatch"
	case resNotFound:
		return "not found"
	}
	return "unknown"
}

// output is one operation's answer, as recorded.
type output struct {
	res    result
	rec    mrec // Acquire's conflict or the claim it took over, Get's record
	hasRec bool
	err    string // the error of an unknown answer, for reading
}

// state is the model's state of one key: wild (anything, for a history
// cut from the middle of a longer one), absent, or a record.
type state struct {
	wild    bool
	present bool
	rec     mrec
}

// tri is a three-valued answer: a record can be live, not live, or
// either, when now falls inside a rounding window.
type tri uint8

const (
	no tri = iota
	yes
	maybe
)

func and(a, b tri) tri {
	switch {
	case a == no || b == no:
		return no
	case a == yes && b == yes:
		return yes
	}
	return maybe
}

func ceilTo(t int64, step time.Duration) int64 {
	s := int64(step)
	if s <= 0 {
		return t
	}
	q := t / s * s
	if q < t {
		q += s
	}
	return q
}

func floorTo(t int64, step time.Duration) int64 {
	s := int64(step)
	if s <= 0 {
		return t
	}
	q := t / s * s
	if q > t {
		q -= s
	}
	return q
}

// before reports whether now < t for a time t that the store keeps in
// [lo, hi]: yes below lo, no from hi on, maybe between.
func before(now, lo, hi int64) tri {
	switch {
	case now < lo:
		return yes
	case now >= hi:
		return no
	}
	return maybe
}

// live is store.Record.Live on the model's record, with the store's
// rounding.
func (p Precision) live(r mrec, now int64) tri {
	l := before(now, r.exp, ceilTo(r.exp, p.Expiry))
	if r.status == store.StatusInProgress && r.lease != 0 {
		l = and(l, before(now, floorTo(r.lease, p.Lease), ceilTo(r.lease, p.Lease)))
	}
	return l
}

// takeover is whether an Acquire at now that wrote replaced, in state s, a
// claim whose lease lapsed: a record in progress, not live (l) and not
// expired, with the store's rounding.
func (p Precision) takeover(s state, l tri, now int64) tri {
	if !s.present || s.rec.status != store.StatusInProgress {
		return no
	}
	notLive := yes
	switch l {
	case yes:
		notLive = no
	case maybe:
		notLive = maybe
	}
	return and(notLive, before(now, s.rec.exp, ceilTo(s.rec.exp, p.Expiry)))
}

// matches reports whether got, a record the store returned, is want as
// the store may keep it.
func (p Precision) matches(got, want mrec) bool {
	if got.status != want.status || got.token != want.token || got.payload != want.payload ||
		got.kind != want.kind || got.result != want.result {
		return false
	}
	if got.exp < want.exp || got.exp > ceilTo(want.exp, p.Expiry) {
		return false
	}
	if want.lease == 0 || got.lease == 0 {
		return want.lease == got.lease
	}
	return got.lease >= floorTo(want.lease, p.Lease) && got.lease <= ceilTo(want.lease, p.Lease)
}

// step returns the states the key can be in after in answered out in
// state s: none if it cannot have answered so. An operation whose answer
// was lost ran at its linearization point with whatever answer s gives, or
// did not run at all.
func (p Precision) step(s state, in input, out output) []state {
	if s.wild {
		return stepWild(s, in, out)
	}
	next := p.step1(s, in, out)
	if out.res == resUnknown && !slices.Contains(next, s) {
		next = append(next, s)
	}
	return next
}

func (p Precision) step1(s state, in input, out output) []state {
	held := s.present && s.rec.token == in.token
	inProgress := held && s.rec.status == store.StatusInProgress
	switch in.kind {
	case opAcquire:
		l := no
		if s.present {
			l = p.live(s.rec, in.now)
		}
		wrote := state{present: true, rec: in.rec}
		switch out.res {
		case resUnknown:
			if l != yes {
				return []state{wrote}
			}
			return []state{s}
		case resOK:
			// It wrote, and returned the record it replaced iff that was a
			// claim whose lease lapsed (not live, not expired).
			if tk := p.takeover(s, l, in.now); l != yes && (out.hasRec && tk != no && p.matches(out.rec, s.rec) || !out.hasRec && tk != yes) {
				return []state{wrote}
			}
		case resConflict:
			if l != no && (!out.hasRec || p.matches(out.rec, s.rec)) {
				return []state{s}
			}
		}
		return nil
	case opComplete:
		done := s
		if held {
			done.rec = in.rec
			done.rec.status = store.StatusCompleted
			done.rec.token = s.rec.token
		}
		switch out.res {
		case resUnknown:
			return []state{done}
		case resOK:
			if held {
				return []state{done}
			}
		case resMismatch:
			if !held {
				return []state{s}
			}
		}
		return nil
	case opExtend:
		ext := s
		if inProgress {
			ext.rec.lease, ext.rec.exp = in.lease, in.exp
		}
		switch out.res {
		case resUnknown:
			return []state{ext}
		case resOK:
			if inProgress {
				return []state{ext}
			}
		case resMismatch:
			if !inProgress {
				return []state{s}
			}
		}
		return nil
	case opRelease:
		rel := s
		if inProgress {
			rel = state{}
		}
		switch out.res {
		case resUnknown:
			return []state{rel}
		case resOK:
			if inProgress {
				return []state{rel}
			}
		case resMismatch:
			if !inProgress {
				return []state{s}
			}
		}
		return nil
	case opGet:
		switch out.res {
		case resUnknown:
			return []state{s}
		case resNotFound:
			if !s.present {
				return []state{s}
			}
		case resOK:
			if s.present && out.hasRec && p.matches(out.rec, s.rec) {
				return []state{s}
			}
		}
		return nil
	}
	return nil
}

// stepWild steps from a state the model knows nothing about: every answer
// is possible, and an answer that shows the record pins it.
func stepWild(s state, in input, out output) []state {
	switch {
	case in.kind == opAcquire && out.res == resOK:
		return []state{{present: true, rec: in.rec}}
	case in.kind == opAcquire && out.res == resConflict && out.hasRec,
		in.kind == opGet && out.res == resOK && out.hasRec:
		return []state{{present: true, rec: out.rec}}
	case in.kind == opGet && out.res == resNotFound,
		in.kind == opRelease && out.res == resOK:
		return []state{{}}
	case in.kind == opComplete && out.res == resOK:
		done := in.rec
		done.status = store.StatusCompleted
		return []state{{present: true, rec: done}}
	}
	return []state{s}
}

// model is the sequential specification of one key of a store, for
// porcupine.
func (p Precision) model(base time.Time) porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Partition: partitionByKey,
		Init:      func() []any { return []any{state{}} },
		Step: func(st, in, out any) []any {
			next := p.step(st.(state), in.(input), out.(output))
			res := make([]any, len(next))
			for i, n := range next {
				res[i] = n
			}
			return res
		},
		Hash: func(st any) uint64 {
			s := st.(state)
			h := fnv.New64a()
			fmt.Fprintf(h, "%v|%v|%v", s.wild, s.present, s.rec)
			return h.Sum64()
		},
		DescribeOperation: func(in, out any) string { return describe(base, in.(input), out.(output)) },
		DescribeState:     func(st any) string { return describeState(base, st.(state)) },
	}
	return nm.ToModel()
}

// wildModel is model starting from a state it knows nothing about, for a
// window cut from a history.
func (p Precision) wildModel(base time.Time) porcupine.Model {
	m := p.model(base)
	m.Init = func() any { return []any{state{wild: true}} }
	return m
}

func partitionByKey(h []porcupine.Operation) [][]porcupine.Operation {
	idx := map[string]int{}
	var parts [][]porcupine.Operation
	for _, op := range h {
		k := op.Input.(input).key
		i, ok := idx[k]
		if !ok {
			i = len(parts)
			idx[k] = i
			parts = append(parts, nil)
		}
		parts[i] = append(parts[i], op)
	}
	return parts
}

// at writes t, nanoseconds after base, as seconds after base.
func at(t int64) string {
	return fmt.Sprintf("+%.3fs", float64(t)/1e9)
}

func describeRec(r mrec) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s tok=%s exp=%s", r.status, r.token, at(r.exp))
	if r.lease != 0 {
		fmt.Fprintf(&b, " lease=%s", at(r.lease))
	}
	if r.status == store.StatusCompleted {
		fmt.Fprintf(&b, " %s[%d]", r.kind, len(r.result))
	}
	return b.String()
}

func describeState(_ time.Time, s state) string {
	switch {
	case s.wild:
		return "unknown"
	case !s.present:
		return "absent"
	}
	return describeRec(s.rec)
}

// describe writes one operation as a line of a report.
func describe(_ time.Time, in input, out output) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s(", in.kind)
	switch in.kind {
	case opAcquire:
		fmt.Fprintf(&b, "now=%s, %s", at(in.now), describeRec(in.rec))
	case opComplete:
		fmt.Fprintf(&b, "tok=%s, exp=%s", in.token, at(in.rec.exp))
	case opExtend:
		lease := "none"
		if in.lease != 0 {
			lease = at(in.lease)
		}
		fmt.Fprintf(&b, "tok=%s, lease=%s, exp=%s", in.token, lease, at(in.exp))
	case opRelease:
		fmt.Fprintf(&b, "tok=%s", in.token)
	}
	b.WriteString(")")
	if in.retry {
		b.WriteString(" retried")
	}
	if in.synth {
		b.WriteString(" (the store's own release of a failed claim)")
	}
	b.WriteString(" → ")
	switch {
	case out.res == resUnknown:
		b.WriteString("answer lost")
		if out.err != "" {
			fmt.Fprintf(&b, " (%s)", out.err)
		}
	case out.hasRec:
		fmt.Fprintf(&b, "%s [%s]", out.res, describeRec(out.rec))
	case in.kind == opAcquire && out.res == resConflict:
		b.WriteString("conflict [record gone]")
	default:
		b.WriteString(out.res.String())
	}
	return b.String()
}
