package dynamodb_test

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	idemddb "github.com/idemguard/idemguard/store/dynamodb"
)

// The logging snippet of docs/dynamodb.md prints a failed action's key and
// old item as values, not as pointers.
func TestTxReasonPrintsValues(t *testing.T) {
	r := idemddb.TxReason{
		Key: map[string]types.AttributeValue{"pk": s("acct#a-1")},
		Old: map[string]types.AttributeValue{"pk": s("acct#a-1"), "balance": num(100), "tags": &types.AttributeValueMemberSS{Value: []string{"x"}}},
	}
	for _, got := range []string{fmtV(r.Key), fmtV(r.Old)} {
		if containsPointer(got) || !containsAll(got, "acct#a-1") {
			t.Errorf("printed %q; want the values", got)
		}
	}
	if got := fmtV(r.Old); !containsAll(got, "100", "balance", `"x"`) {
		t.Errorf("printed old item %q; want every attribute's value", got)
	}
}

func fmtV(v any) string { return fmt.Sprintf("%v", v) }

var pointer = regexp.MustCompile(`0x[0-9a-f]{6,}`)

func containsPointer(s string) bool { return pointer.MatchString(s) }

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
