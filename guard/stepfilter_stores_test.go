package guard_test

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
	"github.com/jackc/pgx/v5"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/internal/testing/dynamodbtest"
	"github.com/idemguard/idemguard/internal/testing/postgrestest"
	"github.com/idemguard/idemguard/store"
	idemddb "github.com/idemguard/idemguard/store/dynamodb"
)

// A step's own result filter inside DoTx, on the stores whose transactions
// are real: PostgreSQL's and DynamoDB's (TransactWriteItems). The servers
// come from scripts/harness.sh; without them the tests skip, or fail when
// CI=true.

func TestStepFilterInsideDoTxPostgres(t *testing.T) {
	pool := postgrestest.NewPool(t)
	s := postgrestest.NewStore(t, pool)
	table := pgx.Identifier{postgrestest.TableName(t)}.Sanitize()
	if _, err := pool.Exec(ctx, "CREATE TABLE "+table+" (transfer text NOT NULL, part text NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+table) })
	write := func(ctx context.Context, tx pgx.Tx, transfer, part string) error {
		_, err := tx.Exec(ctx, "INSERT INTO "+table+" (transfer, part) VALUES ($1, $2)", transfer, part)
		return err
	}
	applied := func(t *testing.T, transfer string) int {
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+table+" WHERE transfer = $1", transfer).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	stepFilterInTx(t, s, write, applied)
}

func TestStepFilterInsideDoTxDynamoDB(t *testing.T) {
	client := dynamodbtest.NewClient(t)
	s := dynamodbtest.NewStore(t, client)
	biz := dynamodbtest.TableName(t) + "-biz"
	if _, err := client.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(biz),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("pk"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("pk"), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = client.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(biz)})
	})
	key := func(transfer, part string) map[string]types.AttributeValue {
		return map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: transfer + "#" + part}}
	}
	// Each write adds one to its part's count (one item per part: a
	// transaction takes one action per item): applied twice, it shows.
	write := func(_ context.Context, w *idemddb.TxWrites, transfer, part string) error {
		return w.Update(biz, key(transfer, part), expression.Add(expression.Name("n"), expression.Value(1)))
	}
	applied := func(t *testing.T, transfer string) int {
		total := 0
		for _, part := range []string{"debit", "credit"} {
			out, err := client.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(biz), Key: key(transfer, part), ConsistentRead: aws.Bool(true)})
			if err != nil {
				t.Fatal(err)
			}
			if v, ok := out.Item["n"].(*types.AttributeValueMemberN); ok {
				n, err := strconv.Atoi(v.Value)
				if err != nil {
					t.Fatal(err)
				}
				total += n
			}
		}
		return total
	}
	stepFilterInTx(t, s, write, applied)
}

// stepFilterInTx runs TestStepFilterInsideDoTx's calls on s, whose
// transactions have handle H: write applies a transfer's business write
// of one part ("debit" or "credit") in a transaction, applied counts the
// committed writes of a transfer.
func stepFilterInTx[H any](t *testing.T, s store.Store, write func(ctx context.Context, tx H, transfer, part string) error, applied func(*testing.T, string) int) {
	g := mustGuard(t, s)
	var reserves, quotes int
	fail := map[string]bool{"t-2": true}
	fn := func(ctx context.Context, tx H) (string, error) {
		transfer, _ := ctx.Value(transferKey{}).(string)
		if err := write(ctx, tx, transfer, "debit"); err != nil {
			return "", err
		}
		if _, err := guard.Step(ctx, "reserve", func(context.Context) (int, error) { reserves++; return 1, nil }); err != nil {
			return "", err
		}
		if _, err := guard.Step(ctx, "quote", func(context.Context) (int, error) { quotes++; return 42, nil }, refuseAll); err != nil {
			return "", err
		}
		if fail[transfer] {
			fail[transfer] = false
			return "", errors.New("connection reset") // rolls back
		}
		return "moved", write(ctx, tx, transfer, "credit")
	}
	call := func(transfer string) (string, guard.Outcome, error) {
		return adapt.ExecuteTx(context.WithValue(ctx, transferKey{}, transfer), g, "transfer", transfer, fn)
	}

	// The call completes: its writes and the earlier step's record commit
	// once, with the call's; the refused step's claim is released.
	if v, out, err := call("t-1"); err != nil || v != "moved" || out != guard.OutcomeExecuted {
		t.Fatalf("ExecuteTx = %q, %v, %v; want moved, executed", v, out, err)
	}
	if n := applied(t, "t-1"); n != 2 {
		t.Errorf("%d writes of t-1 committed; want the call's 2, once", n)
	}
	if rec := stepRecord(t, s, "transfer", "t-1", "reserve"); rec == nil || rec.Status != store.StatusCompleted || !rec.Live(time.Now()) {
		t.Errorf("the earlier step's record = %+v; want it completed and live", rec)
	}
	if rec := stepRecord(t, s, "transfer", "t-1", "quote"); rec != nil {
		t.Errorf("the refused step's record = %+v; want it released", rec)
	}
	if v, out, err := call("t-1"); err != nil || v != "moved" || out != guard.OutcomeReplayed || applied(t, "t-1") != 2 {
		t.Errorf("second call = %q, %v, %v; want the stored result and nothing written", v, out, err)
	}

	// The call fails after the refused step: nothing commits, and the
	// retry runs both steps again and commits the call's writes once.
	if _, _, err := call("t-2"); err == nil {
		t.Fatal("the first attempt of t-2 did not fail")
	}
	if n := applied(t, "t-2"); n != 0 {
		t.Fatalf("%d writes of t-2 committed by the rolled-back attempt; want none", n)
	}
	if v, out, err := call("t-2"); err != nil || v != "moved" || out != guard.OutcomeExecuted {
		t.Fatalf("retry of t-2 = %q, %v, %v", v, out, err)
	}
	if n := applied(t, "t-2"); n != 2 {
		t.Errorf("%d writes of t-2 committed; want the retry's 2", n)
	}
	if reserves != 3 || quotes != 3 {
		t.Errorf("reserve ran %d times, quote %d; want 3 each (t-1, then t-2 twice)", reserves, quotes)
	}
}

type transferKey struct{}
