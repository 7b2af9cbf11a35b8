package postgres

import (
	"context"
	"errors"

	"github.com/idemguard/idemguard/store"
)

// getManyChunk is the most keys one GetMany statement asks for.
const getManyChunk = 1000

// GetMany implements [store.BatchGetter]: one SELECT … WHERE key = ANY($1)
// per 1,000 distinct keys, so a guard.DoBatch of completed items costs one
// round trip per 1,000 items. A row that cannot be read as a record is
// left out of the map and reported in an error matching
// [store.ErrCorrupt]; the other records are returned with it.
func (s *Store) GetMany(ctx context.Context, keys []string) (map[string]*store.Record, error) {
	out := make(map[string]*store.Record, len(keys))
	if err := ctx.Err(); err != nil {
		return out, s.wrap("GetMany", "", err)
	}
	seen := make(map[string]struct{}, len(keys))
	distinct := make([]string, 0, len(keys))
	for _, k := range keys {
		if _, ok := seen[k]; !ok {
			seen[k] = struct{}{}
			distinct = append(distinct, k)
		}
	}
	var errs []error
	for len(distinct) > 0 {
		chunk := distinct[:min(len(distinct), getManyChunk)]
		distinct = distinct[len(chunk):]
		if err := s.getMany(ctx, chunk, out, &errs); err != nil {
			return out, errors.Join(append(errs, err)...)
		}
	}
	return out, errors.Join(errs...)
}

// getMany reads the records of keys into out; rows that are not records
// add to errs.
func (s *Store) getMany(ctx context.Context, keys []string, out map[string]*store.Record, errs *[]error) error {
	c, err := s.conn(ctx, "GetMany", keys[0])
	if err != nil {
		return err
	}
	defer c.Release()
	rows, err := c.Query(ctx, s.sql.getMany, keys)
	if err != nil {
		return s.wrap("GetMany", keys[0], err)
	}
	defer rows.Close()
	for rows.Next() {
		var r row
		if err := rows.Scan(r.dest()...); err != nil {
			return s.wrap("GetMany", r.key, err)
		}
		rec, err := r.record()
		if err != nil {
			*errs = append(*errs, s.wrap("GetMany", r.key, err))
			continue
		}
		out[rec.Key] = rec
	}
	return s.wrap("GetMany", keys[0], rows.Err())
}
