package chaos

import (
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
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
	// TxActivity (the postgres scenario) writes its side effect, a ledger
	// row, in the transaction that completes its idempotency record
	// (guard.DoTx): the row commits exactly when the record does.
	TxActivity = "ChaosTx"
	// WorkflowName is the workflow type the driver starts.
	WorkflowName = "ChaosWorkflow"
)

// Op is the input of one guarded activity: the business operation it
// performs. Its idempotency key is derived from all of it, so the twin
// workflows that carry the same op share the key.
type Op struct {
	ID string `json:"op"`
}

// OpResult is what a guarded activity returns, and what its idempotency
// record stores.
type OpResult struct {
	Op       string `json:"op"`
	Key      string `json:"key"`       // guard.KeyFromContext inside the body
	EffectID string `json:"effect_id"` // the ledger entry of the side effect
	PID      int    `json:"pid"`       // the worker process that did it
}

// WorkflowInput is the input of [Workflow].
type WorkflowInput struct {
	Keyed []Op `json:"keyed"`
	Plain []Op `json:"plain"`
	Tx    []Op `json:"tx,omitempty"`

	StartToClose    time.Duration `json:"start_to_close"`
	Heartbeat       time.Duration `json:"heartbeat"`
	ScheduleToClose time.Duration `json:"schedule_to_close"`
	RetryInitial    time.Duration `json:"retry_initial"`
	RetryMax        time.Duration `json:"retry_max"`
}

// WorkflowOutput is the result of [Workflow], in the order of the input.
type WorkflowOutput struct {
	Keyed []OpResult `json:"keyed"`
	Plain []OpResult `json:"plain"`
	Tx    []OpResult `json:"tx,omitempty"`
}

// Workflow runs its operations as guarded activities, all at once, and
// returns their results. Activities are retried without an attempt limit
// until ScheduleToClose, so that a run ends only when each has completed.
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
	keyed := make([]workflow.Future, len(in.Keyed))
	for i, op := range in.Keyed {
		keyed[i] = workflow.ExecuteActivity(ctx, KeyedActivity, op)
	}
	plain := make([]workflow.Future, len(in.Plain))
	for i, op := range in.Plain {
		plain[i] = workflow.ExecuteActivity(ctx, PlainActivity, op)
	}
	tx := make([]workflow.Future, len(in.Tx))
	for i, op := range in.Tx {
		tx[i] = workflow.ExecuteActivity(ctx, TxActivity, op)
	}
	var out WorkflowOutput
	var firstErr error
	collect := func(fs []workflow.Future) []OpResult {
		rs := make([]OpResult, len(fs))
		for i, f := range fs {
			if err := f.Get(ctx, &rs[i]); err != nil && firstErr == nil {
				firstErr = err
			}
		}
		return rs
	}
	out.Keyed = collect(keyed)
	out.Plain = collect(plain)
	if len(tx) > 0 {
		out.Tx = collect(tx)
	}
	return out, firstErr
}
