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

	"github.com/idemguard/idemguard/internal/epoch"
	"github.com/idemguard/idemguard/store"
)

// captureAPI records the last write request of each kind and answers it
// with success.
type captureAPI struct {
	API
	put    *dynamodb.PutItemInput
	update *dynamodb.UpdateItemInput
	del    *dynamodb.DeleteItemInput
}

func (a *captureAPI) PutItem(_ context.Context, in *dynamodb.PutItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	a.put = in
	return &dynamodb.PutItemOutput{}, nil
}

func (a *captureAPI) UpdateItem(_ context.Context, in *dynamodb.UpdateItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	a.update = in
	return &dynamodb.UpdateItemOutput{}, nil
}

func (a *captureAPI) DeleteItem(_ context.Context, in *dynamodb.DeleteItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	a.del = in
	return &dynamodb.DeleteItemOutput{}, nil
}

// allAttrNames is an option that gives every attribute-name field of the
// config (every string field named *Attr, found by reflection, so that a
// future one is covered too) an unusual name of its own: dots, spaces,
// placeholder and builder escape lookalikes, non-ASCII.
func allAttrNames(t *testing.T) Option {
	return func(c *config) {
		weird := []string{"a.b", "#0", ":0", "$n $v $c", "ünï code", "#1.:1", "status", "x", "Key", "id.id", "sk #", "$"}
		v := reflect.ValueOf(c).Elem()
		n := 0
		for i := range v.NumField() {
			f := v.Type().Field(i)
			if f.Type.Kind() != reflect.String || !strings.HasSuffix(f.Name, "Attr") {
				continue
			}
			if n == len(weird) {
				t.Fatalf("more attribute-name fields than test names: add some")
			}
			reflect.NewAt(f.Type, v.Field(i).Addr().UnsafePointer()).Elem().SetString(weird[n])
			n++
		}
		if n < 10 {
			t.Fatalf("found %d attribute-name fields, want at least 10 (keyAttr … encodingAttr, sortKeyAttr)", n)
		}
		c.partitionValue = "idempotency#weird"
	}
}

// The expressions as the store built them for each request before they
// were compiled once, kept here as the reference.

func legacyAcquire(c *config, now time.Time) (expression.Expression, error) {
	cond := expression.AttributeNotExists(name(c.keyAttr)).
		Or(name(c.expiryAttr).LessThanEqual(value(numAttr(epoch.FloorSeconds(now)))),
			expression.And(
				name(c.statusAttr).Equal(value(strAttr(store.StatusInProgress.String()))),
				expression.AttributeExists(name(c.leaseAttr)),
				name(c.leaseAttr).LessThanEqual(value(numAttr(epoch.FloorMillis(now)))),
			))
	return expression.NewBuilder().WithCondition(cond).Build()
}

func legacyComplete(c *config, e *encoded, token string) (expression.Expression, error) {
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
	cond := name(c.tokenAttr).Equal(value(strAttr(token)))
	return expression.NewBuilder().WithCondition(cond).WithUpdate(upd).Build()
}

func legacyExtend(c *config, token string, leaseExpiresAt, expiresAt time.Time) (expression.Expression, error) {
	upd := expression.Set(name(c.expiryAttr), value(numAttr(epoch.CeilSeconds(expiresAt))))
	if leaseExpiresAt.IsZero() {
		upd = upd.Remove(name(c.leaseAttr))
	} else {
		upd = upd.Set(name(c.leaseAttr), value(numAttr(epoch.CeilMillis(leaseExpiresAt))))
	}
	cond := name(c.tokenAttr).Equal(value(strAttr(token))).
		And(name(c.statusAttr).Equal(value(strAttr(store.StatusInProgress.String()))))
	return expression.NewBuilder().WithCondition(cond).WithUpdate(upd).Build()
}

func legacyRelease(c *config, token string) (expression.Expression, error) {
	cond := name(c.tokenAttr).Equal(value(strAttr(token))).
		And(name(c.statusAttr).Equal(value(strAttr(store.StatusInProgress.String()))))
	return expression.NewBuilder().WithCondition(cond).Build()
}

// sameExpr checks that a request carries exactly the expressions, names
// and values of want.
func sameExpr(t *testing.T, what string, want expression.Expression, cond, update *string, names map[string]string, values map[string]types.AttributeValue) {
	t.Helper()
	str := func(p *string) string {
		if p == nil {
			return "<nil>"
		}
		return fmt.Sprintf("%q", *p)
	}
	if str(cond) != str(want.Condition()) {
		t.Errorf("%s: condition %s, builder makes %s", what, str(cond), str(want.Condition()))
	}
	if str(update) != str(want.Update()) {
		t.Errorf("%s: update %s, builder makes %s", what, str(update), str(want.Update()))
	}
	if !reflect.DeepEqual(names, want.Names()) {
		t.Errorf("%s: names %v, builder makes %v", what, names, want.Names())
	}
	if !reflect.DeepEqual(values, want.Values()) {
		t.Errorf("%s: values %s, builder makes %s", what, fmtValues(values), fmtValues(want.Values()))
	}
}

func fmtValues(m map[string]types.AttributeValue) string {
	var b strings.Builder
	for k, v := range m {
		fmt.Fprintf(&b, "%s=%#v ", k, v)
	}
	return b.String()
}

// TestExpressionsMatchBuilder checks that the requests the store sends,
// with its expressions built once in New, carry exactly the condition and
// update expressions, ExpressionAttributeNames and
// ExpressionAttributeValues that the expression builder makes from the
// same inputs per request, as the store used to: for the default names,
// sort-key mode, and unusual names in every attribute-name field, for
// Acquire, every variant of Complete, Extend with and without a lease, and
// Release.
func TestExpressionsMatchBuilder(t *testing.T) {
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
			api := &captureAPI{}
			s, err := New(api, "t", append(layout.opts, WithCompressAbove(100))...)
			if err != nil {
				t.Fatal(err)
			}
			c := s.cfg
			ctx := context.Background()

			for _, now := range []time.Time{t0, t0.Truncate(time.Second), time.Unix(0, 0)} {
				rec := &store.Record{Key: "k", Status: store.StatusInProgress, Token: "tok", PayloadHash: "h", ExpiresAt: t0.Add(time.Hour), LeaseExpiresAt: t0.Add(time.Minute)}
				if _, err := s.Acquire(ctx, rec, now); err != nil {
					t.Fatal(err)
				}
				want, err := legacyAcquire(c, now)
				if err != nil {
					t.Fatal(err)
				}
				in := api.put
				sameExpr(t, fmt.Sprintf("Acquire at %v", now), want, in.ConditionExpression, nil, in.ExpressionAttributeNames, in.ExpressionAttributeValues)
				e, _ := c.encode(rec)
				if !reflect.DeepEqual(in.Item, c.item(rec.Key, e)) {
					t.Errorf("Acquire sent item %v, want %v", in.Item, c.item(rec.Key, e))
				}
			}

			// Complete: every combination of the attributes a record may
			// lack that encode can produce (compression needs a result).
			seen := map[int]bool{}
			for m := range numCompleteVariants {
				if m&hasEncoding != 0 && m&hasData == 0 {
					continue
				}
				rec := &store.Record{Key: "k", Status: store.StatusCompleted, Token: "tok", ExpiresAt: t0.Add(2 * time.Hour)}
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
				if got := completeVariant(e); got != m {
					t.Fatalf("record %+v is variant %05b, want %05b", rec, got, m)
				}
				seen[m] = true
				if err := s.Complete(ctx, rec); err != nil {
					t.Fatal(err)
				}
				want, err := legacyComplete(c, e, rec.Token)
				if err != nil {
					t.Fatal(err)
				}
				in := api.update
				sameExpr(t, fmt.Sprintf("Complete variant %05b", m), want, in.ConditionExpression, in.UpdateExpression, in.ExpressionAttributeNames, in.ExpressionAttributeValues)
				if !reflect.DeepEqual(in.Key, c.keyItem(rec.Key)) {
					t.Errorf("Complete sent key %v", in.Key)
				}
			}
			if len(seen) != 24 {
				t.Errorf("exercised %d variants of Complete through the store, want 24", len(seen))
			}
			// All 32 compiled variants, unreachable ones included, against
			// the builder given the same values.
			v := &slotValues{}
			for sl := range numSlots {
				v[sl] = strAttr(fmt.Sprintf("value %d", sl))
			}
			for m := range numCompleteVariants {
				e := completeShape(m, v)
				want, err := c.completeExpr(e, v[slotToken]).Build()
				if err != nil {
					t.Fatal(err)
				}
				x := s.x[exprComplete+m]
				sameExpr(t, fmt.Sprintf("compiled Complete variant %05b", m), want, x.cond, x.update, x.names, x.fill(completeSlots(e, v[slotToken])))
			}

			for _, lease := range []time.Time{{}, t0.Add(3 * time.Minute)} {
				if err := s.Extend(ctx, "k", "tok", lease, t0.Add(3*time.Hour)); err != nil {
					t.Fatal(err)
				}
				want, err := legacyExtend(c, "tok", lease, t0.Add(3*time.Hour))
				if err != nil {
					t.Fatal(err)
				}
				in := api.update
				sameExpr(t, fmt.Sprintf("Extend lease %v", lease), want, in.ConditionExpression, in.UpdateExpression, in.ExpressionAttributeNames, in.ExpressionAttributeValues)
			}

			if err := s.Release(ctx, "k", "tok"); err != nil {
				t.Fatal(err)
			}
			want, err := legacyRelease(c, "tok")
			if err != nil {
				t.Fatal(err)
			}
			in := api.del
			sameExpr(t, "Release", want, in.ConditionExpression, nil, in.ExpressionAttributeNames, in.ExpressionAttributeValues)
		})
	}
}

// TestCompileMapsPlaceholders checks that compile reads the placeholders
// back from the builder, whatever their order: an expression that takes
// its slots in an unusual order gets each value under the placeholder the
// builder gave that slot.
func TestCompileMapsPlaceholders(t *testing.T) {
	v := sentinels()
	b := expression.NewBuilder().WithCondition(
		name("a").Equal(value(v[slotData])).And(name("b").Equal(value(v[slotNowSeconds]))).
			And(name("c").Equal(value(v[slotToken]))))
	x, err := compile(b)
	if err != nil {
		t.Fatal(err)
	}
	got := x.fill(&slotValues{slotData: strAttr("data"), slotNowSeconds: numAttr(7), slotToken: strAttr("tok")})
	want := map[string]types.AttributeValue{":0": strAttr("data"), ":1": numAttr(7), ":2": strAttr("tok")}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("values %s, want %s", fmtValues(got), fmtValues(want))
	}
	if _, err := compile(expression.NewBuilder().WithCondition(name("a").Equal(value(strAttr("not a sentinel"))))); err == nil {
		t.Errorf("compile accepted a value that is not a sentinel")
	}
}

// TestItemSize checks that the size encode checks against maxItemSize is
// exactly sizeOf of the item the store writes.
func TestItemSize(t *testing.T) {
	t0 := time.Unix(1_900_000_000, 5).UTC()
	for _, opts := range [][]Option{nil, {WithAttributes(Attributes{Key: "pk"}), WithSortKey("sk", "idempotency#fn")}, {allAttrNames(t), WithCompressAbove(0)}} {
		c, err := newConfig(opts)
		if err != nil {
			t.Fatal(err)
		}
		for _, rec := range []*store.Record{
			{Key: "s#1", Status: store.StatusInProgress, Token: "t", ExpiresAt: t0, LeaseExpiresAt: t0.Add(time.Minute)},
			{Key: "s#2", Status: store.StatusCompleted, Token: "tok", PayloadHash: "h", Result: []byte(`{"a":[1,2]}`), ExpiresAt: t0},
			{Key: "s#3", Status: store.StatusCompleted, ResultKind: store.ResultError, Result: []byte("déclined \xff"), ExpiresAt: t0},
			{Key: "ü", Status: store.StatusCompleted, ResultKind: store.ResultUnavailable, ExpiresAt: time.Time{}},
			{Key: "", Status: store.StatusCompleted, Result: []byte(strings.Repeat("x", 5000)), ExpiresAt: t0},
		} {
			e, err := c.encode(rec)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := c.itemSize(rec.Key, e), sizeOf(c.item(rec.Key, e)); got != want {
				t.Errorf("itemSize(%+v) = %d, sizeOf of the item = %d", rec, got, want)
			}
		}
	}
}
