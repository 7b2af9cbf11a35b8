package nexusguard_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nexus-rpc/sdk-go/nexus"
	enumspb "go.temporal.io/api/enums/v1"
	failurepb "go.temporal.io/api/failure/v1"
	nexuspb "go.temporal.io/api/nexus/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/temporalnexus"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/protobuf/proto"

	"github.com/idemguard/idemguard/activity"
	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/testing/temporaltest"
	"github.com/idemguard/idemguard/nexusguard"
	"github.com/idemguard/idemguard/store/memory"
)

// The two ways a worker guards an operation: its handler wrapped, or the
// worker interceptor with a policy for it.
var paths = []struct {
	name        string
	interceptor bool
}{{"Wrap", false}, {"Interceptor", true}}

// syncService returns the test service with the sync operation charge
// running h, guarded by g the given way, and the worker interceptors that
// go with it.
func syncService(g *guard.Guard, h func(context.Context, Order, nexus.StartOperationOptions) (Receipt, error), viaInterceptor bool, opts ...nexusguard.Option) (*nexus.Service, []interceptor.WorkerInterceptor) {
	svc := nexus.NewService(service)
	if viaInterceptor {
		svc.MustRegister(nexus.NewSyncOperation(operation, h))
		return svc, []interceptor.WorkerInterceptor{activity.Must(activity.Interceptor(nil, nexusguard.MustPolicy(g, service, operation, opts...)))}
	}
	svc.MustRegister(nexus.NewSyncOperation(operation, nexusguard.MustWrap(g, h, opts...)))
	return svc, nil
}

// newEndpoint creates a Nexus endpoint on the dev server that targets
// taskQueue in the default namespace, deleted when the test ends, and
// returns its name and ID.
func newEndpoint(t testing.TB, c client.Client, taskQueue string) (name, id string) {
	t.Helper()
	name = "ep-" + randomID()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := c.OperatorService().CreateNexusEndpoint(ctx, &operatorservice.CreateNexusEndpointRequest{Spec: &nexuspb.EndpointSpec{
		Name: name,
		Target: &nexuspb.EndpointTarget{Variant: &nexuspb.EndpointTarget_Worker_{Worker: &nexuspb.EndpointTarget_Worker{
			Namespace: "default", TaskQueue: taskQueue,
		}}},
	}})
	if err != nil {
		t.Fatalf("creating the Nexus endpoint: %v", err)
	}
	ep := resp.GetEndpoint()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c.OperatorService().DeleteNexusEndpoint(ctx, &operatorservice.DeleteNexusEndpointRequest{Id: ep.GetId(), Version: ep.GetVersion()})
	})
	return name, ep.GetId()
}

// callParams tells callerWorkflow what to call.
type callParams struct {
	Endpoint  string
	Operation string
	Order     Order
}

// callerWorkflow executes the operation through the endpoint and returns
// its result.
func callerWorkflow(ctx workflow.Context, p callParams) (Receipt, error) {
	c := workflow.NewNexusClient(p.Endpoint, service)
	var r Receipt
	err := c.ExecuteOperation(ctx, p.Operation, p.Order, workflow.NexusOperationOptions{ScheduleToCloseTimeout: 2 * time.Minute}).Get(ctx, &r)
	return r, err
}

// fulfilWorkflow is the workflow behind the workflow-run operation.
func fulfilWorkflow(ctx workflow.Context, o Order) (Receipt, error) {
	return Receipt{ChargeID: "wf_" + workflow.GetInfo(ctx).WorkflowExecution.RunID, OrderID: o.OrderID, Amount: o.Amount}, nil
}

// A caller workflow executes a sync operation whose handler charges (a
// step) and then fails transiently; the caller's Nexus machinery retries
// the start with the same request ID, the step replays, and the card is
// charged once.
func TestDevServerTransientFailure(t *testing.T) {
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			c := temporaltest.Client(t, client.Options{})
			tq := temporaltest.Name(t, "tq")
			ep, _ := newEndpoint(t, c, tq)
			var l ledger
			var attempts atomic.Int32
			var requests ledger
			svc, ics := syncService(newGuard(t), func(ctx context.Context, o Order, opts nexus.StartOperationOptions) (Receipt, error) {
				requests.add(opts.RequestID)
				id, err := guard.Step(ctx, "charge", func(ctx context.Context) (string, error) {
					l.add("charge " + o.OrderID)
					return "ch_" + randomID(), nil
				})
				if err != nil {
					return Receipt{}, err
				}
				if attempts.Add(1) == 1 {
					return Receipt{}, errors.New("shipping provider timed out")
				}
				return Receipt{ChargeID: id, OrderID: o.OrderID, Amount: o.Amount}, nil
			}, p.interceptor)
			temporaltest.Worker(t, c, tq, worker.Options{Interceptors: ics}, func(r worker.Registry) {
				r.RegisterWorkflow(callerWorkflow)
				r.RegisterNexusService(svc)
			})
			var got Receipt
			o := Order{OrderID: "o-" + randomID(), Amount: 7}
			if err := temporaltest.Run(t, c, tq, temporaltest.Name(t, "caller"), 2*time.Minute, &got, callerWorkflow, callParams{ep, operation, o}); err != nil {
				t.Fatalf("caller workflow: %v", err)
			}
			if n := l.count("charge " + o.OrderID); n != 1 || got.ChargeID == "" || got.OrderID != o.OrderID {
				t.Fatalf("charged %d times, receipt %+v; want one charge, returned", n, got)
			}
			if n := attempts.Load(); n != 2 || requests.distinct() != 1 {
				t.Errorf("%d attempts under %d request IDs; want 2 under one", n, requests.distinct())
			}
		})
	}
}

// Two caller workflows start the operation for the same order: keyed on
// the order ID (guard.WithKeyPath, given to guard.New), the second start
// replays the first's operation error, and both callers see the same
// failure, cause and details included.
func TestDevServerOperationErrorReplayed(t *testing.T) {
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			c := temporaltest.Client(t, client.Options{})
			tq := temporaltest.Name(t, "tq")
			ep, _ := newEndpoint(t, c, tq)
			var runs atomic.Int32
			svc, ics := syncService(newGuard(t, guard.WithKeyPath("order_id")), func(ctx context.Context, o Order, _ nexus.StartOperationOptions) (Receipt, error) {
				runs.Add(1)
				return Receipt{}, nexus.NewOperationFailedErrorf("declined: %w",
					temporal.NewNonRetryableApplicationError("card expired", "CardExpired", nil, map[string]string{"card": "4242"}))
			}, p.interceptor)
			temporaltest.Worker(t, c, tq, worker.Options{Interceptors: ics}, func(r worker.Registry) {
				r.RegisterWorkflow(callerWorkflow)
				r.RegisterNexusService(svc)
			})
			o := Order{OrderID: "o-" + randomID(), Amount: 7}
			var failures [2]*failurepb.Failure
			for i := range failures {
				id := temporaltest.Name(t, "caller")
				err := temporaltest.Run(t, c, tq, id, 2*time.Minute, nil, callerWorkflow, callParams{ep, operation, o})
				var ae *temporal.ApplicationError
				if !errors.As(err, &ae) || ae.Type() != "CardExpired" {
					t.Fatalf("caller %d: %v; want the operation failed with the card expired", i+1, err)
				}
				failures[i] = operationFailure(t, c, id)
			}
			if !proto.Equal(failures[0], failures[1]) {
				t.Errorf("the callers saw different failures:\n first: %v\nreplay: %v", failures[0], failures[1])
			}
			if n := runs.Load(); n != 1 {
				t.Errorf("the handler ran %d times, want 1", n)
			}
		})
	}
}

// operationFailure returns the failure of the Nexus operation that the
// closed caller workflow id recorded, without the wrapper naming the
// caller's own event.
func operationFailure(t testing.TB, c client.Client, id string) *failurepb.Failure {
	t.Helper()
	for _, e := range temporaltest.History(t, c, id, "").Events {
		if a := e.GetNexusOperationFailedEventAttributes(); a != nil {
			return a.GetFailure().GetCause()
		}
	}
	t.Fatalf("workflow %s recorded no failed Nexus operation", id)
	return nil
}

// startOverHTTP sends one start request to the dev server's Nexus HTTP
// endpoint, as a caller's Nexus machinery does, under request ID id, and
// returns the response's status and body.
func startOverHTTP(t *testing.T, base, id string, o Order) (int, string) {
	t.Helper()
	body, _ := json.Marshal(o)
	req, err := http.NewRequest(http.MethodPost, base+"/"+service+"/"+operation, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Nexus-Request-Id", id)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("starting over HTTP: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Start requests sent to the dev server under one request ID: the resent
// start replays the first's result, and one with another input is refused
// as a bad request; the handler runs once.
func TestDevServerResentStart(t *testing.T) {
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			c := temporaltest.Client(t, client.Options{})
			tq := temporaltest.Name(t, "tq")
			_, epID := newEndpoint(t, c, tq)
			var l ledger
			svc, ics := syncService(newGuard(t), charge(&l), p.interceptor)
			temporaltest.Worker(t, c, tq, worker.Options{Interceptors: ics}, func(r worker.Registry) { r.RegisterNexusService(svc) })
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			clusters, err := c.OperatorService().ListClusters(ctx, &operatorservice.ListClustersRequest{})
			if err != nil || len(clusters.GetClusters()) == 0 || clusters.GetClusters()[0].GetHttpAddress() == "" {
				t.Fatalf("the dev server's HTTP address: %v, %v", clusters, err)
			}
			base := "http://" + clusters.GetClusters()[0].GetHttpAddress() + "/nexus/endpoints/" + epID + "/services"

			o := Order{OrderID: "o-" + randomID(), Amount: 7}
			status, first := startOverHTTP(t, base, "req-1", o)
			if status != http.StatusOK {
				t.Fatalf("first start: %d %s", status, first)
			}
			if status, body := startOverHTTP(t, base, "req-1", Order{OrderID: o.OrderID, Amount: 700}); status != http.StatusBadRequest {
				t.Errorf("another input under the request ID: %d %s; want 400", status, body)
			}
			if status, resent := startOverHTTP(t, base, "req-1", o); status != http.StatusOK || resent != first {
				t.Errorf("resent start: %d %s; want the first start's %s", status, resent, first)
			}
			if n := l.count(o.OrderID); n != 1 {
				t.Errorf("charged %d times, want 1", n)
			}
		})
	}
}

// A caller workflow executes a workflow-run operation whose start handler
// reserves stock (a step) before it starts the workflow, and fails
// transiently in between on its first attempt: the retry replays the
// reservation and starts the workflow, whose result reaches the caller.
func TestDevServerWorkflowRunStart(t *testing.T) {
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			c := temporaltest.Client(t, client.Options{})
			tq := temporaltest.Name(t, "tq")
			ep, _ := newEndpoint(t, c, tq)
			g := newGuardOn(t, memory.New())
			var l ledger
			var attempts atomic.Int32
			const fulfil = "fulfil"
			op := temporalnexus.MustNewWorkflowRunOperationWithOptions(temporalnexus.WorkflowRunOperationOptions[Order, Receipt]{
				Name: fulfil,
				Handler: func(ctx context.Context, o Order, opts nexus.StartOperationOptions) (temporalnexus.WorkflowHandle[Receipt], error) {
					if _, err := guard.Step(ctx, "reserve", func(ctx context.Context) (bool, error) {
						l.add("reserve " + o.OrderID)
						return true, nil
					}); err != nil {
						return nil, err
					}
					if attempts.Add(1) == 1 {
						return nil, errors.New("warehouse timed out")
					}
					return temporalnexus.ExecuteUntypedWorkflow[Receipt](ctx, opts, client.StartWorkflowOptions{ID: "fulfil-" + o.OrderID}, fulfilWorkflow, o)
				},
			})
			svc := nexus.NewService(service)
			var ics []interceptor.WorkerInterceptor
			if p.interceptor {
				svc.MustRegister(op)
				ics = []interceptor.WorkerInterceptor{activity.Must(activity.Interceptor(nil, nexusguard.MustPolicy(g, service, fulfil)))}
			} else {
				svc.MustRegister(nexusguard.MustWrapOperation(g, op))
			}
			temporaltest.Worker(t, c, tq, worker.Options{Interceptors: ics}, func(r worker.Registry) {
				r.RegisterWorkflow(callerWorkflow)
				r.RegisterWorkflow(fulfilWorkflow)
				r.RegisterNexusService(svc)
			})
			o := Order{OrderID: "o-" + randomID(), Amount: 3}
			var got Receipt
			if err := temporaltest.Run(t, c, tq, temporaltest.Name(t, "caller"), 2*time.Minute, &got, callerWorkflow, callParams{ep, fulfil, o}); err != nil {
				t.Fatalf("caller workflow: %v", err)
			}
			if n := l.count("reserve " + o.OrderID); n != 1 || got.OrderID != o.OrderID {
				t.Fatalf("reserved %d times, result %+v; want one reservation and the workflow's result", n, got)
			}
			if n := attempts.Load(); n != 2 {
				t.Errorf("%d start attempts, want 2", n)
			}
			h := temporaltest.History(t, c, "fulfil-"+o.OrderID, "")
			if n := temporaltest.Count(h, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED); n != 1 {
				t.Errorf("the workflow started %d times, want 1", n)
			}
		})
	}
}
