package dynamodb

import (
	"context"
	"strconv"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemguard/idemguard/store"
)

// MarkFormat is the mark of storetest.WithNewerFormat for the store's items: it sets the
// format attribute of the item key to format, as a later release would
// write it.
func MarkFormat(t *testing.T, st store.Store, key string, format int) {
	t.Helper()
	s := st.(*Store)
	_, err := s.client.UpdateItem(context.Background(), &dynamodb.UpdateItemInput{
		TableName:                 s.tableName,
		Key:                       s.cfg.keyItem(key),
		ConditionExpression:       ptr("attribute_exists(#f)"),
		UpdateExpression:          ptr("SET #f = :n"),
		ExpressionAttributeNames:  map[string]string{"#f": s.cfg.formatAttr},
		ExpressionAttributeValues: map[string]types.AttributeValue{":n": &types.AttributeValueMemberN{Value: strconv.Itoa(format)}},
	})
	if err != nil {
		t.Fatalf("marking %q as format %d: %v", key, format, err)
	}
}

func ptr(s string) *string { return &s }

// The limits and errors the external tests check against, unexported in
// the package: users meet them as the numbers and messages the
// documentation gives.
const (
	MaxBatchGetKeys = maxBatchGetKeys
	MaxItemSize     = maxItemSize
	MaxTxActions    = maxTxActions
)

var (
	ErrTxEnded = errTxEnded
	ItemSize   = sizeOf
)

type UnprocessedError = unprocessedError
