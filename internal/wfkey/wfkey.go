// Package wfkey holds what the workflow package and the worker interceptor
// of the activity package share, so that neither re-exports the other's
// plumbing: the context keys through which a workflow's explicit
// idempotency key travels from workflow.ContextWithKey to the interceptor,
// which stamps it into the header of each activity scheduled with that
// context; and the header in which a guarded workflow that continues as new
// hands its claim to the next run, which only interceptors can read.
package wfkey

import (
	commonpb "go.temporal.io/api/common/v1"
	tworkflow "go.temporal.io/sdk/workflow"
)

// ClaimHeader is the workflow header field in which a guarded workflow that
// continues as new hands its claim to the next run.
const ClaimHeader = "idemguard-claim"

type handoverCtx struct{}

// WithHandover returns a copy of ctx that carries p, the ClaimHeader field
// of the run's header.
func WithHandover(ctx tworkflow.Context, p *commonpb.Payload) tworkflow.Context {
	return tworkflow.WithValue(ctx, handoverCtx{}, p)
}

// Handover returns the payload set with [WithHandover], if any.
func Handover(ctx tworkflow.Context) *commonpb.Payload {
	p, _ := ctx.Value(handoverCtx{}).(*commonpb.Payload)
	return p
}

type keyCtx struct{}

type installedCtx struct{}

// With returns a copy of ctx that carries key for the activities scheduled
// with it.
func With(ctx tworkflow.Context, key string) tworkflow.Context {
	return tworkflow.WithValue(ctx, keyCtx{}, key)
}

// From returns the key set with [With], if any.
func From(ctx tworkflow.Context) (string, bool) {
	k, ok := ctx.Value(keyCtx{}).(string)
	return k, ok && k != ""
}

// Install marks ctx as running under the interceptor that stamps keys.
func Install(ctx tworkflow.Context) tworkflow.Context {
	return tworkflow.WithValue(ctx, installedCtx{}, true)
}

// Installed reports whether ctx runs under the interceptor that stamps
// keys, so that a key is never set where nothing would send it.
func Installed(ctx tworkflow.Context) bool {
	b, _ := ctx.Value(installedCtx{}).(bool)
	return b
}
