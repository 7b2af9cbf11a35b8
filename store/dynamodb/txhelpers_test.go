package dynamodb_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/testing/dynamodbtest"
	"github.com/idemguard/idemguard/store"
	idemddb "github.com/idemguard/idemguard/store/dynamodb"
)

// The transactional guard's tests share a business table next to the
// store's: accounts and charges, keyed by "pk" (S), which a guarded
// function writes through its *idemddb.TxWrites.

// txEnv is a fixture with a business table.
type txEnv struct {
	*fixture
	biz string
}

func newTxEnv(t *testing.T, opts ...idemddb.Option) *txEnv {
	t.Helper()
	e := &txEnv{fixture: newFixture(t, opts...)}
	e.biz = createBizTable(t, e.client)
	e.n.Reset()
	return e
}

// createBizTable creates a table with partition key "pk" (S), deleted
// when the test ends.
func createBizTable(t *testing.T, client *dynamodb.Client) string {
	t.Helper()
	name := dynamodbtest.TableName(t) + "-biz"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := client.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(name),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("pk"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("pk"), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	})
	if err != nil {
		t.Fatalf("CreateTable(%s): %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := client.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(name)}); err != nil {
			t.Errorf("DeleteTable(%s): %v", name, err)
		}
	})
	return name
}

func pk(v string) map[string]types.AttributeValue { return map[string]types.AttributeValue{"pk": s(v)} }

// charge is the business write of the tests' guarded functions: a charge
// item, conditional on its not existing, and the account's balance and
// charge count, incremented. A charge applied twice would fail its
// condition; an account charged twice shows it in its count.
func (e *txEnv) charge(w *idemddb.TxWrites, c charge, writer string) error {
	if err := w.Put(e.biz, map[string]types.AttributeValue{
		"pk": s("charge#" + c.ID), "account": s(c.Account), "cents": num(c.Cents), "writer": s(writer),
	}, idemddb.If(expression.AttributeNotExists(expression.Name("pk")))); err != nil {
		return err
	}
	return w.Update(e.biz, pk("acct#"+c.Account),
		expression.Add(expression.Name("balance"), expression.Value(-c.Cents)).
			Add(expression.Name("charges"), expression.Value(1)))
}

type charge struct {
	ID      string `json:"id"`
	Account string `json:"account"`
	Cents   int64  `json:"cents"`
}

// item reads an item of the business table, nil if there is none.
func (e *txEnv) item(t *testing.T, key string) map[string]types.AttributeValue {
	t.Helper()
	out, err := e.client.GetItem(e.ctx, &dynamodb.GetItemInput{TableName: aws.String(e.biz), Key: pk(key), ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatalf("GetItem(%s): %v", key, err)
	}
	return out.Item
}

// number reads the number attribute attr of item key, 0 if absent.
func (e *txEnv) number(t *testing.T, key, attr string) int64 {
	t.Helper()
	it := e.item(t, key)
	v, ok := it[attr].(*types.AttributeValueMemberN)
	if !ok {
		return 0
	}
	n, err := strconv.ParseInt(v.Value, 10, 64)
	if err != nil {
		t.Fatalf("%s.%s = %q: %v", key, attr, v.Value, err)
	}
	return n
}

// putAccount writes an account with balance.
func (e *txEnv) putAccount(t *testing.T, account string, balance int64) {
	t.Helper()
	if _, err := e.client.PutItem(e.ctx, &dynamodb.PutItemInput{TableName: aws.String(e.biz),
		Item: map[string]types.AttributeValue{"pk": s("acct#" + account), "balance": num(balance)}}); err != nil {
		t.Fatal(err)
	}
}

func (e *txEnv) guard(t *testing.T, st store.Store, opts ...guard.Option) *guard.Guard {
	t.Helper()
	if st == nil {
		st = e.s
	}
	g, err := guard.New(st, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// record returns the record of the key the guard derives for input in
// scope, or nil.
func (e *txEnv) record(t *testing.T, scope string, input any, opts ...guard.CallOption) *store.Record {
	t.Helper()
	key, _, err := e.guard(t, nil).Key(scope, input, opts...)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := e.s.Get(e.ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// offsetClock is the system clock moved by a fixed offset: a guard on it
// sees another guard's lease lapse that much sooner.
type offsetClock time.Duration

func (c offsetClock) Now() time.Time { return time.Now().Add(time.Duration(c)) }
func (offsetClock) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}
