package chaos

import (
	"errors"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/idemguard/idemguard/activity"
)

// Activity type names, which are also the scopes of the idempotency keys.
const (
	// KeyedActivity passes guard.KeyFromContext downstream: its side effect
	// is a ledger write conditional on the idempotency key, so it happens
	// at most once per key whatever the guard does.
	KeyedActivity = "ChaosKeyed"
	// PlainActivity does not: each run writes a new ledger entry, so a run
	// the guard lets through twice shows as two effects.
	PlainActivity = "ChaosPlain"
	// ExplicitActivity is the plain body keyed by an explicit id (the
	// op's ID, guard.WithKeyPath) with payload validation on its payload
	// (guard.WithPayloadValidation): a conflicting twin that reuses the
	// id with another payload must be refused, never run and never handed
	// the other's result.
	ExplicitActivity = "ChaosExplicit"
	// StepsActivity runs two steps (guard.Step), each a plain effect; its
	// first attempt fails after the first step, and the retry must replay
	// that step and run only the second.
	StepsActivity = "ChaosSteps"
	// TxActivity (the transactional scenarios) writes its side effect, a
	// ledger row, in the transaction that completes its idempotency record
	// (guard.DoTx): the row commits exactly when the record does.
	TxActivity = "ChaosTx"
	// TxExplicitActivity is TxActivity keyed by an explicit id with
	// payload validation, as ExplicitActivity.
	TxExplicitActivity = "ChaosTxExplicit"
	// TxStepsActivity is StepsActivity inside guard.DoTx: each step's row
	// and completion commit with the call's transaction, and roll back
	// with it when the first attempt fails after the first step.
	TxStepsActivity = "ChaosTxSteps"
	// WorkflowName is the workflow type the driver starts.
	WorkflowName = "ChaosWorkflow"
)

// explicitKeyed reports whether activity type kind keys by the op's ID
// with payload validation (a payload mismatch is then a call's expected
// outcome, not a failure of its workflow).
func explicitKeyed(kind string) bool {
	return kind == ExplicitActivity || kind == TxExplicitActivity
}

// stepped reports whether activity type kind runs steps.
func stepped(kind string) bool { return kind == StepsActivity || kind == TxStepsActivity }

// Op is the input of one guarded activity: the business operation it
// performs. Unless its activity keys by an explicit id, its idempotency key
// is derived from all of it, so the twin workflows that carry the same op
// share the key.
type Op struct {
	ID string `json:"op"`
	// Payload is what the explicitly keyed activities validate: a
	// conflicting twin carries the op's ID with another payload.
	Payload string `json:"payload,omitempty"`
	// Long makes the body work for longer than its lease before its side
	// effect, so that the guard must extend the lease.
	Long bool `json:"long,omitempty"`
	// Delay makes the workflow start the operation this long after the
	// others (a conflicting twin, which then meets the original in
	// progress or completed).
	Delay time.Duration `json:"delay,omitempty"`
}

// Call is one guarded activity a workflow runs: its type and its input.
type Call struct {
	Activity string `json:"activity"`
	Op       Op     `json:"op"`
}

// OpResult is what a guarded activity returns, and what its idempotency
// record stores.
type OpResult struct {
	Op       string `json:"op"`
	Key      string `json:"key"`       // guard.KeyFromContext inside the body
	EffectID string `json:"effect_id"` // the ledger entry of the side effect
	PID      int    `json:"pid"`       // the worker process that did it
	// Payload is the payload of the run that made the result (explicitly
	// keyed activities).
	Payload string `json:"payload,omitempty"`
	// Steps holds the effect of each step by name (stepped activities).
	Steps map[string]string `json:"steps,omitempty"`
	// Refused is set by the workflow, not the activity: the application
	// error type with which an explicitly keyed call was refused.
	Refused string `json:"refused,omitempty"`
}

// WorkflowInput is the input of [Workflow].
type WorkflowInput struct {
	Calls []Call `json:"calls"`

	StartToClose    time.Duration `json:"start_to_close"`
	Heartbeat       time.Duration `json:"heartbeat"`
	ScheduleToClose time.Duration `json:"schedule_to_close"`
	RetryInitial    time.Duration `json:"retry_initial"`
	RetryMax        time.Duration `json:"retry_max"`
}

// WorkflowOutput is the result of [Workflow], in the order of the input's
// calls.
type WorkflowOutput struct {
	Results []OpResult `json:"results"`
}

// Workflow runs its calls as guarded activities, all at once (a call with
// a Delay that much later), and returns their results. Activities are
// retried without an attempt limit until ScheduleToClose, so that a run
// ends only when each has completed. An explicitly keyed call refused for
// a payload mismatch is a result (Refused), not a failure.
func Workflow(ctx workflow.Context, in WorkflowInput) (WorkflowOutput, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout:    in.StartToClose,
		HeartbeatTimeout:       in.Heartbeat,
		ScheduleToCloseTimeout: in.ScheduleToClose,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:    in.RetryInitial,
			BackoffCoefficient: 2,
			MaximumInterval:    in.RetryMax,
		},
	})
	fs := make([]workflow.Future, len(in.Calls))
	for i, c := range in.Calls {
		if c.Op.Delay <= 0 {
			fs[i] = workflow.ExecuteActivity(ctx, c.Activity, c.Op)
			continue
		}
		f, set := workflow.NewFuture(ctx)
		fs[i] = f
		workflow.Go(ctx, func(ctx workflow.Context) {
			if err := workflow.Sleep(ctx, c.Op.Delay); err != nil {
				set.SetError(err)
				return
			}
			set.Chain(workflow.ExecuteActivity(ctx, c.Activity, c.Op))
		})
	}
	out := WorkflowOutput{Results: make([]OpResult, len(fs))}
	var firstErr error
	for i, f := range fs {
		err := f.Get(ctx, &out.Results[i])
		var ae *temporal.ApplicationError
		if err != nil && explicitKeyed(in.Calls[i].Activity) && errors.As(err, &ae) && ae.Type() == activity.ErrorTypePayloadMismatch {
			out.Results[i] = OpResult{Op: in.Calls[i].Op.ID, Payload: in.Calls[i].Op.Payload, Refused: ae.Type()}
			continue
		}
		if err != nil && firstErr == nil {
			firstErr = err
		}
	}
	return out, firstErr
}
