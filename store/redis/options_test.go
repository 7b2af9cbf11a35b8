package redis_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemguard/idemguard/internal/redistest"
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
