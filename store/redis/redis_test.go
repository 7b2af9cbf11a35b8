package redis_test

import (
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idemguard/idemguard/internal/testing/redistest"
	"github.com/idemguard/idemguard/store"
	idemredis "github.com/idemguard/idemguard/store/redis"
	"github.com/idemguard/idemguard/store/storetest"
)

// smallLimit is the result limit of the conformance run that checks
// store.ErrTooLarge.
const smallLimit = 1 << 20

func TestConformance(t *testing.T) {
	named := watchClientName()
	client := redistest.NewClient(t, named)
	var o goredis.Options
	named(&o)
	probe := storetest.WithWatchProbe(watchProbe(client, o.ClientName))
	for _, mode := range []struct {
		name  string
		opts  []idemredis.Option
		suite []storetest.Option
	}{
		{"default", nil, nil},
		{"limited", []idemredis.Option{idemredis.WithMaxResultSize(smallLimit), idemredis.WithCompressAbove(0)},
			[]storetest.Option{storetest.WithTooLarge(smallLimit + 1)}},
		{"no-grace-no-compression", []idemredis.Option{idemredis.WithExpiryGrace(0), idemredis.WithCompressAbove(-1)}, nil},
	} {
		t.Run(mode.name, func(t *testing.T) {
			storetest.Run(t, func(t *testing.T) store.Store {
				return redistest.NewStore(t, client, mode.opts...)
			}, append(mode.suite, probe, storetest.WithNewerFormat(idemredis.MarkFormat))...)
		})
	}
}
