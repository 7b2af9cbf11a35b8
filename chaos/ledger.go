package chaos

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// The ledger is a DynamoDB table, reached directly (not through the fault
// proxy: it is the suite's measuring instrument, not the system under
// test), with one item per entry. Entries are never updated: each has an id
// that no other entry can take, so the ledger can neither lose nor merge
// effects.
//
//	id                 kind    written by
//	keyed#<idem key>   keyed   the keyed body, conditional on the id not existing: the downstream dedup
//	dedup#<random>     dedup   the keyed body, when that condition failed (a re-run closed downstream)
//	plain#<effect id>  plain   the plain body, once per run (each run a fresh effect id)
//	explicit#<effect>  explicit the explicitly keyed body, once per run, with its payload
//	step#<effect id>   step    a step of the stepped body, once per run of the step, with its name
//	event#<random>     event   the activity wrapper, when the guard reports the documented window
//	                           (IdempotencyLeaseLost, IdempotencyNotRecorded)
//
// Every entry carries op, key, effect, pid, at (epoch ms) and attempt.

// Entry kinds.
const (
	EntryKeyed = "keyed"
	EntryDedup = "dedup"
	EntryPlain = "plain"
	EntryEvent = "event"
	// EntryExplicit: the explicitly keyed body's effect (a plain effect
	// with its payload).
	EntryExplicit = "explicit"
	// EntryStep: a step's effect (a plain effect with the step's name and
	// key).
	EntryStep = "step"
	// EntryTxStep: a transactional step's row, committed with its call's
	// transaction or not at all.
	EntryTxStep = "txstep"
	// EntryTx: the transactional body's row (the postgres scenario),
	// committed with the operation's record or not at all.
	EntryTx = "tx"
)

// Entry is one ledger item.
type Entry struct {
	ID      string
	Kind    string
	Op      string
	Key     string
	Effect  string
	PID     int
	At      time.Time
	Attempt int
	Event   string // for EntryEvent: the application error type
	Payload string // the run's payload (explicitly keyed bodies)
	Step    string // the step's name (EntryStep, EntryTxStep)
}

func (e *Entry) item() map[string]types.AttributeValue {
	s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	n := func(v int64) types.AttributeValue {
		return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
	}
	it := map[string]types.AttributeValue{
		"id":      s(e.ID),
		"kind":    s(e.Kind),
		"op":      s(e.Op),
		"pid":     n(int64(e.PID)),
		"at":      n(e.At.UnixMilli()),
		"attempt": n(int64(e.Attempt)),
	}
	if e.Key != "" {
		it["key"] = s(e.Key)
	}
	if e.Effect != "" {
		it["effect"] = s(e.Effect)
	}
	if e.Event != "" {
		it["event"] = s(e.Event)
	}
	if e.Payload != "" {
		it["payload"] = s(e.Payload)
	}
	if e.Step != "" {
		it["step"] = s(e.Step)
	}
	return it
}

func entryFromItem(it map[string]types.AttributeValue) (Entry, error) {
	str := func(name string) string {
		if v, ok := it[name].(*types.AttributeValueMemberS); ok {
			return v.Value
		}
		return ""
	}
	num := func(name string) int64 {
		if v, ok := it[name].(*types.AttributeValueMemberN); ok {
			n, _ := strconv.ParseInt(v.Value, 10, 64)
			return n
		}
		return 0
	}
	e := Entry{
		ID: str("id"), Kind: str("kind"), Op: str("op"), Key: str("key"), Effect: str("effect"),
		PID: int(num("pid")), At: time.UnixMilli(num("at")), Attempt: int(num("attempt")), Event: str("event"),
		Payload: str("payload"), Step: str("step"),
	}
	if e.ID == "" || e.Kind == "" || e.Op == "" {
		return e, fmt.Errorf("chaos: ledger item without id, kind or op: %v", it)
	}
	return e, nil
}

// Ledger writes and reads the ledger table.
type Ledger struct {
	Client *dynamodb.Client
	Table  string
}

// Put writes e, unconditionally but refusing to overwrite (ids are unique
// by construction; a clash would be a bug in the suite).
func (l *Ledger) Put(ctx context.Context, e *Entry) error {
	_, err := l.Client.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:           aws.String(l.Table),
		Item:                e.item(),
		ConditionExpression: aws.String("attribute_not_exists(id)"),
	})
	return err
}

// PutOnce writes e unless an entry with its id exists; then it returns
// that entry and false.
func (l *Ledger) PutOnce(ctx context.Context, e *Entry) (Entry, bool, error) {
	_, err := l.Client.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:                           aws.String(l.Table),
		Item:                                e.item(),
		ConditionExpression:                 aws.String("attribute_not_exists(id)"),
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if err == nil {
		return *e, true, nil
	}
	var ccf *types.ConditionalCheckFailedException
	if !errors.As(err, &ccf) {
		return Entry{}, false, err
	}
	if len(ccf.Item) == 0 {
		out, gerr := l.Client.GetItem(ctx, &dynamodb.GetItemInput{
			TableName: aws.String(l.Table), Key: map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: e.ID}},
			ConsistentRead: aws.Bool(true),
		})
		if gerr != nil {
			return Entry{}, false, gerr
		}
		ccf.Item = out.Item
	}
	old, perr := entryFromItem(ccf.Item)
	return old, false, perr
}

// Scan reads every entry.
func (l *Ledger) Scan(ctx context.Context) ([]Entry, error) {
	var out []Entry
	err := scanAll(ctx, l.Client, l.Table, func(it map[string]types.AttributeValue) error {
		e, err := entryFromItem(it)
		if err != nil {
			return err
		}
		out = append(out, e)
		return nil
	})
	return out, err
}

// scanAll calls f for every item of table, with consistent reads.
func scanAll(ctx context.Context, c *dynamodb.Client, table string, f func(map[string]types.AttributeValue) error) error {
	p := dynamodb.NewScanPaginator(c, &dynamodb.ScanInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true)})
	for pages := 0; p.HasMorePages(); pages++ {
		if pages > 100000 {
			return errors.New("chaos: scan of " + table + " did not end")
		}
		page, err := p.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("chaos: scanning %s: %w", table, err)
		}
		for _, it := range page.Items {
			if err := f(it); err != nil {
				return err
			}
		}
	}
	return nil
}

// createLedgerTable creates the ledger table (on-demand, key id).
func createLedgerTable(ctx context.Context, c *dynamodb.Client, table string) error {
	_, err := c.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(table),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	})
	if err != nil {
		return fmt.Errorf("chaos: creating the ledger table %s: %w", table, err)
	}
	return dynamodb.NewTableExistsWaiter(c).Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)}, time.Minute)
}

// randomID returns 128 random bits, hex.
func randomID() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
