// Package leasecap marks a context whose deadline is also the end of the
// process that runs the call: an AWS Lambda invocation, whose execution
// environment is stopped when the invocation times out. A claim made with
// such a context never holds past the deadline, neither when it is taken
// nor when the guard extends it, so that it lapses when its holder is dead
// (as AWS Powertools' in-progress expiry does), not a lease later.
//
// Elsewhere a function may outlive its context's deadline, and the guard
// keeps extending its claim while it runs, so that no other call runs it
// at the same time; only an adapter that knows the process ends at the
// deadline marks its contexts.
package leasecap

import (
	"context"
	"time"
)

type markKey struct{}

// AtDeadline returns ctx marked: claims made with it, or with a context
// derived from it, hold no longer than ctx's deadline.
func AtDeadline(ctx context.Context) context.Context {
	return context.WithValue(ctx, markKey{}, true)
}

// Deadline returns the deadline past which a claim made with ctx must not
// hold, if ctx was marked by [AtDeadline] and has a deadline.
func Deadline(ctx context.Context) (time.Time, bool) {
	if ctx.Value(markKey{}) == nil {
		return time.Time{}, false
	}
	return ctx.Deadline()
}
