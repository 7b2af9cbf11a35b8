package dynamodb

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemguard/idemguard/store"
)

// captureTxAPI records the TransactWriteItems request it answers with
// success.
type captureTxAPI struct {
	captureAPI
	tx *dynamodb.TransactWriteItemsInput
}

func (a *captureTxAPI) TransactWriteItems(_ context.Context, in *dynamodb.TransactWriteItemsInput, _ ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	a.tx = in
	return &dynamodb.TransactWriteItemsOutput{}, nil
}

// legacyTxComplete is the transactional completion built per request with
// the expression builder: Complete's update, conditional on the token and
// the record being in progress.
func legacyTxComplete(c *config, e *encoded, token string) (expression.Expression, error) {
	upd := expression.UpdateBuilder{}
	for _, a := range c.attrs(e) {
		switch {
		case a.name == c.tokenAttr:
		case a.v != nil:
			upd = upd.Set(name(a.name), value(a.v))
		default:
			upd = upd.Remove(name(a.name))
		}
	}
	cond := name(c.tokenAttr).Equal(value(strAttr(token))).
		And(name(c.statusAttr).Equal(value(strAttr(store.StatusInProgress.String()))))
	return expression.NewBuilder().WithCondition(cond).WithUpdate(upd).Build()
}

// TestTxCompleteMatchesBuilder checks that the completion a transaction
// sends, with its expressions built once per store, carries exactly what
// the expression builder makes for the same record, in every variant and
// layout.
func TestTxCompleteMatchesBuilder(t *testing.T) {
	t0 := time.Unix(1_900_000_000, 123_456_789).UTC()
	compressible := []byte(strings.Repeat(`{"k":"v"},`, 50))
	for _, layout := range []struct {
		name string
		opts []Option
	}{
		{"default", nil},
		{"sort-key", []Option{WithAttributes(Attributes{Key: "pk"}), WithSortKey("sk", "idempotency#f")}},
		{"unusual-names", []Option{allAttrNames(t)}},
	} {
		t.Run(layout.name, func(t *testing.T) {
			api := &captureTxAPI{}
			s, err := New(api, "t", append(layout.opts, WithCompressAbove(100))...)
			if err != nil {
				t.Fatal(err)
			}
			c := s.cfg
			ctx := context.Background()
			for m := range numCompleteVariants {
				if m&hasEncoding != 0 && m&hasData == 0 {
					continue
				}
				rec := &store.Record{Key: fmt.Sprintf("k%d", m), Status: store.StatusCompleted, Token: "tok", ExpiresAt: t0.Add(2 * time.Hour)}
				if m&hasLease != 0 {
					rec.LeaseExpiresAt = t0.Add(time.Minute)
				}
				if m&hasValidation != 0 {
					rec.PayloadHash = "h"
				}
				if m&hasData != 0 {
					rec.Result = []byte(`"ok"`)
					if m&hasEncoding != 0 {
						rec.Result = compressible
					}
				}
				if m&hasKind != 0 {
					rec.ResultKind = store.ResultError
				}
				e, err := c.encode(rec)
				if err != nil {
					t.Fatal(err)
				}
				tx, err := s.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if err := tx.Complete(ctx, rec); err != nil {
					t.Fatal(err)
				}
				if err := tx.Commit(ctx); err != nil {
					t.Fatal(err)
				}
				if len(api.tx.TransactItems) != 1 || api.tx.TransactItems[0].Update == nil {
					t.Fatalf("variant %05b: sent %+v, want one Update", m, api.tx.TransactItems)
				}
				u := api.tx.TransactItems[0].Update
				want, err := legacyTxComplete(c, e, rec.Token)
				if err != nil {
					t.Fatal(err)
				}
				sameExpr(t, fmt.Sprintf("transactional Complete variant %05b", m), want, u.ConditionExpression, u.UpdateExpression, u.ExpressionAttributeNames, u.ExpressionAttributeValues)
				if !reflect.DeepEqual(u.Key, c.keyItem(rec.Key)) || *u.TableName != "t" {
					t.Errorf("variant %05b: completion of table %s, key %v", m, *u.TableName, u.Key)
				}
				if tok := api.tx.ClientRequestToken; tok == nil || len(*tok) < 1 || len(*tok) > 36 {
					t.Errorf("ClientRequestToken %v; DynamoDB takes 1 to 36 characters", tok)
				}
			}
		})
	}
}

// TestKeyIdentity checks the item identity that finds two actions on one
// item: numbers compare by value, as DynamoDB compares key numbers, and
// the attribute names and types count.
func TestKeyIdentity(t *testing.T) {
	id := func(table string, kv ...any) string {
		key := map[string]types.AttributeValue{}
		for i := 0; i < len(kv); i += 2 {
			key[kv[i].(string)] = kv[i+1].(types.AttributeValue)
		}
		return itemIDOf(table, key)
	}
	n := func(v string) types.AttributeValue { return &types.AttributeValueMemberN{Value: v} }
	same := [][2]string{
		{id("t", "pk", n("1")), id("t", "pk", n("1.0"))},
		{id("t", "pk", n("10")), id("t", "pk", n("1e1"))},
		{id("t", "pk", strAttr("a"), "sk", n("2")), id("t", "sk", n("2.00"), "pk", strAttr("a"))},
	}
	for _, p := range same {
		if p[0] != p[1] {
			t.Errorf("%q and %q should be one item", p[0], p[1])
		}
	}
	differ := [][2]string{
		{id("t", "pk", n("1")), id("t", "pk", strAttr("1"))},
		{id("t", "pk", strAttr("a")), id("u", "pk", strAttr("a"))},
		{id("t", "pk", strAttr("a")), id("t", "id", strAttr("a"))},
		{id("t", "pk", strAttr("ab"), "sk", strAttr("c")), id("t", "pk", strAttr("a"), "sk", strAttr("bc"))},
		{id("t", "pk", &types.AttributeValueMemberB{Value: []byte("a")}), id("t", "pk", strAttr("a"))},
	}
	for _, p := range differ {
		if p[0] == p[1] {
			t.Errorf("%q should differ from %q", p[0], p[1])
		}
	}
	if got := tableName(strPtr("arn:aws:dynamodb:eu-west-1:123456789012:table/accounts")); got != "accounts" {
		t.Errorf("table of an ARN = %q, want accounts", got)
	}
}

func strPtr(s string) *string { return &s }
