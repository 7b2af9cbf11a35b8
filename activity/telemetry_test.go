package activity_test

import (
	"context"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	tworkflow "go.temporal.io/sdk/workflow"

	"github.com/idemguard/idemguard/activity"
	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/telemetry"
	"github.com/idemguard/idemguard/store/memory"
)

func TracedCharge(ctx context.Context, o Order) (Receipt, error) { return newReceipt(ctx, o), nil }

func TracedWorkflow(ctx tworkflow.Context, o Order) (Receipt, error) {
	ctx = tworkflow.WithActivityOptions(ctx, tworkflow.ActivityOptions{StartToCloseTimeout: time.Minute})
	var r Receipt
	err := tworkflow.ExecuteActivity(ctx, "TracedCharge", o).Get(ctx, &r)
	return r, err
}

// Under Temporal's OpenTelemetry interceptor, idemguard.execute is a child of
// the SDK's RunActivity span and carries the Temporal attributes.
func TestExecuteSpanNestsUnderRunActivity(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	tracing, err := temporalotel.NewTracingInterceptor(temporalotel.TracerOptions{Tracer: tp.Tracer("temporal-sdk-go")})
	if err != nil {
		t.Fatal(err)
	}
	g, err := guard.New(memory.New(), guard.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}

	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestWorkflowEnvironment()
	env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{tracing}})
	env.RegisterWorkflow(TracedWorkflow)
	activity.Register(env, TracedCharge, activity.Must(activity.Wrap(g, TracedCharge)))
	env.ExecuteWorkflow(TracedWorkflow, Order{OrderID: "o-traced", Amount: 5})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}

	spans := sr.Ended()
	var run, exec sdktrace.ReadOnlySpan
	for _, s := range spans {
		switch s.Name() {
		case "RunActivity:TracedCharge":
			run = s
		case telemetry.SpanExecute:
			exec = s
		}
	}
	if run == nil || exec == nil {
		var names []string
		for _, s := range spans {
			names = append(names, s.Name())
		}
		t.Fatalf("spans %v; want RunActivity:TracedCharge and %s", names, telemetry.SpanExecute)
	}
	if exec.Parent().SpanID() != run.SpanContext().SpanID() || exec.SpanContext().TraceID() != run.SpanContext().TraceID() {
		t.Errorf("%s's parent is %v, want RunActivity:TracedCharge %v", exec.Name(), exec.Parent().SpanID(), run.SpanContext().SpanID())
	}
	want := map[string]string{
		string(telemetry.TemporalActivityTypeKey): "TracedCharge",
		string(telemetry.TemporalWorkflowTypeKey): "TracedWorkflow",
		string(telemetry.TemporalAttemptKey):      "1",
		string(telemetry.ScopeKey):                "TracedCharge",
		string(telemetry.OutcomeKey):              "executed",
	}
	got := map[string]string{}
	for _, a := range exec.Attributes() {
		got[string(a.Key)] = a.Value.Emit()
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	if got[string(telemetry.TemporalWorkflowIDKey)] == "" || got[string(telemetry.TemporalActivityIDKey)] == "" {
		t.Errorf("workflow or activity ID missing: %v", got)
	}
}
