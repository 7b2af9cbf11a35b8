package dynamodb

import (
	"errors"
	"fmt"
	"math/big"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// TxWrites is what a function guarded with guard.DoTx on this store writes
// through: it adds its writes to the transaction instead of sending them,
// and the guard sends them with the completion of the call's record, as one
// TransactWriteItems request, once the function has returned. They are
// applied together, or none of them is.
//
//	receipt, err := guard.DoTx(ctx, g, "charge", c, func(ctx context.Context, w *idemddb.TxWrites) (Receipt, error) {
//		if err := w.Put("charges", chargeItem(c)); err != nil {
//			return Receipt{}, err
//		}
//		err := w.Update("accounts", accountKey(c.Account),
//			expression.Add(expression.Name("balance"), expression.Value(-c.Cents)),
//			idemddb.If(expression.Name("balance").GreaterThanEqual(expression.Value(c.Cents))))
//		return Receipt{ID: c.ID}, err
//	})
//
// Actions may target any table of the account and region. Reads are the
// function's own, outside the transaction, as in DynamoDB itself; a
// condition ([If], [TxWrites.ConditionCheck]) is how a write depends on
// what an item holds when the transaction is applied.
//
// Each method checks its action against DynamoDB's limits before anything
// is sent: at most 99 actions (the guard's completion is the
// last; each guard.Step completed in the call takes one more), none on an
// item another action of the transaction already
// targets (the call's own record included), Put items of at most
// 400 KB, at most 4 MB in all. A refused action returns a
// [*TxLimitError] and fails the whole transaction: the guard sends nothing
// and releases the key, even if the function ignores the error. Two Puts
// of the same item on a table that no other action of the transaction
// keys (so that the store cannot know which attributes are its key) are
// refused by DynamoDB itself when sent, with the same error type.
//
// Its methods are safe for concurrent use. After the guard has ended the
// transaction they return an error and add nothing.
type TxWrites struct {
	s *Store

	mu       sync.Mutex
	fn       []types.TransactWriteItem // protected by mu: the function's actions
	fnMeta   []actionMeta              // protected by mu: one per action of fn
	done     []types.TransactWriteItem // protected by mu: the guard's completions, sent after fn
	doneMeta []actionMeta              // protected by mu: one per completion
	size     int                       // protected by mu: DynamoDB's count of the bytes written
	items    map[string]itemRef        // protected by mu: item identity -> the action on it
	tables   map[string]*txTable       // protected by mu: what is known of each table's key
	err      error                     // protected by mu: the first refusal; fails the transaction
	ended    bool                      // protected by mu: committed or rolled back
}

// itemRef locates an action: the i-th of the function's, or of the
// completions.
type itemRef struct {
	completion bool
	i          int
}

// actionMeta is what the store knows of one action.
type actionMeta struct {
	kind  string // "Put", "Update", "Delete", "ConditionCheck"
	table string
	key   map[string]types.AttributeValue // the primary key, when known
	rec   string                          // the record's key, for a completion
}

// txTable is what a transaction knows of one table's primary key: its
// attribute names, once an action with a Key (or the store's own
// configuration) has shown them, and the Puts whose item identity waits for
// them.
type txTable struct {
	keyAttrs []string // sorted; nil while unknown
	pending  []int    // Puts on the table added while keyAttrs was unknown
}

func newTxWrites(s *Store) *TxWrites { return &TxWrites{s: s} }

// table returns what the transaction knows of table's key, starting with
// nothing but for the store's own table. w.mu is held.
func (w *TxWrites) table(name string) *txTable {
	if t := w.tables[name]; t != nil {
		return t
	}
	if w.tables == nil {
		w.tables = make(map[string]*txTable)
	}
	t := &txTable{}
	if name == w.s.table {
		t.keyAttrs = w.s.txx.ownKeys
	}
	w.tables[name] = t
	return t
}

// note records that the item id is targeted by ref. w.mu is held.
func (w *TxWrites) note(id string, ref itemRef) {
	if w.items == nil {
		w.items = make(map[string]itemRef)
	}
	w.items[id] = ref
}

// A TxOption adjusts an action that a [TxWrites] method builds.
type TxOption func(*txOptions)

type txOptions struct {
	cond      *expression.ConditionBuilder
	returnOld bool
}

// If makes the action conditional: the transaction is applied only if
// cond holds for the action's item when DynamoDB applies it. A condition
// that fails cancels the whole transaction, and Commit returns a
// [*TxCanceledError] that names the action; guard.DoTx then releases the
// key, and nothing of the call was written.
func If(cond expression.ConditionBuilder) TxOption {
	return func(o *txOptions) { o.cond = &cond }
}

// ReturnOldOnFailure asks DynamoDB to return the action's item as it was
// when its condition failed (ReturnValuesOnConditionCheckFailure ALL_OLD):
// [TxReason.Old] of the [*TxCanceledError] then holds it.
func ReturnOldOnFailure() TxOption {
	return func(o *txOptions) { o.returnOld = true }
}

func applyTxOptions(opts []TxOption) txOptions {
	var o txOptions
	for _, f := range opts {
		if f != nil {
			f(&o)
		}
	}
	return o
}

func (o txOptions) returnValues() types.ReturnValuesOnConditionCheckFailure {
	if o.returnOld {
		return types.ReturnValuesOnConditionCheckFailureAllOld
	}
	return ""
}

// Put adds a Put of item (its primary key included) to table, replacing
// the item if it exists, unless a condition ([If]) says otherwise.
func (w *TxWrites) Put(table string, item map[string]types.AttributeValue, opts ...TxOption) error {
	o := applyTxOptions(opts)
	p := &types.Put{TableName: aws.String(table), Item: item, ReturnValuesOnConditionCheckFailure: o.returnValues()}
	if o.cond != nil {
		x, err := expression.NewBuilder().WithCondition(*o.cond).Build()
		if err != nil {
			return w.refuse(&TxLimitError{Limit: TxInvalidAction, Index: w.Len(), Table: table, Msg: "Put: " + err.Error()})
		}
		p.ConditionExpression, p.ExpressionAttributeNames, p.ExpressionAttributeValues = x.Condition(), x.Names(), x.Values()
	}
	return w.Add(types.TransactWriteItem{Put: p})
}

// Update adds an Update of the item with primary key key in table, made by
// update (built with the SDK's expression builder: expression.Set,
// expression.Add, …). DynamoDB creates the item if it does not exist,
// unless a condition ([If]) says otherwise.
func (w *TxWrites) Update(table string, key map[string]types.AttributeValue, update expression.UpdateBuilder, opts ...TxOption) error {
	o := applyTxOptions(opts)
	b := expression.NewBuilder().WithUpdate(update)
	if o.cond != nil {
		b = b.WithCondition(*o.cond)
	}
	x, err := b.Build()
	if err != nil {
		return w.refuse(&TxLimitError{Limit: TxInvalidAction, Index: w.Len(), Table: table, Msg: "Update: " + err.Error()})
	}
	return w.Add(types.TransactWriteItem{Update: &types.Update{
		TableName:                           aws.String(table),
		Key:                                 key,
		UpdateExpression:                    x.Update(),
		ConditionExpression:                 x.Condition(),
		ExpressionAttributeNames:            x.Names(),
		ExpressionAttributeValues:           x.Values(),
		ReturnValuesOnConditionCheckFailure: o.returnValues(),
	}})
}

// Delete adds a Delete of the item with primary key key in table; deleting
// an item that does not exist succeeds, unless a condition ([If]) says
// otherwise.
func (w *TxWrites) Delete(table string, key map[string]types.AttributeValue, opts ...TxOption) error {
	o := applyTxOptions(opts)
	d := &types.Delete{TableName: aws.String(table), Key: key, ReturnValuesOnConditionCheckFailure: o.returnValues()}
	if o.cond != nil {
		x, err := expression.NewBuilder().WithCondition(*o.cond).Build()
		if err != nil {
			return w.refuse(&TxLimitError{Limit: TxInvalidAction, Index: w.Len(), Table: table, Msg: "Delete: " + err.Error()})
		}
		d.ConditionExpression, d.ExpressionAttributeNames, d.ExpressionAttributeValues = x.Condition(), x.Names(), x.Values()
	}
	return w.Add(types.TransactWriteItem{Delete: d})
}

// ConditionCheck adds a check that cond holds for the item with primary
// key key in table, which the transaction does not write: the transaction
// is applied only if it does. (If is ignored here: cond is the condition.)
func (w *TxWrites) ConditionCheck(table string, key map[string]types.AttributeValue, cond expression.ConditionBuilder, opts ...TxOption) error {
	o := applyTxOptions(opts)
	x, err := expression.NewBuilder().WithCondition(cond).Build()
	if err != nil {
		return w.refuse(&TxLimitError{Limit: TxInvalidAction, Index: w.Len(), Table: table, Msg: "ConditionCheck: " + err.Error()})
	}
	return w.Add(types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{
		TableName:                           aws.String(table),
		Key:                                 key,
		ConditionExpression:                 x.Condition(),
		ExpressionAttributeNames:            x.Names(),
		ExpressionAttributeValues:           x.Values(),
		ReturnValuesOnConditionCheckFailure: o.returnValues(),
	}})
}

// Add adds actions built with the SDK's types, each with exactly one of
// Put, Update, Delete and ConditionCheck set, as TransactWriteItems takes
// them. The actions are checked one by one as the other methods check
// theirs; the first refused one fails the transaction, and the actions
// after it are not added.
func (w *TxWrites) Add(actions ...types.TransactWriteItem) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, a := range actions {
		if err := w.add(a); err != nil {
			return err
		}
	}
	return nil
}

// Len returns the number of actions the function has added.
func (w *TxWrites) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.fn)
}

// refuse fails the transaction with err, unless it has failed already, and
// returns the failure.
func (w *TxWrites) refuse(err error) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.fail(err)
}

// fail records err as the transaction's failure, unless it has one, and
// returns the failure. w.mu is held.
func (w *TxWrites) fail(err error) error {
	if w.err == nil && !w.ended {
		w.err = err
	}
	if w.ended {
		return errTxEnded
	}
	return w.err
}

// errTxEnded is returned by the methods of a [TxWrites] whose transaction
// has ended: the guard has sent or discarded it (the guarded function
// returned), so a write added now could not be part of it. Nothing was
// added.
var errTxEnded = errors.New("dynamodb: the transaction has ended (the guard committed or discarded it); nothing was added")

// add checks a and adds it to the function's actions. w.mu is held.
func (w *TxWrites) add(a types.TransactWriteItem) error {
	switch {
	case w.ended:
		return errTxEnded
	case w.err != nil:
		return w.err
	}
	i := len(w.fn)
	m, size, err := describe(a)
	if err != nil {
		return w.fail(&TxLimitError{Limit: TxInvalidAction, Index: i, Table: m.table, Msg: err.Error()})
	}
	// One action stays free for the call's own completion, which comes
	// after the function's writes and its steps' completions.
	if room := maxTxActions - len(w.done) - 1; len(w.fn)+1 > room {
		return w.fail(&TxLimitError{Limit: TxTooManyActions, Index: i, Table: m.table,
			Msg: fmt.Sprintf("a transaction holds at most %d actions, the guard's completions included: with %d step completion(s) and the call's, the function may add %d", maxTxActions, len(w.done), room)})
	}
	if m.kind == "Put" {
		if n := sizeOf(a.Put.Item); n > maxItemSize {
			return w.fail(&TxLimitError{Limit: TxItemTooLarge, Index: i, Table: m.table,
				Msg: fmt.Sprintf("the item is %d bytes, over DynamoDB's limit of %d", n, maxItemSize)})
		}
	}
	if w.size+size > maxTxSize {
		return w.fail(&TxLimitError{Limit: TxTooLarge, Index: i, Table: m.table,
			Msg: fmt.Sprintf("the transaction would write %d bytes, over DynamoDB's limit of %d", w.size+size, maxTxSize)})
	}
	w.fn = append(w.fn, a)
	w.fnMeta = append(w.fnMeta, m)
	if err := w.place(i); err != nil {
		w.fn, w.fnMeta = w.fn[:i], w.fnMeta[:i]
		return w.fail(err)
	}
	w.size += size
	return nil
}

// place notes the item the function's action i targets, and refuses an
// item another action already targets. Puts on a table whose key
// attributes are not known yet wait until an action with a Key shows
// them. w.mu is held.
func (w *TxWrites) place(i int) error {
	m := &w.fnMeta[i]
	t := w.table(m.table)
	if m.kind == "Put" {
		if t.keyAttrs == nil {
			t.pending = append(t.pending, i)
			return nil
		}
		key, err := primaryKey(t.keyAttrs, w.fn[i].Put.Item)
		if err != nil {
			return &TxLimitError{Limit: TxInvalidAction, Index: i, Table: m.table, Msg: "Put: " + err.Error()}
		}
		m.key = key
		return w.claimItem(i, m)
	}
	if t.keyAttrs == nil {
		t.keyAttrs = sortedKeys(m.key)
		for _, p := range t.pending {
			key, err := primaryKey(t.keyAttrs, w.fn[p].Put.Item)
			if err != nil {
				return &TxLimitError{Limit: TxInvalidAction, Index: p, Table: m.table, Msg: "Put: " + err.Error()}
			}
			w.fnMeta[p].key = key
			if err := w.claimItem(p, &w.fnMeta[p]); err != nil {
				return err
			}
		}
		t.pending = nil
	}
	return w.claimItem(i, m)
}

// claimItem notes that the function's action i targets the item m.key of
// m.table, or refuses it if another action does. w.mu is held.
func (w *TxWrites) claimItem(i int, m *actionMeta) error {
	id := itemIDOf(m.table, m.key)
	prev, taken := w.items[id]
	switch {
	case !taken:
		w.note(id, itemRef{i: i})
		return nil
	case prev.completion:
		return &TxLimitError{Limit: TxRecordItem, Index: i, Table: m.table,
			Msg: fmt.Sprintf("the item is the idempotency record %q, which the guard completes in the same transaction", w.doneMeta[prev.i].rec)}
	}
	a, b := min(prev.i, i), max(prev.i, i)
	return &TxLimitError{Limit: TxSameItem, Index: b, Table: m.table,
		Msg: fmt.Sprintf("action %d targets the same item; DynamoDB allows one action per item in a transaction", a)}
}

// addCompletion adds the guard's completion of record rec, whose item is
// size bytes. A refused completion is not added and does not fail the
// transaction.
func (w *TxWrites) addCompletion(rec string, a types.TransactWriteItem, size int) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.ended:
		return errTxEnded
	case w.err != nil:
		return w.err
	case len(w.fn)+len(w.done)+1 > maxTxActions:
		return &TxLimitError{Limit: TxTooManyActions, Index: -1, Table: w.s.table,
			Msg: fmt.Sprintf("the completion of %q would be action %d; a transaction holds at most %d", rec, len(w.fn)+len(w.done)+1, maxTxActions)}
	case w.size+size > maxTxSize:
		return &TxLimitError{Limit: TxTooLarge, Index: -1, Table: w.s.table,
			Msg: fmt.Sprintf("with the completion of %q the transaction would write %d bytes, over DynamoDB's limit of %d", rec, w.size+size, maxTxSize)}
	}
	key := a.Update.Key
	id := itemIDOf(w.s.table, key)
	if prev, taken := w.items[id]; taken {
		if prev.completion {
			return &TxLimitError{Limit: TxSameItem, Index: -1, Table: w.s.table, Msg: fmt.Sprintf("the record %q is completed twice", rec)}
		}
		return &TxLimitError{Limit: TxRecordItem, Index: prev.i, Table: w.s.table,
			Msg: fmt.Sprintf("the item is the idempotency record %q, which the guard completes in the same transaction", rec)}
	}
	w.note(id, itemRef{completion: true, i: len(w.done)})
	w.done = append(w.done, a)
	w.doneMeta = append(w.doneMeta, actionMeta{kind: "Update", table: w.s.table, key: key, rec: rec})
	w.size += size
	return nil
}

// seal ends the transaction and returns its actions, the function's then
// the completions, and the key of the last record it completes (the call's
// own, after its steps'); or the transaction's failure.
func (w *TxWrites) seal() ([]types.TransactWriteItem, string, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	key := ""
	if len(w.doneMeta) > 0 {
		key = w.doneMeta[len(w.doneMeta)-1].rec
	}
	if w.ended {
		return nil, key, errTxEnded
	}
	w.ended = true
	if w.err != nil {
		return nil, key, w.err
	}
	if len(w.done) == 0 {
		return w.fn, key, nil
	}
	return append(slices.Clip(w.fn), w.done...), key, nil
}

// discard ends the transaction and drops its actions.
func (w *TxWrites) discard() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ended = true
	w.fn, w.fnMeta, w.done, w.doneMeta = nil, nil, nil, nil
}

// meta returns what is known of action j of the sent transaction (the
// function's actions, then the completions).
func (w *TxWrites) metaOf(j int) (actionMeta, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if j < len(w.fnMeta) {
		return w.fnMeta[j], j
	}
	if k := j - len(w.fnMeta); k < len(w.doneMeta) {
		return w.doneMeta[k], -1
	}
	return actionMeta{}, -1
}

// describe checks the shape of action a and returns what the store knows
// of it and the bytes DynamoDB counts for it against maxTxSize: a Put's
// item, or the key and expression values of another action.
func describe(a types.TransactWriteItem) (actionMeta, int, error) {
	var m actionMeta
	n := 0
	for _, set := range []bool{a.Put != nil, a.Update != nil, a.Delete != nil, a.ConditionCheck != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		return m, 0, fmt.Errorf("an action needs exactly one of Put, Update, Delete and ConditionCheck; this one has %d", n)
	}
	var table *string
	var values map[string]types.AttributeValue
	switch {
	case a.Put != nil:
		m.kind, table = "Put", a.Put.TableName
		if len(a.Put.Item) == 0 {
			return m, 0, errors.New("Put without an item")
		}
		m.table = tableName(table)
		return m, sizeOf(a.Put.Item) + valuesSize(a.Put.ExpressionAttributeValues), checkTable(m)
	case a.Update != nil:
		m.kind, table, m.key, values = "Update", a.Update.TableName, a.Update.Key, a.Update.ExpressionAttributeValues
		if aws.ToString(a.Update.UpdateExpression) == "" {
			m.table = tableName(table)
			return m, 0, errors.New("Update without an update expression")
		}
	case a.Delete != nil:
		m.kind, table, m.key, values = "Delete", a.Delete.TableName, a.Delete.Key, a.Delete.ExpressionAttributeValues
	default:
		m.kind, table, m.key, values = "ConditionCheck", a.ConditionCheck.TableName, a.ConditionCheck.Key, a.ConditionCheck.ExpressionAttributeValues
		if aws.ToString(a.ConditionCheck.ConditionExpression) == "" {
			m.table = tableName(table)
			return m, 0, errors.New("ConditionCheck without a condition expression")
		}
	}
	m.table = tableName(table)
	if err := checkTable(m); err != nil {
		return m, 0, err
	}
	if len(m.key) == 0 || len(m.key) > 2 {
		return m, 0, fmt.Errorf("%s: a primary key has one or two attributes; this one has %d", m.kind, len(m.key))
	}
	for name, v := range m.key {
		if _, err := keyPart(v); err != nil {
			return m, 0, fmt.Errorf("%s: key attribute %q: %w", m.kind, name, err)
		}
	}
	return m, sizeOf(m.key) + valuesSize(values), nil
}

func checkTable(m actionMeta) error {
	if m.table == "" {
		return fmt.Errorf("%s without a table name", m.kind)
	}
	return nil
}

func valuesSize(values map[string]types.AttributeValue) int {
	n := 0
	for _, v := range values {
		n += attrSize(v)
	}
	return n
}

// tableName returns the table an action names, by name or by ARN
// ("arn:aws:dynamodb:REGION:ACCOUNT:table/NAME").
func tableName(t *string) string {
	s := aws.ToString(t)
	if i := strings.LastIndex(s, ":table/"); i >= 0 && strings.HasPrefix(s, "arn:") {
		return s[i+len(":table/"):]
	}
	return s
}

func sortedKeys(m map[string]types.AttributeValue) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// primaryKey returns the primary key of item, whose key attributes are attrs.
func primaryKey(attrs []string, item map[string]types.AttributeValue) (map[string]types.AttributeValue, error) {
	key := make(map[string]types.AttributeValue, len(attrs))
	for _, a := range attrs {
		v, ok := item[a]
		if !ok {
			return nil, fmt.Errorf("the item lacks the table's key attribute %q", a)
		}
		if _, err := keyPart(v); err != nil {
			return nil, fmt.Errorf("key attribute %q: %w", a, err)
		}
		key[a] = v
	}
	return key, nil
}

// itemIDOf returns a string that identifies the item with key in table:
// equal for equal keys (numbers compared by value, as DynamoDB compares
// them).
func itemIDOf(table string, key map[string]types.AttributeValue) string {
	b := make([]byte, 0, 64)
	b = appendPart(b, table)
	if len(key) == 1 {
		for k, v := range key {
			return string(appendKeyPart(appendPart(b, k), v))
		}
	}
	for _, k := range sortedKeys(key) {
		b = appendKeyPart(appendPart(b, k), key[k])
	}
	return string(b)
}

// appendPart appends s, prefixed by its length, so that no two sequences
// of parts read alike.
func appendPart(b []byte, s string) []byte {
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, ':')
	return append(b, s...)
}

// appendKeyPart appends the canonical form of a key value (see keyPart);
// an invalid one, which describe refuses first, appends nothing.
func appendKeyPart(b []byte, v types.AttributeValue) []byte {
	switch v := v.(type) {
	case *types.AttributeValueMemberS: // as appendPart(b, "S"+v.Value)
		b = strconv.AppendInt(b, int64(len(v.Value))+1, 10)
		return append(append(b, ':', 'S'), v.Value...)
	case *types.AttributeValueMemberB:
		b = strconv.AppendInt(b, int64(len(v.Value))+1, 10)
		return append(append(b, ':', 'B'), v.Value...)
	}
	p, _ := keyPart(v)
	return appendPart(b, p)
}

// keyPart returns the canonical form of a key attribute's value, which
// DynamoDB allows to be a string, a number or a binary.
func keyPart(v types.AttributeValue) (string, error) {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return "S" + v.Value, nil
	case *types.AttributeValueMemberB:
		return "B" + string(v.Value), nil
	case *types.AttributeValueMemberN:
		r, ok := new(big.Rat).SetString(v.Value)
		if !ok {
			return "", fmt.Errorf("%q is not a number", v.Value)
		}
		return "N" + r.RatString(), nil
	}
	return "", fmt.Errorf("a key attribute must be a string, a number or a binary, not %s", typeName(v))
}
