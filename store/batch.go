package store

import (
	"context"
	"errors"
)

// BatchGetter is an optional interface a [Store] may implement to read many
// records in few round trips. The guard probes for it with a type assertion
// when it runs a batch (guard.DoBatch): with it, a batch whose items mostly
// completed earlier costs a few reads instead of one write per item; without
// it, the guard claims each item on its own, which is correct but costs more.
//
// GetMany returns the records stored under keys, read with strongly
// consistent reads, in a map by key. A key with no record is simply absent
// from the map; duplicate keys are allowed and read once. Records are
// returned as stored, live or not: whether a record may be replayed is the
// caller's decision (see [Record.Live]). A store with a limit on keys per
// request (DynamoDB's BatchGetItem takes 100) splits keys into requests
// itself, and retries keys the backend left unprocessed.
//
// GetMany may be called concurrently, must honour the context, and returns
// records that belong to the caller, like [Store.Get]. On error, the map may
// still hold the records read before the failure; they are valid, and the
// caller may use them. Errors follow the package's conventions: throttling
// that outlasts the store's retries matches [ErrThrottled], an item that
// cannot be read as a record matches [ErrCorrupt], and a record in a newer
// format than the store reads [ErrNewerFormat] (the other records are
// still returned, and the key is absent from the map). A store that implements BatchGetter but cannot serve
// batch reads at run time returns [ErrSkip].
type BatchGetter interface {
	GetMany(ctx context.Context, keys []string) (map[string]*Record, error)
}

// ErrSkip may be returned by the method of an optional interface, such as
// [BatchGetter.GetMany], to say that the fast path is unavailable at run
// time: the caller goes on as if the store did not implement the interface.
// Nothing was read or written. (It plays the part of database/sql/driver's
// ErrSkip.)
var ErrSkip = errors.New("store: optional operation not available")
