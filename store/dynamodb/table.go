package dynamodb

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// TableAPI is the part of the DynamoDB client [CreateTable] uses.
// *dynamodb.Client satisfies it.
type TableAPI interface {
	CreateTable(ctx context.Context, in *dynamodb.CreateTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error)
	DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
	DescribeTimeToLive(ctx context.Context, in *dynamodb.DescribeTimeToLiveInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DescribeTimeToLiveOutput, error)
	UpdateTimeToLive(ctx context.Context, in *dynamodb.UpdateTimeToLiveInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateTimeToLiveOutput, error)
}

var _ TableAPI = (*dynamodb.Client)(nil)

// ErrTTLNotEnabled is matched (with [errors.Is]) by the error [CreateTable]
// returns when the table is ready but TTL could not be enabled on it, for
// example on an emulator without TTL support. The store works without TTL,
// since it checks expiry itself, so a caller may log this error and go on;
// expired items are then never deleted.
var ErrTTLNotEnabled = errors.New("dynamodb: TTL not enabled")

// tableWait bounds how long CreateTable waits for a new table to become
// ACTIVE when ctx has no earlier deadline.
const tableWait = 5 * time.Minute

// CreateTable creates table for a [Store] made with the same options: on-demand
// capacity (PAY_PER_REQUEST), the key schema the options describe (partition
// key "id" of type S, plus the sort key in [WithSortKey] mode), and TTL
// enabled on the expiry attribute ("expiration"). It waits until the table
// is ACTIVE.
//
// It is meant for development, tests and first setups; production tables
// are better declared in infrastructure code (see the package
// documentation). If the table already exists with the same key schema,
// CreateTable only waits for it and enables TTL if it is off, so it is safe
// to call on every start; an existing table with another key schema is an
// error. If the table is ready but TTL could not be enabled, the error
// matches [ErrTTLNotEnabled].
func CreateTable(ctx context.Context, client TableAPI, table string, opts ...Option) error {
	if client == nil {
		return errors.New("dynamodb: CreateTable: nil client")
	}
	if table == "" {
		return errors.New("dynamodb: CreateTable: empty table name")
	}
	c, err := newConfig(opts)
	if err != nil {
		return err
	}
	keys := []types.KeySchemaElement{{AttributeName: aws.String(c.keyAttr), KeyType: types.KeyTypeHash}}
	defs := []types.AttributeDefinition{{AttributeName: aws.String(c.keyAttr), AttributeType: types.ScalarAttributeTypeS}}
	if c.sortKeyAttr != "" {
		keys = append(keys, types.KeySchemaElement{AttributeName: aws.String(c.sortKeyAttr), KeyType: types.KeyTypeRange})
		defs = append(defs, types.AttributeDefinition{AttributeName: aws.String(c.sortKeyAttr), AttributeType: types.ScalarAttributeTypeS})
	}
	fail := func(step string, err error) error {
		return fmt.Errorf("dynamodb: CreateTable %q: %s: %w", table, step, err)
	}

	out, err := client.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(table),
		KeySchema:            keys,
		AttributeDefinitions: defs,
		BillingMode:          types.BillingModePayPerRequest,
	})
	var inUse *types.ResourceInUseException
	var desc *types.TableDescription
	switch {
	case errors.As(err, &inUse):
		d, err := client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)})
		if err != nil {
			return fail("describing the existing table", err)
		}
		if !sameKeys(d.Table.KeySchema, keys) {
			return fail("checking the existing table", fmt.Errorf("its key schema %s differs from %s",
				keyString(d.Table.KeySchema), keyString(keys)))
		}
		desc = d.Table
	case err != nil:
		return fail("creating the table", err)
	default:
		desc = out.TableDescription
	}

	if desc == nil || desc.TableStatus != types.TableStatusActive {
		wctx, cancel := context.WithTimeout(ctx, tableWait)
		defer cancel()
		deadline, _ := wctx.Deadline()
		w := dynamodb.NewTableExistsWaiter(client, func(o *dynamodb.TableExistsWaiterOptions) {
			o.MinDelay = 500 * time.Millisecond
			o.MaxDelay = 5 * time.Second
		})
		if err := w.Wait(wctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)}, time.Until(deadline)); err != nil {
			return fail("waiting for the table to become ACTIVE", err)
		}
	}

	ttl, err := client.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(table)})
	if err == nil && ttl.TimeToLiveDescription != nil {
		d := ttl.TimeToLiveDescription
		on := d.TimeToLiveStatus == types.TimeToLiveStatusEnabled || d.TimeToLiveStatus == types.TimeToLiveStatusEnabling
		if on && aws.ToString(d.AttributeName) == c.expiryAttr {
			return nil
		}
		if on {
			return fail("enabling TTL", fmt.Errorf("%w on %q: TTL is already on attribute %q",
				ErrTTLNotEnabled, c.expiryAttr, aws.ToString(d.AttributeName)))
		}
	}
	_, err = client.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName: aws.String(table),
		TimeToLiveSpecification: &types.TimeToLiveSpecification{
			AttributeName: aws.String(c.expiryAttr),
			Enabled:       aws.Bool(true),
		},
	})
	if err != nil {
		return fail("the table is ready, but enabling TTL failed", fmt.Errorf("%w on %q: %w", ErrTTLNotEnabled, c.expiryAttr, err))
	}
	return nil
}

func sameKeys(got, want []types.KeySchemaElement) bool {
	if len(got) != len(want) {
		return false
	}
	for _, w := range want {
		found := false
		for _, g := range got {
			if aws.ToString(g.AttributeName) == aws.ToString(w.AttributeName) && g.KeyType == w.KeyType {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func keyString(ks []types.KeySchemaElement) string {
	s := ""
	for i, k := range ks {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%s %s", aws.ToString(k.AttributeName), k.KeyType)
	}
	return "(" + s + ")"
}
