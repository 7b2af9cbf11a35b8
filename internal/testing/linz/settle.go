package linz

import (
	"math"

	"github.com/anishathalye/porcupine"
)

// settle returns ops with the return of some operations whose answer was
// lost brought in from infinity, where the rest of the history bounds when
// they can have had an effect. The checker's search grows with the
// operations that may still take effect at any point, so every bound
// helps; each one keeps exactly the linearizations that matter:
//
//   - A claim (the only Acquire of its token) whose record some answer
//     shows — a read, a conflict, a fenced write that succeeded under its
//     token — ran before that answer came back.
//   - A Complete, Extend or Release of token T, once every claim of T has
//     answered and a later answer shows the key under another token or
//     absent, can only change the record before that answer: after it,
//     nothing writes T again, and the write finds nothing to change. It is
//     given that answer's return (or its own call, if later) as its own.
func settle(ops []porcupine.Operation) []porcupine.Operation {
	ops = append([]porcupine.Operation(nil), ops...)
	byKey := map[string][]int{}
	for i, op := range ops {
		k := op.Input.(input).key
		byKey[k] = append(byKey[k], i)
	}
	for _, idx := range byKey {
		settleKey(ops, idx)
	}
	return ops
}

func settleKey(ops []porcupine.Operation, idx []int) {
	known := func(op porcupine.Operation) bool {
		return op.Return != math.MaxInt64 && op.Output.(output).res != resUnknown
	}
	// shown: for each token, the returns of the answers that show its
	// record.
	shown := map[string][]porcupine.Operation{}
	claims := map[string][]int{}
	for _, i := range idx {
		op := ops[i]
		in, out := op.Input.(input), op.Output.(output)
		if in.kind == opAcquire {
			claims[in.rec.token] = append(claims[in.rec.token], i)
		}
		if !known(op) {
			continue
		}
		if out.hasRec {
			shown[out.rec.token] = append(shown[out.rec.token], op)
		}
		if out.res == resOK && (in.kind == opComplete || in.kind == opExtend || in.kind == opRelease) {
			shown[in.token] = append(shown[in.token], op)
		}
	}
	for tok, cs := range claims {
		if len(cs) != 1 {
			continue // a retried claim may land after an answer shows the other attempt's record
		}
		a := &ops[cs[0]]
		if a.Return != math.MaxInt64 {
			continue
		}
		for _, o := range shown[tok] {
			if o.Return > a.Call && o.Return < a.Return {
				a.Return = o.Return
			}
		}
	}
	for _, i := range idx {
		f := &ops[i]
		in := f.Input.(input)
		if f.Return != math.MaxInt64 || in.kind == opAcquire || in.kind == opGet {
			continue
		}
		claimed := int64(math.MinInt64)
		bounded := true
		for _, c := range claims[in.token] {
			if ops[c].Return == math.MaxInt64 {
				bounded = false
				break
			}
			claimed = max(claimed, ops[c].Return)
		}
		if !bounded {
			continue
		}
		for _, j := range idx {
			o := ops[j]
			if !known(o) || o.Call <= claimed || o.Return >= f.Return {
				continue
			}
			oin, oout := o.Input.(input), o.Output.(output)
			gone := false
			switch {
			case oout.hasRec:
				gone = oout.rec.token != in.token
			case oin.kind == opGet && oout.res == resNotFound:
				gone = true
			case oin.kind == opAcquire && oout.res == resOK:
				gone = true // the claim replaced whatever was there
			case oout.res == resOK && oin.token != in.token:
				gone = true // a fenced write under another token
			}
			if gone {
				f.Return = max(o.Return, f.Call+1)
			}
		}
	}
}
