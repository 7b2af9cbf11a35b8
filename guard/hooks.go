package guard

import (
	"context"
	"time"

	"github.com/idemguard/idemguard/internal/guardhook"
	"github.com/idemguard/idemguard/store"
)

// outcomeReport is the option of an adapter's call that wants its outcome
// (guardhook.ReportOutcome): the call stores it through out.
type outcomeReport struct{ out *Outcome }

func (o outcomeReport) applyCall(c *config) { c.report = o.out }

// lifted is a [CallOption] an adapter was given by its user and applies
// as a guard's default or to a batch's items: what a call option cannot be
// there (WithKey) is refused when it is applied.
type lifted struct{ CallOption }

func (o lifted) applyGuard(s *settings)    { o.applyCall(&s.calls) }
func (o lifted) applyBatch(b *batchConfig) { o.applyCall(&b.calls) }

func init() {
	guardhook.Lift = func(o CallOption) SharedOption {
		if s, ok := o.(SharedOption); ok {
			return s
		}
		return lifted{o}
	}
	guardhook.Fixed = fixed
	guardhook.WithDefaults = withDefaults
	guardhook.WithClaimToken = withClaimToken
	guardhook.WithClock = withClock
	guardhook.WithErrorCodec = withErrorCodec
	guardhook.WithWaitBackoff = withWaitBackoff
	guardhook.WithSpanAttributes = withSpanAttributes
	guardhook.WithKeySelectionAttribute = withKeySelectionAttribute
	guardhook.WithResume = withResume
	guardhook.WithItemDone = withItemDone
	guardhook.ReportOutcome = func(out *Outcome) CallOption { return outcomeReport{out} }
	guardhook.Settings = (*Guard).callSettings
	guardhook.DecodeInto = (*Guard).decodeInto
	guardhook.Obtain = func(ctx context.Context, g *Guard, scope string, input any, opts ...CallOption) (*heldClaim, *store.Record, error) {
		return g.obtain(ctx, scope, input, opts...)
	}
	guardhook.Complete = func(ctx context.Context, g *Guard, cl heldClaim, kind store.ResultKind, result []byte, opts ...CallOption) (*store.Record, error) {
		return g.completeClaim(ctx, cl, kind, result, opts...)
	}
	guardhook.Finish = func(ctx context.Context, g *Guard, cl heldClaim, v any, fnErr error, opts ...CallOption) (*store.Record, error) {
		return g.finishClaim(ctx, cl, v, fnErr, opts...)
	}
	guardhook.Release = func(ctx context.Context, g *Guard, cl heldClaim) error { return g.releaseClaim(ctx, cl) }
	guardhook.Extend = func(ctx context.Context, g *Guard, cl heldClaim, leaseExpiresAt time.Time, opts ...CallOption) (heldClaim, error) {
		return g.extendClaim(ctx, cl, leaseExpiresAt, opts...)
	}
}
