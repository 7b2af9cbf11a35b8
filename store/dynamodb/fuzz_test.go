package dynamodb

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemguard/idemguard/store"
)

// FuzzDecodeItem feeds DecodeItem items written in DynamoDB's JSON wire
// form ({"id":{"S":"k"},"expiration":{"N":"1"},…}); the seed corpus in
// testdata/fuzz/FuzzDecodeItem holds items as this store, AWS Powertools
// for Python and for TypeScript write them, and damaged ones. DecodeItem
// must never panic, must fail only with ErrCorrupt, and a record it reads
// must survive being written and read again unchanged.
func FuzzDecodeItem(f *testing.F) {
	s, err := New(nopAPI{}, "fuzz")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, wire string) {
		item, err := parseItemJSON([]byte(wire))
		if err != nil {
			t.Skip()
		}
		rec, err := s.DecodeItem(item)
		if err != nil {
			if !errors.Is(err, store.ErrCorrupt) {
				t.Fatalf("DecodeItem failed with %v, which is not ErrCorrupt", err)
			}
			return
		}
		if rec.Status != store.StatusInProgress && rec.Status != store.StatusCompleted {
			t.Fatalf("DecodeItem returned status %v", rec.Status)
		}
		e, err := s.cfg.encode(rec)
		if errors.Is(err, store.ErrTooLarge) {
			return // a foreign item's result may grow as JSON text
		}
		if err != nil {
			t.Fatalf("re-encoding %+v: %v", rec, err)
		}
		again, err := s.DecodeItem(s.cfg.item(rec.Key, e))
		if err != nil {
			t.Fatalf("reading back %+v: %v", rec, err)
		}
		if d := diff(again, rec); d != "" {
			t.Fatalf("write and read changed the record: %s", d)
		}
	})
}

// nopAPI is a client that is never called.
type nopAPI struct{ API }

// parseItemJSON parses an item in DynamoDB's JSON wire form.
func parseItemJSON(b []byte) (map[string]types.AttributeValue, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, err
	}
	item := make(map[string]types.AttributeValue, len(raw))
	for k, v := range raw {
		av, err := parseAttrJSON(v, 0)
		if err != nil {
			return nil, err
		}
		item[k] = av
	}
	return item, nil
}

func parseAttrJSON(b json.RawMessage, depth int) (types.AttributeValue, error) {
	if depth > 100 {
		return nil, errors.New("too deep")
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	if len(m) != 1 {
		return nil, fmt.Errorf("attribute value with %d types", len(m))
	}
	for typ, v := range m {
		switch typ {
		case "S":
			var s string
			err := json.Unmarshal(v, &s)
			return &types.AttributeValueMemberS{Value: s}, err
		case "N":
			var s string
			err := json.Unmarshal(v, &s)
			return &types.AttributeValueMemberN{Value: s}, err
		case "B":
			var s string
			if err := json.Unmarshal(v, &s); err != nil {
				return nil, err
			}
			bs, err := base64.StdEncoding.DecodeString(s)
			return &types.AttributeValueMemberB{Value: bs}, err
		case "BOOL":
			var x bool
			err := json.Unmarshal(v, &x)
			return &types.AttributeValueMemberBOOL{Value: x}, err
		case "NULL":
			var x bool
			err := json.Unmarshal(v, &x)
			return &types.AttributeValueMemberNULL{Value: x}, err
		case "SS", "NS":
			var ss []string
			err := json.Unmarshal(v, &ss)
			if typ == "SS" {
				return &types.AttributeValueMemberSS{Value: ss}, err
			}
			return &types.AttributeValueMemberNS{Value: ss}, err
		case "BS":
			var ss []string
			if err := json.Unmarshal(v, &ss); err != nil {
				return nil, err
			}
			bs := make([][]byte, len(ss))
			for i, s := range ss {
				var err error
				if bs[i], err = base64.StdEncoding.DecodeString(s); err != nil {
					return nil, err
				}
			}
			return &types.AttributeValueMemberBS{Value: bs}, nil
		case "M":
			var mm map[string]json.RawMessage
			if err := json.Unmarshal(v, &mm); err != nil {
				return nil, err
			}
			out := make(map[string]types.AttributeValue, len(mm))
			for k, e := range mm {
				av, err := parseAttrJSON(e, depth+1)
				if err != nil {
					return nil, err
				}
				out[k] = av
			}
			return &types.AttributeValueMemberM{Value: out}, nil
		case "L":
			var l []json.RawMessage
			if err := json.Unmarshal(v, &l); err != nil {
				return nil, err
			}
			out := make([]types.AttributeValue, len(l))
			for i, e := range l {
				av, err := parseAttrJSON(e, depth+1)
				if err != nil {
					return nil, err
				}
				out[i] = av
			}
			return &types.AttributeValueMemberL{Value: out}, nil
		}
		return nil, fmt.Errorf("unknown type %q", typ)
	}
	return nil, errors.New("unreachable")
}

// TestFuzzSeedsParse keeps the seed corpus honest: every seed parses as an
// item, and the valid ones decode to what their names promise.
func TestFuzzSeedsParse(t *testing.T) {
	s, _ := New(nopAPI{}, "fuzz")
	seeds := fuzzSeeds(t)
	if len(seeds) < 10 {
		t.Fatalf("only %d seeds in testdata/fuzz/FuzzDecodeItem", len(seeds))
	}
	for name, wire := range seeds {
		item, err := parseItemJSON([]byte(wire))
		if err != nil {
			t.Errorf("seed %s does not parse: %v", name, err)
			continue
		}
		rec, err := s.DecodeItem(item)
		corruptSeed := strings.HasPrefix(name, "corrupt-")
		switch {
		case corruptSeed && !errors.Is(err, store.ErrCorrupt):
			t.Errorf("seed %s: DecodeItem = %+v, %v; want ErrCorrupt", name, rec, err)
		case !corruptSeed && err != nil:
			t.Errorf("seed %s: DecodeItem = %v", name, err)
		}
	}
}

// fuzzSeeds reads the seed corpus: file name → the string it holds.
func fuzzSeeds(t *testing.T) map[string]string {
	t.Helper()
	dir := filepath.Join("testdata", "fuzz", "FuzzDecodeItem")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	seeds := make(map[string]string)
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if len(lines) != 2 || lines[0] != "go test fuzz v1" ||
			!strings.HasPrefix(lines[1], "string(") || !strings.HasSuffix(lines[1], ")") {
			t.Fatalf("seed %s is not a one-string corpus file", e.Name())
		}
		s, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(lines[1], "string("), ")"))
		if err != nil {
			t.Fatalf("seed %s: %v", e.Name(), err)
		}
		seeds[e.Name()] = s
	}
	return seeds
}
