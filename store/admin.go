package store

import (
	"context"
	"time"
)

// Admin is an optional interface for stores that an operator can inspect
// and repair, as the idemguard command-line tool does: list records page by
// page, and delete one whatever it holds. Nothing on a guarded call's path
// uses it.
//
// List returns the records matching q, at most q.Limit of them (a store
// may cap it; zero means the store's default), starting after q.Cursor
// ("" for the first page), and the cursor of the next page, "" after the
// last. Records are returned as stored, live or not. A store lists in its
// own order; [Page.NewestFirst] says whether that order is newest first (by
// ExpiresAt). Listing must run in memory bounded by the page size, however
// many records the store holds. An item that cannot be read as a record,
// or a record in a newer format than the store reads, is left out of its
// page; a store may then return the page (records and Next, both valid)
// together with an error matching [ErrCorrupt] or [ErrNewerFormat], as the
// DynamoDB and PostgreSQL stores do, so that callers can report it and go
// on to the next page.
//
// Delete deletes the record key unconditionally and returns [ErrNotFound]
// if there is none. To delete a claim only if it is still held under the
// token an operator read, use [Store.Release].
type Admin interface {
	List(ctx context.Context, q Query) (Page, error)
	Delete(ctx context.Context, key string) error
}

// Query selects records for [Admin.List].
type Query struct {
	// Prefix keeps records whose key starts with it, such as "<scope>#";
	// empty keeps all.
	Prefix string
	// Status keeps records with this status; zero keeps all.
	Status Status
	// Cursor is the Next of the previous page; empty for the first page.
	Cursor string
	// Limit is the most records a page holds; zero means the store's
	// default.
	Limit int
}

// Page is one page of [Admin.List].
type Page struct {
	// Records are the records of the page.
	Records []*Record
	// Next is the cursor of the next page, empty after the last.
	Next string
	// NewestFirst reports that the store lists records newest first (by
	// ExpiresAt) rather than in an order of its own.
	NewestFirst bool
}

// Purger is an optional interface for stores whose expired records stay
// until someone deletes them (PostgreSQL keeps rows; DynamoDB and Redis
// expire items themselves). Purge deletes the records that expired before
// before, in batches that do not block live claims, and returns how many it
// deleted. It deletes what it is asked to, live or not: callers must not
// pass a before later than now less their clock-skew tolerance, since a
// record that expired before it may still be live for a guard whose clock
// runs behind, and deleting it lets a retry run its side effect again.
type Purger interface {
	Purge(ctx context.Context, before time.Time) (int64, error)
}
