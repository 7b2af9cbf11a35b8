package workflow

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	tworkflow "go.temporal.io/sdk/workflow"

	"github.com/idemguard/idemguard/activity"
	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/internal/wfkey"
	"github.com/idemguard/idemguard/store"
)

// Wrap returns a workflow function with wf's signature that runs wf's body
// at most once per idempotency key derived from its input, within the
// workflow type's scope: a second workflow (any workflow ID) with the same
// key returns the result the first one recorded, without running the body.
// Register it under wf's workflow type name with [Register].
//
// The workflow claims and completes the key through local activities (named
// IdempotencyClaim, IdempotencyExtend, IdempotencyComplete and
// IdempotencyRelease in its history), so it stays deterministic: on replay their recorded results are
// used and the store is not called. In order:
//
//   - Claim. If a workflow with the key has completed, its result is
//     returned (or its stored definite error). If one is running, this
//     workflow waits for it (guard.WithWait; by default for as long as the
//     holder holds the key), and returns its result, or runs the body if
//     that workflow failed or its lease lapsed; in guard.WithWait(0) mode,
//     or once the wait budget is spent, it fails with
//     activity.ErrorTypeInProgress instead. A duplicate waits as
//     guard.Do's duplicates do, in slices: the claim's local activity
//     waits, through the guard's waiter of the key in the worker's
//     process, for a slice of half the workflow task timeout (5 s by
//     default; within half the local activities' timeouts and the budget
//     left), and learns of the holder's completion or release the moment
//     the store pushes it (PostgreSQL, Redis, memory; DynamoDB is polled),
//     then replays the result or claims at once, or takes the key over at
//     the holder's lease end. After a
//     slice with no news it sleeps on a workflow timer, from a second
//     growing to a minute, or until the holder's
//     lease end if that comes first, and claims again with a new slice.
//     Each slice with its timer adds a marker, a timer and a workflow task
//     to the history, as each poll did before slices (a slice ends before
//     the SDK would heartbeat the workflow task); while a slice runs, the
//     workflow holds a workflow task slot and a local activity slot of its
//     worker. A longer workflow task timeout lengthens the slices, and so
//     covers more of a long wait at no cost in events: up to 15 s with
//     the default local activity options (30 s per attempt), more with
//     [WithLocalActivityOptions].
//   - Body. While it runs, the claim's lease (guard.WithLease, default
//     1 h) is extended by a local activity every third of a
//     lease.
//   - Finish. The body's outcome is recorded as guard.Do records a
//     function's: a result is stored, encoded with the data converter
//     ([WithDataConverter]) unless guard.WithResultFilter refuses it; a
//     definite error (guard.WithDefiniteErrors) is stored; any other error
//     releases the claim (even when the workflow was cancelled) and is
//     returned, so that a later workflow with the key runs the body again.
//   - Continue-as-new. A body that continues as new into the same workflow
//     type keeps the key, and the next run finishes it: the claim is
//     extended and handed to the next run in its header, which
//     activity.Interceptor reads (so the next run keeps it even when its
//     input gives another key), and its fencing token is the same for every
//     run of the chain, so that a next run that derives the same key
//     re-claims it as its own without the interceptor. Continued as new
//     into another workflow type, the claim is released.
//
// Every guard option, given to guard.New or with [WithGuardOptions], takes
// effect on each of these steps: the TTL when the claim is extended and
// when it is finished, the codec when a result is stored and replayed, the
// outcome hook on a replay and on a recorded outcome.
//
// An input whose key selection is empty fails the workflow with
// activity.ErrorTypeKeyMissing: there is nothing to claim.
//
// A workflow terminated while it holds the key (termination runs no
// workflow code) blocks its key until the lease lapses. A worker crash after
// the claim succeeded and before the workflow task that recorded it
// completed is harmless: the claim runs again with the same fencing token
// (namespace, workflow ID, the chain's first run ID) and holds the key
// again. Guard errors are returned as the application errors of idemguard's activity
// package (activity.TemporalError). Wrap reports invalid options or a nil
// guard as an error; [MustWrap] panics instead.
func Wrap[In, Out any](g *guard.Guard, wf func(tworkflow.Context, In) (Out, error), opts ...Option) (func(tworkflow.Context, In) (Out, error), error) {
	if g == nil {
		return nil, errors.New("idemguard/workflow: nil guard")
	}
	c := newConfig(opts)
	base := append([]guard.CallOption{adapt.WithDefaults(
		guard.WithLease(defaultLease),
		guard.WithWait(forever),
		adapt.WithWaitBackoff(defaultPollInitial, defaultPollMax),
	)}, c.guardOpts...)
	// A key and a claim token name one call: given for every run they would
	// give every run one key, or one claimant. The workflow's keys and
	// tokens are its own, and a user's are refused.
	s, err := adapt.Settings(g, append(slices.Clip(base), adapt.Fixed(guard.WithKey("probe"), adapt.WithClaimToken("probe")))...)
	if err != nil {
		return nil, fmt.Errorf("idemguard/workflow: guarding %s: %w", activity.Name(wf), err)
	}
	if s.Lease == 0 {
		// "Until the context's deadline" would be the local activity's.
		s.Lease = defaultLease
	}
	s.Lease = max(s.Lease, adapt.MinLease)
	la := localActivities{g: g, c: c, s: s, opts: base, decode: func(rec *store.Record, opts []guard.CallOption) (any, error) {
		return adapt.Decode[Out](g, rec, opts...)
	}}
	return func(ctx tworkflow.Context, in In) (Out, error) {
		return guarded(ctx, la, wf, in)
	}, nil
}

// MustWrap is [Wrap] that panics where Wrap returns an error, so that the
// mistake shows when the worker starts.
func MustWrap[In, Out any](g *guard.Guard, wf func(tworkflow.Context, In) (Out, error), opts ...Option) func(tworkflow.Context, In) (Out, error) {
	w, err := Wrap(g, wf, opts...)
	if err != nil {
		panic(err)
	}
	return w
}

// Register registers guarded, the result of [Wrap], with r under the
// workflow type name Temporal derives from original (the function's name
// without its package, as activity.Name gives it), so that clients keep
// starting it by that name or function.
func Register(r worker.WorkflowRegistry, original, guarded any) {
	r.RegisterWorkflowWithOptions(guarded, tworkflow.RegisterOptions{Name: activity.Name(original)})
}

// handover is what a run that continues as new hands to the next.
type handover struct {
	Scope string      `json:"scope"`
	Claim adapt.Claim `json:"claim"`
}

// handed returns the claim an earlier run of this workflow handed to this
// one when it continued as new, if any: the interceptor
// (activity.Interceptor) moves it from the run's header, which only
// interceptors see, into ctx.
func handed(ctx tworkflow.Context, scope string) *adapt.Claim {
	p := wfkey.Handover(ctx)
	if p == nil {
		return nil
	}
	var h handover
	if err := converter.GetDefaultDataConverter().FromPayload(p, &h); err != nil || h.Scope != scope || h.Claim.Key == "" {
		return nil
	}
	return &h.Claim
}

// lapseMargin is added to a holder's lease end and the guard's clock skew
// where a duplicate waits for, or asks to be retried at, the lapse of the
// holder's claim, so that its claim comes after it despite rounding and
// scheduling (as activity.TemporalError's next-retry delay does).
const lapseMargin = 250 * time.Millisecond

// waitSlice is how long a claim that finds the key held waits, inside its
// local activity, for the holder to finish, through the guard's waiter of
// the key (pushed where the store pushes): half the workflow task timeout
// (wftTimeout, 10 s when the workflow was started without one), and half
// the local activity's own timeouts, within the wait budget left. A local
// activity that runs past 80% of the workflow task timeout makes the SDK
// heartbeat the workflow task, three events in the history each time;
// within half, a slice costs no event of its own: its claim's marker is
// recorded as before. The other half leaves room for the claim's store
// calls and for the local activity's scheduling.
func waitSlice(wftTimeout time.Duration, o tworkflow.LocalActivityOptions, left time.Duration) time.Duration {
	if wftTimeout <= 0 {
		wftTimeout = defaultWorkflowTaskTimeout
	}
	d := min(wftTimeout/2, left)
	if o.StartToCloseTimeout > 0 {
		d = min(d, o.StartToCloseTimeout/2)
	}
	if o.ScheduleToCloseTimeout > 0 {
		d = min(d, o.ScheduleToCloseTimeout/2)
	}
	return max(d, 0)
}

// guarded is the body of every guarded workflow.
func guarded[In, Out any](ctx tworkflow.Context, la localActivities, wf func(tworkflow.Context, In) (Out, error), in In) (Out, error) {
	var zero Out
	s := la.s
	lctx := tworkflow.WithLocalActivityOptions(ctx, la.c.la)
	info := tworkflow.GetInfo(ctx)
	req := claimRequest{
		Scope: info.WorkflowType.Name,
		Input: in,
		// The token of the run's chain (its first run, followed by the
		// runs it continued as new into, and their retries): a claim
		// repeated after a lost workflow task finds its earlier claim and
		// holds it again, and so does the next run of a workflow that
		// continued as new, when it derives the same key.
		Token:  info.Namespace + "/" + info.WorkflowExecution.ID + "/" + info.FirstRunID,
		Handed: handed(ctx, info.WorkflowType.Name),
	}

	var res claimOutcome[Out]
	start := tworkflow.Now(ctx)
	for pause := s.WaitInitial; ; pause = min(2*pause, s.WaitMax) {
		res = claimOutcome[Out]{}
		req.Wait = 0
		if s.Mode == adapt.Wait {
			req.Wait = waitSlice(info.WorkflowTaskTimeout, la.c.la, s.WaitBudget-tworkflow.Now(ctx).Sub(start))
		}
		if err := tworkflow.ExecuteLocalActivity(lctx, la.IdempotencyClaim, req).Get(lctx, &res); err != nil {
			return zero, unwrap(err)
		}
		if res.Done {
			return res.Value, nil
		}
		if res.Claim != nil {
			break
		}
		// Another workflow holds the key, and it did not finish within the
		// claim's wait slice. Its claim may be taken over once its lease
		// has lapsed by more than the guard's clock skew.
		now := tworkflow.Now(ctx)
		untilLapse := res.HolderLeaseEnd.Sub(now) + la.g.ClockSkew() + lapseMargin
		waited := now.Sub(start)
		if s.Mode != adapt.Wait || waited >= s.WaitBudget {
			return zero, temporal.NewApplicationErrorWithOptions(
				fmt.Sprintf("%v (key %s)", guard.ErrInProgress, res.Key), activity.ErrorTypeInProgress,
				temporal.ApplicationErrorOptions{NextRetryDelay: max(untilLapse, time.Second)})
		}
		wait := min(pause, s.WaitBudget-waited)
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
	var can *tworkflow.ContinueAsNewError
	if errors.As(err, &can) && can.WorkflowType != nil && can.WorkflowType.Name == info.WorkflowType.Name {
		handOver(dctx, la, can, held)
		return zero, err
	}
	finish := la.IdempotencyComplete
	if err != nil {
		finish = la.IdempotencyRelease
	}
	ferr := tworkflow.ExecuteLocalActivity(dctx, finish, finishRequest{Claim: held, Value: out, Err: err}).Get(dctx, nil)
	if err != nil {
		if ferr != nil {
			tworkflow.GetLogger(ctx).Warn("idemguard: finishing the workflow's claim after its body failed did not succeed; it lapses with its lease",
				"Key", held.Key, "Error", ferr)
		}
		if can != nil {
			return zero, err
		}
		return zero, activity.TemporalError(err)
	}
	if ferr != nil {
		return zero, unwrap(ferr)
	}
	return out, nil
}

// handOver extends the claim by a lease, so that the next run has a whole
// lease to start in, and hands it to the next run in can's header.
func handOver(ctx tworkflow.Context, la localActivities, can *tworkflow.ContinueAsNewError, held adapt.Claim) {
	var next adapt.Claim
	if err := tworkflow.ExecuteLocalActivity(ctx, la.IdempotencyExtend, held).Get(ctx, &next); err == nil {
		held = next
	} else {
		tworkflow.GetLogger(ctx).Warn("idemguard: extending the claim handed to the next run failed", "Key", held.Key, "Error", err)
	}
	p, err := converter.GetDefaultDataConverter().ToPayload(handover{Scope: tworkflow.GetInfo(ctx).WorkflowType.Name, Claim: held})
	if err != nil {
		tworkflow.GetLogger(ctx).Warn("idemguard: the claim cannot be handed to the next run; it lapses with its lease", "Key", held.Key, "Error", err)
		return
	}
	if can.Header == nil {
		can.Header = &commonpb.Header{}
	}
	if can.Header.Fields == nil {
		can.Header.Fields = map[string]*commonpb.Payload{}
	}
	can.Header.Fields[wfkey.ClaimHeader] = p
}

// keepLease extends the claim every third of a lease until done is closed
// or the claim is lost. It never cancels an extension in flight, so that
// no extension runs after the claim is finished.
func keepLease(ctx tworkflow.Context, la localActivities, done tworkflow.ReceiveChannel, held *adapt.Claim) {
	lctx := tworkflow.WithLocalActivityOptions(ctx, la.c.la)
	for {
		tctx, cancelTimer := tworkflow.WithCancel(ctx)
		timer := tworkflow.NewTimer(tctx, la.s.Lease/3)
		stopped := false
		sel := tworkflow.NewSelector(ctx)
		sel.AddReceive(done, func(tworkflow.ReceiveChannel, bool) { stopped = true })
		sel.AddFuture(timer, func(tworkflow.Future) {})
		sel.Select(ctx)
		cancelTimer()
		if stopped || ctx.Err() != nil {
			return
		}
		var next adapt.Claim
		if err := tworkflow.ExecuteLocalActivity(lctx, la.IdempotencyExtend, *held).Get(lctx, &next); err != nil {
			tworkflow.GetLogger(ctx).Warn("idemguard: extending the workflow's claim failed", "Key", held.Key, "Error", err)
			var ae *temporal.ApplicationError
			if errors.As(err, &ae) && ae.Type() == activity.ErrorTypeLeaseLost {
				return
			}
			continue
		}
		*held = next
	}
}

// unwrap returns the application error inside a local activity's error, so
// that the workflow fails with the guard's error type at the top; for a
// replayed definite error, the stored application error itself.
func unwrap(err error) error {
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) {
		return err
	}
	var stored *temporal.ApplicationError
	if ae.Type() == activity.ErrorTypeDefinite && errors.As(ae.Unwrap(), &stored) {
		return stored
	}
	return ae
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
	s      adapt.CallSettings // the resolved lease and mode
	opts   []guard.CallOption // the workflow's guard options, defaults first
	decode func(rec *store.Record, opts []guard.CallOption) (any, error)
}

type claimRequest struct {
	Scope  string
	Input  any
	Token  string       // the fencing token of the run's chain
	Handed *adapt.Claim // the claim an earlier run handed over, if any
	// Wait is how long the claim waits for a holder of the key to finish
	// (waitSlice); zero: it reports the holder at once.
	Wait time.Duration
}

// claimResult is what IdempotencyClaim returns, and claimOutcome is how the
// workflow reads it, with the workflow's result type.
type claimResult struct {
	// Claim is set when this workflow now holds the key.
	Claim *adapt.Claim `json:"claim,omitempty"`
	// Done is set when a workflow with the key completed; Value is its
	// result.
	Done  bool `json:"done,omitempty"`
	Value any  `json:"value"`
	// Key and HolderLeaseEnd are set when another workflow holds the key.
	Key            string    `json:"key,omitempty"`
	HolderLeaseEnd time.Time `json:"holder_lease_end"`
}

type claimOutcome[Out any] struct {
	Claim          *adapt.Claim `json:"claim,omitempty"`
	Done           bool         `json:"done,omitempty"`
	Value          Out          `json:"value"`
	Key            string       `json:"key,omitempty"`
	HolderLeaseEnd time.Time    `json:"holder_lease_end"`
}

type finishRequest struct {
	Claim adapt.Claim
	Value any
	Err   error
}

// options are the guard options of every step of the claim: the Temporal
// encodings first, so that guard.WithCodec and adapt.WithErrorCodec of
// the workflow's options replace them.
func (la localActivities) options(ctx context.Context, extra ...guard.CallOption) []guard.CallOption {
	dc := workflowConverter(ctx, la.c.dc)
	opts := make([]guard.CallOption, 0, len(la.opts)+2+len(extra))
	opts = append(opts, guard.WithCodec(activity.PayloadCodec{DataConverter: dc}), adapt.WithErrorCodec(newFailureCodec(dc)))
	opts = append(opts, la.opts...)
	return append(opts, extra...)
}

// IdempotencyClaim claims the workflow's key, or takes over the claim an
// earlier run handed over.
func (la localActivities) IdempotencyClaim(ctx context.Context, req claimRequest) (claimResult, error) {
	var res claimResult
	opts := la.options(ctx)
	if req.Handed != nil {
		next, err := adapt.Extend(ctx, la.g, *req.Handed, la.g.Now().Add(la.s.Lease), opts...)
		switch {
		case err == nil:
			res.Claim = &next
			return res, nil
		case !errors.Is(err, guard.ErrLeaseLost):
			return res, activity.TemporalError(err)
		}
		// The handed claim lapsed and was taken: claim as any run would.
	}
	// Waiting, the guard's shared waiter of the key in this process learns
	// of the holder's completion or release the moment the store pushes it
	// (or, on a store without push, polls the record), and claims again at
	// once, or at the holder's lease end takes the key over; what it finds
	// within the slice is what this local activity returns.
	cl, rec, err := adapt.Obtain(ctx, la.g, req.Scope, req.Input,
		append(opts, guard.WithLease(la.s.Lease), guard.WithWait(req.Wait), adapt.WithClaimToken(req.Token))...)
	var busy *adapt.InProgressError
	switch {
	case errors.As(err, &busy):
		res.Key, res.HolderLeaseEnd = busy.Key, busy.LeaseExpiresAt
		return res, nil
	case err != nil:
		return res, activity.TemporalError(err)
	case rec != nil:
		v, err := la.decode(rec, opts)
		var ae *temporal.ApplicationError
		switch {
		case err == nil:
		case errors.As(err, &ae):
			// A stored definite error: the workflow returns it (see
			// unwrap), and the local activity does not retry it.
			return res, temporal.NewNonRetryableApplicationError(err.Error(), activity.ErrorTypeDefinite, err)
		default:
			// A result that cannot be decoded: the workflow fails for good.
			return res, activity.TemporalError(guard.Definite(err))
		}
		res.Done, res.Value = true, v
		return res, nil
	}
	res.Claim = cl
	return res, nil
}

// IdempotencyExtend extends the workflow's claim by a lease from now.
func (la localActivities) IdempotencyExtend(ctx context.Context, cl adapt.Claim) (adapt.Claim, error) {
	next, err := adapt.Extend(ctx, la.g, cl, la.g.Now().Add(la.s.Lease), la.options(ctx)...)
	return next, finalError(err)
}

// IdempotencyComplete records the result of a workflow body that
// succeeded, as guard.Do records a function's: stored, or, if the result
// filter refuses it, not stored and the claim released.
func (la localActivities) IdempotencyComplete(ctx context.Context, req finishRequest) error {
	return la.finish(ctx, req)
}

// IdempotencyRelease records the error of a workflow body that failed, as
// guard.Do records a function's: a definite error is stored, any other
// releases the claim. (Its name is the one earlier versions gave the local
// activity that released the claim, so that their histories replay.)
func (la localActivities) IdempotencyRelease(ctx context.Context, req finishRequest) error {
	return la.finish(ctx, req)
}

func (la localActivities) finish(ctx context.Context, req finishRequest) error {
	_, err := adapt.Finish(ctx, la.g, req.Claim, req.Value, req.Err, la.options(ctx)...)
	if req.Err != nil && errors.Is(err, guard.ErrLeaseLost) {
		return nil // someone else holds the key now: nothing to release
	}
	return finalError(err)
}

// finalError is activity.TemporalError, except that a lost claim is not
// retryable: retrying the local activity cannot win it back.
func finalError(err error) error {
	if errors.Is(err, guard.ErrLeaseLost) {
		return temporal.NewNonRetryableApplicationError(err.Error(), activity.ErrorTypeLeaseLost, err)
	}
	return activity.TemporalError(err)
}
