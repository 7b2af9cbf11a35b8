package redis

import (
	"context"
	"errors"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idemguard/idemguard/store"
)

// getManyChunk is how many HGETALLs one pipeline of GetMany carries at most,
// which bounds the replies held at once; a batch of that many keys or
// fewer is one round trip (per Cluster node).
const getManyChunk = 1000

// GetMany implements [store.BatchGetter]: one pipelined HGETALL per
// distinct key, up to 1,000 keys a pipeline, so a batch of up to 1,000 keys
// costs one round trip on a standalone server. A Cluster client splits the
// pipeline by node and sends the parts concurrently. A hash that cannot be
// read gives an error matching [store.ErrCorrupt] naming its key, and a
// record in a newer format one matching [store.ErrNewerFormat]; the other
// records are still returned.
func (s *Store) GetMany(ctx context.Context, keys []string) (map[string]*store.Record, error) {
	const op = "GetMany"
	out := make(map[string]*store.Record, len(keys))
	if err := ctx.Err(); err != nil {
		return out, s.opErr(op, firstKey(keys), err)
	}
	seen := make(map[string]struct{}, len(keys))
	uniq := make([]string, 0, len(keys))
	for _, k := range keys {
		if _, ok := seen[k]; !ok {
			seen[k] = struct{}{}
			uniq = append(uniq, k)
		}
	}
	var corrupt []error
	for len(uniq) > 0 {
		n := min(len(uniq), getManyChunk)
		chunk := uniq[:n]
		uniq = uniq[n:]
		errs, err := s.readMany(ctx, op, chunk, out)
		corrupt = append(corrupt, errs...)
		if err != nil {
			return out, err
		}
	}
	return out, errors.Join(corrupt...)
}

// readMany reads the records keys in one pipeline into out. It returns the
// errors of the hashes it could not decode (corrupt, or in a newer format),
// and the first other error, after which it stops.
func (s *Store) readMany(ctx context.Context, op string, keys []string, out map[string]*store.Record) (corrupt []error, err error) {
	pipe := s.client.Pipeline()
	cmds := make([]*goredis.MapStringStringCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.HGetAll(ctx, s.prefix+k)
	}
	_, _ = pipe.Exec(ctx)
	for i, cmd := range cmds {
		h, err := cmd.Result()
		rec, err := s.readResult(op, keys[i], h, err)
		switch {
		case err == nil:
			out[keys[i]] = rec
		case errors.Is(err, store.ErrNotFound):
		case errors.Is(err, store.ErrCorrupt), errors.Is(err, store.ErrNewerFormat):
			corrupt = append(corrupt, err)
		default:
			return corrupt, err
		}
	}
	return corrupt, nil
}

func firstKey(keys []string) string {
	if len(keys) == 0 {
		return ""
	}
	return keys[0]
}
