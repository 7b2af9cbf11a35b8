package dynamodb

import (
	"fmt"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemguard/idemguard/store"
)

// The store's condition and update expressions depend on the request only
// through their values (and, for Complete and Extend, on which attributes
// are absent). The store builds each of them once, on first use, with the
// expression builder, with a sentinel value in every place a request puts a
// value, and keeps the expression strings, the ExpressionAttributeNames
// map, and, for each value placeholder the builder assigned, which request
// value it stands for. A request then only fills a fresh
// ExpressionAttributeValues map. Building per request was half of the
// store's CPU time; New builds all of them once.

// slot names a value an expression takes per request.
type slot uint8

const (
	slotNowSeconds slot = iota // Acquire: now, epoch seconds rounded down
	slotNowMillis              // Acquire: now, epoch milliseconds rounded down
	slotInProgress             // "INPROGRESS"
	slotToken                  // the caller's token
	slotStatus                 // Complete: the record's status
	slotExpiry                 // Complete, Extend: the expiry
	slotLease                  // Complete, Extend: the lease expiry
	slotValidation             // Complete: the payload hash
	slotData                   // Complete: the result
	slotKind                   // Complete: the result kind
	slotEncoding               // Complete: the result's encoding
	slotFormat                 // Complete: the record's format
	numSlots
)

// slotValues holds a request's values by slot.
type slotValues [numSlots]types.AttributeValue

// sentinelPrefix starts the S values that stand for the slots while an
// expression is built; no request value is compared with them.
const sentinelPrefix = "\x00idemguard-slot-"

func sentinel(s slot) types.AttributeValue {
	return strAttr(sentinelPrefix + strconv.Itoa(int(s)))
}

// sentinels returns a sentinel in every slot.
func sentinels() *slotValues {
	var v slotValues
	for s := range numSlots {
		v[s] = sentinel(s)
	}
	return &v
}

// placeholder maps a value placeholder (":0") to the slot it takes.
type placeholder struct {
	name string
	slot slot
}

// compiled is an expression built once: its strings and names exactly as
// the builder made them, shared by every request, and its value
// placeholders.
type compiled struct {
	cond   *string
	update *string // nil for a condition alone
	names  map[string]string
	values []placeholder
}

// fill returns the ExpressionAttributeValues of a request with values v.
func (x *compiled) fill(v *slotValues) map[string]types.AttributeValue {
	m := make(map[string]types.AttributeValue, len(x.values))
	for _, p := range x.values {
		m[p.name] = v[p.slot]
	}
	return m
}

// compile builds b, whose values are the sentinels, and reads back which
// placeholder holds which slot's sentinel.
func compile(b expression.Builder) (*compiled, error) {
	x, err := b.Build()
	if err != nil {
		return nil, err
	}
	c := &compiled{cond: x.Condition(), update: x.Update(), names: x.Names()}
	for ph, v := range x.Values() {
		s, ok := sentinelSlot(v)
		if !ok {
			return nil, fmt.Errorf("dynamodb: expression placeholder %s holds %#v, not a sentinel", ph, v)
		}
		c.values = append(c.values, placeholder{name: ph, slot: s})
	}
	return c, nil
}

func sentinelSlot(v types.AttributeValue) (slot, bool) {
	sv, ok := v.(*types.AttributeValueMemberS)
	if !ok || len(sv.Value) <= len(sentinelPrefix) || sv.Value[:len(sentinelPrefix)] != sentinelPrefix {
		return 0, false
	}
	n, err := strconv.Atoi(sv.Value[len(sentinelPrefix):])
	if err != nil || n < 0 || n >= int(numSlots) {
		return 0, false
	}
	return slot(n), true
}

// Complete's variants: which of the attributes a record may lack are
// present. Present ones are SET, absent ones REMOVEd.
const (
	hasLease = 1 << iota
	hasValidation
	hasData
	hasKind
	hasEncoding
	numCompleteVariants
)

// completeVariant returns the variant of Complete for e.
func completeVariant(e *encoded) int {
	m := 0
	if e.lease != nil {
		m |= hasLease
	}
	if e.validation != nil {
		m |= hasValidation
	}
	if e.data != nil {
		m |= hasData
	}
	if e.kind != nil {
		m |= hasKind
	}
	if e.encoding != nil {
		m |= hasEncoding
	}
	return m
}

// completeShape returns an encoded record of variant m with the values of
// v: the attributes m lacks are nil.
func completeShape(m int, v *slotValues) *encoded {
	e := &encoded{status: v[slotStatus], expiry: v[slotExpiry], token: v[slotToken], format: v[slotFormat]}
	opt := func(bit int, s slot) types.AttributeValue {
		if m&bit != 0 {
			return v[s]
		}
		return nil
	}
	e.lease = opt(hasLease, slotLease)
	e.validation = opt(hasValidation, slotValidation)
	e.data = opt(hasData, slotData)
	e.kind = opt(hasKind, slotKind)
	e.encoding = opt(hasEncoding, slotEncoding)
	return e
}

// completeSlots puts the values of e, and the condition's token, in their
// slots.
func completeSlots(e *encoded, token types.AttributeValue) *slotValues {
	return &slotValues{
		slotToken:      token,
		slotStatus:     e.status,
		slotExpiry:     e.expiry,
		slotLease:      e.lease,
		slotValidation: e.validation,
		slotData:       e.data,
		slotKind:       e.kind,
		slotEncoding:   e.encoding,
		slotFormat:     e.format,
	}
}

// The expressions a store sends, by index in Store.x.
const (
	exprAcquire     = iota // Acquire's condition
	exprRelease            // Release's condition
	exprExtend             // Extend without a lease: the lease REMOVEd
	exprExtendLease        // Extend with a lease
	exprComplete           // Complete: exprComplete + completeVariant
	numExprs        = exprComplete + numCompleteVariants
)

// buildExprs builds every expression of a store with configuration c.
func (c *config) buildExprs() (x [numExprs]*compiled, err error) {
	for i := range numExprs {
		if x[i], err = compile(c.exprBuilder(i, sentinels())); err != nil {
			return x, err
		}
	}
	return x, nil
}

// exprBuilder returns expression i with the values of v.
func (c *config) exprBuilder(i int, v *slotValues) expression.Builder {
	switch i {
	case exprAcquire:
		return c.acquireExpr(v)
	case exprRelease:
		return c.releaseExpr(v[slotToken], v[slotInProgress])
	case exprExtend:
		return c.extendExpr(v[slotExpiry], nil, v[slotToken], v[slotInProgress])
	case exprExtendLease:
		return c.extendExpr(v[slotExpiry], v[slotLease], v[slotToken], v[slotInProgress])
	}
	return c.completeExpr(completeShape(i-exprComplete, v), v[slotToken])
}

// The expressions, as builders. Store.expr builds them with sentinels;
// the tests build them with a request's values too, and compare.

// acquireExpr is Acquire's condition, the negation of
// [store.Record.Live] on the stored (rounded) times: absent, expired, or
// in progress under a lapsed lease.
func (c *config) acquireExpr(v *slotValues) expression.Builder {
	cond := expression.AttributeNotExists(name(c.keyAttr)).
		Or(name(c.expiryAttr).LessThanEqual(value(v[slotNowSeconds])),
			expression.And(
				name(c.statusAttr).Equal(value(v[slotInProgress])),
				expression.AttributeExists(name(c.leaseAttr)),
				name(c.leaseAttr).LessThanEqual(value(v[slotNowMillis])),
			))
	return expression.NewBuilder().WithCondition(cond)
}

// completeExpr is Complete's update of a record to e, conditional on token:
// every attribute but the token set to its value, or removed if absent.
func (c *config) completeExpr(e *encoded, token types.AttributeValue) expression.Builder {
	upd := expression.UpdateBuilder{}
	for _, a := range c.attrs(e) {
		switch {
		case a.name == c.tokenAttr:
			// Unchanged: the condition requires it to equal the token.
		case a.v != nil:
			upd = upd.Set(name(a.name), value(a.v))
		default:
			upd = upd.Remove(name(a.name))
		}
	}
	cond := name(c.tokenAttr).Equal(value(token))
	return expression.NewBuilder().WithCondition(cond).WithUpdate(upd)
}

// extendExpr is Extend's update, conditional on token and on the record
// being in progress: the expiry set, the lease set, or removed if nil.
func (c *config) extendExpr(expiry, lease, token, inProgress types.AttributeValue) expression.Builder {
	upd := expression.Set(name(c.expiryAttr), value(expiry))
	if lease == nil {
		upd = upd.Remove(name(c.leaseAttr))
	} else {
		upd = upd.Set(name(c.leaseAttr), value(lease))
	}
	cond := name(c.tokenAttr).Equal(value(token)).
		And(name(c.statusAttr).Equal(value(inProgress)))
	return expression.NewBuilder().WithCondition(cond).WithUpdate(upd)
}

// releaseExpr is Release's condition: held under token, and in progress.
func (c *config) releaseExpr(token, inProgress types.AttributeValue) expression.Builder {
	cond := name(c.tokenAttr).Equal(value(token)).
		And(name(c.statusAttr).Equal(value(inProgress)))
	return expression.NewBuilder().WithCondition(cond)
}

func inProgressAttr() types.AttributeValue { return strAttr(store.StatusInProgress.String()) }
