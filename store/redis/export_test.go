package redis

import (
	"context"
	"testing"

	"github.com/idemguard/idemguard/store"
)

// MarkFormat is the mark of storetest.WithNewerFormat for the store's hashes: it sets the
// format field of the record key to format, as a later release would write
// it, and fails if the store wrote none.
func MarkFormat(t *testing.T, st store.Store, key string, format int) {
	t.Helper()
	s := st.(*Store)
	ctx := context.Background()
	if ok, err := s.client.HExists(ctx, s.prefix+key, "format").Result(); err != nil || !ok {
		t.Fatalf("the hash of %q has no format field (%v)", key, err)
	}
	if err := s.client.HSet(ctx, s.prefix+key, "format", format).Err(); err != nil {
		t.Fatalf("marking %q as format %d: %v", key, format, err)
	}
}

// What the external tests check against, unexported in the package.
const DefaultCompressAbove = defaultCompressAbove

type ReplicationError = replicationError
