//go:build !goexperiment.jsonv2

package canonjson

import (
	"reflect"
	"testing"
)

// encoding/json's classic implementation, the default, follows the rules
// of TestClassicRules, so there those cases are also checked against it
// and fuzzed. Under GOEXPERIMENT=jsonv2, encoding/json is built on
// encoding/json/v2 and names string-kind map keys with MarshalText by the
// method, takes part of a tag name with a quote or backslash, and accepts
// map keys of other kinds; this package does not follow it there.

func init() {
	fuzzTypes = append(fuzzTypes, reflect.TypeFor[map[textStrKey][]byte](), reflect.TypeFor[badTags]())
}

func TestClassicRulesMatchEncodingJSON(t *testing.T) {
	for _, v := range []any{
		map[textStrKey]int{"s": 1}, badTags{1, 2}, map[float64]int{1: 1}, map[[2]int]int{}, map[bool]int(nil),
	} {
		checkOracle(t, v)
	}
}
