package redis_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemguard/idemguard/internal/testing/redistest"
	"github.com/idemguard/idemguard/store"
	idemredis "github.com/idemguard/idemguard/store/redis"
)

func TestNewValidates(t *testing.T) {
	if _, err := idemredis.New(nil); err == nil {
		t.Errorf("New(nil) succeeded")
	}
	client := redistest.NewClient(t)
	for _, c := range []struct {
		opt  idemredis.Option
		name string
	}{
		{idemredis.WithMaxResultSize(0), "WithMaxResultSize"},
		{idemredis.WithExpiryGrace(-time.Second), "WithExpiryGrace"},
		{idemredis.WithReplicas(-1, time.Second), "WithReplicas"},
	} {
		if _, err := idemredis.New(client, c.opt, idemredis.WithoutServerCheck()); err == nil || !strings.Contains(err.Error(), c.name) {
			t.Errorf("New with an invalid %s = %v; want an error naming it", c.name, err)
		}
	}
}

func TestListInvalidCursor(t *testing.T) {
	f := newFixture(t)
	for _, cur := range []string{"not base64!", "bm90IGpzb24", "eyJuIjotMX0"} { // "not json", {"n":-1}
		if _, err := f.s.List(f.ctx, store.Query{Cursor: cur}); err == nil || errors.Is(err, store.ErrNotFound) {
			t.Errorf("List with cursor %q = %v; want an error", cur, err)
		}
	}
}

// List matches a prefix byte for byte: one with bytes that are not UTF-8,
// or with glob characters, lists the records under it and no others.
func TestListPrefixBytes(t *testing.T) {
	f := newFixture(t)
	for _, key := range []string{"scope\xff#1", "scope\xfe#2", "a*[b]?-^\\#3", "a*[b]?-^\\x#4", "ab#5"} {
		if _, err := f.s.Acquire(f.ctx, f.claim(key), f.t0); err != nil {
			t.Fatal(err)
		}
	}
	for prefix, want := range map[string]string{
		"scope\xff":   "scope\xff#1",
		"scope\xfe":   "scope\xfe#2",
		"a*[b]?-^\\#": "a*[b]?-^\\#3",
	} {
		page, err := f.s.List(f.ctx, store.Query{Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range page.Records {
			got = append(got, r.Key)
		}
		if len(got) != 1 || got[0] != want {
			t.Errorf("List(prefix %q) = %q, want [%q]", prefix, got, want)
		}
	}
}
