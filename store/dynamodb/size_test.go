package dynamodb_test

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	idemddb "github.com/idemguard/idemguard/store/dynamodb"
)

// TestItemSizeMatchesDynamoDB measures, by bisection against the server,
// the size DynamoDB counts for a number attribute, and compares it with
// ItemSize. Numbers are the one type whose size is not simply its length.
func TestItemSizeMatchesDynamoDB(t *testing.T) {
	f := newFixture(t)
	fits := func(item map[string]types.AttributeValue) bool {
		_, err := f.client.PutItem(f.ctx, &dynamodb.PutItemInput{TableName: aws.String(f.table), Item: item})
		return err == nil
	}
	for _, num := range []string{
		"0", "7", "1000", "123", "1795390428000", "1795397568", "-5", "0.5", "12.5",
		"0.0012", "1E+2", "123456789012345678901234567890123456", "-0.001", "101", "10.01",
	} {
		item := func(filler int) map[string]types.AttributeValue {
			return map[string]types.AttributeValue{"id": s("k"), "d": b(make([]byte, filler)), "n": n(num)}
		}
		lo, hi := idemddb.MaxItemSize-100, idemddb.MaxItemSize
		for lo < hi { // the largest filler that fits
			mid := (lo + hi + 1) / 2
			if fits(item(mid)) {
				lo = mid
			} else {
				hi = mid - 1
			}
		}
		if got := idemddb.ItemSize(item(lo)); got != idemddb.MaxItemSize {
			t.Errorf("number %s: the largest item DynamoDB accepts measures %d by ItemSize, want %d", num, got, idemddb.MaxItemSize)
		}
	}
}
