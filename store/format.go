package store

import (
	"errors"
	"fmt"
)

// FormatVersion is the version of the record format this build writes, and
// the newest it reads. A record's format covers everything about how it is
// stored: the store's layout of the item (its attributes, hash fields or
// columns and their encodings) and the encodings the guard and its
// adapters put in [Record.Result] (the default error codec's message,
// httpguard's and grpcguard's stored responses). A change to any of them
// that a build of the previous format would misread raises it. Releases
// before records carried a format wrote format 1, and records without one
// read as format 1.
const FormatVersion = 1

// ErrNewerFormat marks a stored record written in a format newer than
// [FormatVersion], by a newer release of the library: during a rolling
// deploy, or after a newer release was rolled back. Nothing of the record
// is decoded, so it is never replayed as something it is not; the error is
// a [*FormatError]. It does not match [ErrCorrupt]: the record is sound,
// and a newer build reads it.
var ErrNewerFormat = errors.New("store: record written in a newer format")

// FormatError is the error a store returns, wrapped in its [*OpError], for
// a record whose format is newer than the one it reads. It matches
// [ErrNewerFormat].
//
// The guard reports it as a store failure (guard.ErrStore, which every
// adapter treats as retryable): the function does not run and nothing is
// replayed. A retry succeeds once the process that retries runs the newer
// release, so the cure is to finish the deploy (or the rollback).
type FormatError struct {
	// Format is the record's format.
	Format int
	// Known is the newest format this build reads: [FormatVersion].
	Known int
}

// Error names both formats and what to do.
func (e *FormatError) Error() string {
	return fmt.Sprintf("record written in format %d by a newer release; this build reads formats up to %d: "+
		"finish the deploy (or the rollback) so that every process runs the same release, then retry", e.Format, e.Known)
}

// Is reports whether target is [ErrNewerFormat].
func (e *FormatError) Is(target error) bool { return target == ErrNewerFormat }

// CheckFormat is what a store does with the format n it read from a stored
// record (1 for a record that carries none): nil if this build reads it, a
// [*FormatError] if it is newer than [FormatVersion], and a [*DecodeError]
// naming attr if it is not a format at all (zero or negative). Stores call
// it before they decode anything else of the record.
func CheckFormat(attr string, n int64) error {
	switch {
	case n < 1 || n > 1<<31-1:
		return &DecodeError{Attr: attr, Reason: fmt.Sprintf("holds %d, not a record format", n)}
	case n > FormatVersion:
		return &FormatError{Format: int(n), Known: FormatVersion}
	}
	return nil
}
