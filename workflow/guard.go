package workflow

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	tworkflow "go.temporal.io/sdk/workflow"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/temporalglue"
	"github.com/idemguard/idemguard/store"
)

// Guard returns a workflow function with wf's signature that runs wf's body
// at most once per idempotency key derived from its input, within the
// workflow type's scope: a second workflow (any workflow ID) with the same
// key returns the result the first one recorded, without running the body.
// Register it under wf's workflow type name with [Register].
//
// The workflow claims and completes the key through local activities (named
// IdempotencyClaim, IdempotencyExtend, IdempotencyComplete and
// IdempotencyRelease in its history), so it stays deterministic: on replay
// their recorded results are used and the store is not called. In order:
//
//   - Claim. If a workflow with the key has completed, its result is
//     returned. If one is running, this workflow waits for it, sleeping on
//     workflow timers and claiming again (see [WithMaxPollInterval]), and
//     returns its result, or runs the body if that workflow failed or its
//     lease lapsed; with [WithRejectInProgress] it fails instead.
//   - Body. While it runs, the claim's lease ([WithLease]) is extended by a
//     local activity every third of a lease.
//   - Complete. The body's result is stored, encoded with the data
//     converter ([WithDataConverter]). If the body returns an error, the
//     claim is released (even when the workflow was cancelled) and the
//     error returned: a later workflow with the key runs the body again.
//
// An input whose key selection is empty fails the workflow with
// activity.ErrorTypeKeyMissing: there is nothing to claim.
//
// A workflow terminated while it holds the key (termination runs no
// workflow code) blocks its key until the lease lapses. A worker crash after
// the claim succeeded and before the workflow task that recorded it
// completed is harmless: the claim runs again with the run's own fencing
// token (namespace, workflow ID, run ID) and holds the key again. Guard errors are
// returned as the application errors of idemguard's activity package
// (activity.TemporalError). Guard panics on invalid options.
func Guard[In, Out any](g *guard.Guard, wf func(tworkflow.Context, In) (Out, error), opts ...Option) func(tworkflow.Context, In) (Out, error) {
	if g == nil {
		panic("idemguard/workflow: nil guard")
	}
	c := newConfig(opts)
	_, err := g.Settings(c.guardOptions()...)
	if err == nil && setsClaim(g, c.guardOpts) {
		err = fmt.Errorf("%w: the workflow guard sets the claim's lease and mode itself: use workflow.WithLease and workflow.WithRejectInProgress, not guard.WithLease, guard.WithWait or guard.WithReject", guard.ErrInvalidOption)
	}
	if err != nil {
		panic(fmt.Sprintf("idemguard/workflow: guarding %s: %v", temporalglue.Name(wf), err))
	}
	la := localActivities{g: g, c: c, decode: func(rec *store.Record, codec guard.Codec) (any, error) {
		return guard.Decode[Out](g, rec, guard.WithCodec(codec))
	}}
	return func(ctx tworkflow.Context, in In) (Out, error) {
		return guarded(ctx, la, wf, in)
	}
}

// Register registers guarded, the result of [Guard], with r under the
// workflow type name Temporal derives from original (the function's name
// without its package, as activity.Name gives it), so that clients keep
// starting it by that name or function.
func Register(r worker.WorkflowRegistry, original, guarded any) {
	r.RegisterWorkflowWithOptions(guarded, tworkflow.RegisterOptions{Name: temporalglue.Name(original)})
}

// setsClaim reports whether opts change the claim's lease or mode, which
// the workflow guard sets itself.
func setsClaim(g *guard.Guard, opts []guard.CallOption) bool {
	base, _ := g.Settings()
	got, err := g.Settings(opts...)
	return err == nil && (got.Lease != base.Lease || got.Mode != base.Mode || got.WaitBudget != base.WaitBudget)
}

func (c *config) guardOptions() []guard.CallOption {
	var opts []guard.CallOption
	if c.keyPath != "" {
		opts = append(opts, guard.WithKeyPath(c.keyPath))
	}
	opts = append(opts, c.guardOpts...)
	return append(opts, guard.WithLease(c.lease), guard.WithReject())
}

// guarded is the body of every guarded workflow.
func guarded[In, Out any](ctx tworkflow.Context, la localActivities, wf func(tworkflow.Context, In) (Out, error), in In) (Out, error) {
	var zero Out
	c := la.c
	lctx := tworkflow.WithLocalActivityOptions(ctx, c.la)
	info := tworkflow.GetInfo(ctx)
	req := claimRequest{
		Scope: info.WorkflowType.Name,
		Input: in,
		// The run's own token: a claim repeated after a lost workflow task
		// finds its earlier claim and holds it again.
		Token: info.Namespace + "/" + info.WorkflowExecution.ID + "/" + info.WorkflowExecution.RunID,
	}

	var res claimOutcome[Out]
	for pause := minPollInterval; ; pause = min(2*pause, c.maxPoll) {
		res = claimOutcome[Out]{}
		if err := tworkflow.ExecuteLocalActivity(lctx, la.IdempotencyClaim, req).Get(lctx, &res); err != nil {
			return zero, unwrap(err)
		}
		if res.Done {
			return res.Value, nil
		}
		if res.Claim != nil {
			break
		}
		// Another workflow holds the key.
		untilLapse := res.HolderLeaseEnd.Sub(tworkflow.Now(ctx)) + time.Second
		if c.rejectInProgress {
			return zero, temporal.NewApplicationErrorWithOptions(
				fmt.Sprintf("%v (key %s)", guard.ErrInProgress, res.Key), temporalglue.ErrorTypeInProgress,
				temporal.ApplicationErrorOptions{NextRetryDelay: max(untilLapse, time.Second)})
		}
		wait := pause
		if untilLapse > 0 && untilLapse < wait {
			wait = untilLapse
		}
		if err := tworkflow.Sleep(ctx, wait); err != nil {
			return zero, err
		}
	}

	held := *res.Claim
	done := tworkflow.NewChannel(ctx)
	kept, keptSet := tworkflow.NewFuture(ctx)
	tworkflow.Go(ctx, func(ctx tworkflow.Context) {
		defer keptSet.Set(nil, nil)
		keepLease(ctx, la, done, &held)
	})

	out, err := wf(ctx, in)

	done.Close()
	_ = kept.Get(ctx, nil)
	dctx, _ := tworkflow.NewDisconnectedContext(lctx)
	if err != nil {
		if rerr := tworkflow.ExecuteLocalActivity(dctx, la.IdempotencyRelease, held).Get(dctx, nil); rerr != nil {
			tworkflow.GetLogger(ctx).Warn("idemguard: releasing the workflow's claim failed; it lapses with its lease",
				"Key", held.Key, "Error", rerr)
		}
		return zero, err
	}
	if cerr := tworkflow.ExecuteLocalActivity(dctx, la.IdempotencyComplete, completeRequest{Claim: held, Value: out}).Get(dctx, nil); cerr != nil {
		return zero, unwrap(cerr)
	}
	return out, nil
}

// keepLease extends the claim every third of a lease until done is closed
// or the claim is lost. It never cancels an extension in flight, so that
// no extension runs after the claim is completed or released.
func keepLease(ctx tworkflow.Context, la localActivities, done tworkflow.ReceiveChannel, held *guard.Claim) {
	lctx := tworkflow.WithLocalActivityOptions(ctx, la.c.la)
	for {
		tctx, cancelTimer := tworkflow.WithCancel(ctx)
		timer := tworkflow.NewTimer(tctx, la.c.lease/3)
		stopped := false
		sel := tworkflow.NewSelector(ctx)
		sel.AddReceive(done, func(tworkflow.ReceiveChannel, bool) { stopped = true })
		sel.AddFuture(timer, func(tworkflow.Future) {})
		sel.Select(ctx)
		cancelTimer()
		if stopped || ctx.Err() != nil {
			return
		}
		var next guard.Claim
		if err := tworkflow.ExecuteLocalActivity(lctx, la.IdempotencyExtend, extendRequest{Claim: *held, Lease: la.c.lease}).Get(lctx, &next); err != nil {
			tworkflow.GetLogger(ctx).Warn("idemguard: extending the workflow's claim failed", "Key", held.Key, "Error", err)
			var ae *temporal.ApplicationError
			if errors.As(err, &ae) && ae.Type() == temporalglue.ErrorTypeLeaseLost {
				return
			}
			continue
		}
		*held = next
	}
}

// unwrap returns the application error inside a local activity's error, so
// that the workflow fails with the guard's error type at the top.
func unwrap(err error) error {
	var ae *temporal.ApplicationError
	if errors.As(err, &ae) {
		return ae
	}
	return err
}

// localActivities are the local activities of one guarded workflow type.
// Temporal names a local activity after its function and checks the name on
// replay, so they are methods with value receivers of a type that is not
// generic: their names are the plain method names, whatever the workflow's
// types. Their arguments reach them in memory, not encoded; what is typed
// (decoding a stored result) is done by decode.
type localActivities struct {
	g      *guard.Guard
	c      *config
	decode func(rec *store.Record, codec guard.Codec) (any, error) // guard.Decode into the workflow's result type
}

type claimRequest struct {
	Scope string
	Input any
	Token string // the run's fencing token
}

// claimResult is what IdempotencyClaim returns, and claimOutcome is how the
// workflow reads it, with the workflow's result type.
type claimResult struct {
	// Claim is set when this workflow now holds the key.
	Claim *guard.Claim `json:"claim,omitempty"`
	// Done is set when a workflow with the key completed; Value is its
	// result.
	Done  bool `json:"done,omitempty"`
	Value any  `json:"value"`
	// Key and HolderLeaseEnd are set when another workflow holds the key.
	Key            string    `json:"key,omitempty"`
	HolderLeaseEnd time.Time `json:"holder_lease_end"`
}

type claimOutcome[Out any] struct {
	Claim          *guard.Claim `json:"claim,omitempty"`
	Done           bool         `json:"done,omitempty"`
	Value          Out          `json:"value"`
	Key            string       `json:"key,omitempty"`
	HolderLeaseEnd time.Time    `json:"holder_lease_end"`
}

type completeRequest struct {
	Claim guard.Claim
	Value any
}

type extendRequest struct {
	Claim guard.Claim
	Lease time.Duration
}

// IdempotencyClaim claims the workflow's key.
func (la localActivities) IdempotencyClaim(ctx context.Context, req claimRequest) (claimResult, error) {
	var res claimResult
	cl, rec, err := la.g.Claim(ctx, req.Scope, req.Input, append(la.c.guardOptions(), guard.WithClaimToken(req.Token))...)
	var busy *guard.InProgressError
	switch {
	case errors.As(err, &busy):
		res.Key, res.HolderLeaseEnd = busy.Key, busy.LeaseExpiresAt
		return res, nil
	case err != nil:
		return res, temporalglue.TemporalError(err, 0)
	case rec != nil:
		v, err := la.decode(rec, la.codec(ctx))
		if err != nil {
			return res, temporalglue.TemporalError(err, 0)
		}
		res.Done, res.Value = true, v
		return res, nil
	}
	res.Claim = cl
	return res, nil
}

// IdempotencyExtend extends the workflow's claim by a lease from now.
func (la localActivities) IdempotencyExtend(ctx context.Context, req extendRequest) (guard.Claim, error) {
	next, err := la.g.Extend(ctx, req.Claim, time.Now().Add(req.Lease))
	return next, finalError(err)
}

// IdempotencyComplete stores the workflow's result.
func (la localActivities) IdempotencyComplete(ctx context.Context, req completeRequest) error {
	kind := store.ResultValue
	data, err := la.codec(ctx).Marshal(req.Value)
	if err != nil {
		kind, data = store.ResultUnavailable, nil
	}
	_, err = la.g.Complete(ctx, req.Claim, kind, data)
	return finalError(err)
}

// IdempotencyRelease gives up the workflow's claim after its body failed.
func (la localActivities) IdempotencyRelease(ctx context.Context, cl guard.Claim) error {
	err := la.g.Release(ctx, cl)
	if errors.Is(err, guard.ErrLeaseLost) {
		return nil // someone else holds the key now: nothing to release
	}
	return temporalglue.TemporalError(err, 0)
}

// finalError is TemporalError, except that a lost claim is not retryable:
// retrying the local activity cannot win it back.
func finalError(err error) error {
	if errors.Is(err, guard.ErrLeaseLost) {
		return temporal.NewNonRetryableApplicationError(err.Error(), temporalglue.ErrorTypeLeaseLost, err)
	}
	return temporalglue.TemporalError(err, 0)
}

// codec encodes workflow results as the worker encodes them: with the data
// converter under the workflow's serialization context.
func (la localActivities) codec(ctx context.Context) temporalglue.PayloadCodec {
	return temporalglue.PayloadCodec{DataConverter: temporalglue.WorkflowConverter(ctx, la.c.dc)}
}
