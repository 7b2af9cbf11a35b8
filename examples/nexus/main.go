// Command nexus guards Temporal Nexus operations with idemguard, across two
// namespaces: a checkout workflow in the caller's namespace pays for each
// order and has it fulfilled through a Nexus endpoint, whose operations a
// worker in the payments team's namespace serves.
//
//	docker compose up -d temporal                                    # a Temporal dev server
//	go run ./examples/nexus
//	IDEMGUARD_SERVICES=temporal scripts/harness.sh run go run ./examples/nexus   # a throwaway one
//
// The payments service has two operations. charge is synchronous: its
// handler, wrapped with nexusguard.MustWrap, charges the card in a
// guard.Step and then prints the receipt. fulfil is a workflow-run
// operation: its start handler reserves the stock in a guard.Step before it
// starts the shipping workflow, guarded by idemguard's worker interceptor
// (nexusguard.MustPolicy), its code untouched. The first start of every
// operation fails after its side effect (the receipt printer and the
// warehouse time out), so the caller's Nexus machinery sends the start
// again under the same request ID: the step replays, and each card is
// charged once, each stock reserved once.
//
// It registers the handler namespace when it is missing (on a dev server;
// elsewhere, create it beforehand) and creates or repoints the Nexus
// endpoint to the handler's task queue. The records are kept in memory: one
// process serves the operations. In production, give the guard a shared
// store (DynamoDB, Redis, PostgreSQL), as examples/payments does.
//
// Every setting is a flag, with its default taken from the environment
// when set there:
//
//	-temporal-address   IDEMGUARD_TEMPORAL_ADDRESS, TEMPORAL_ADDRESS   127.0.0.1:7233
//	-caller-namespace   TEMPORAL_NAMESPACE                             default
//	-handler-namespace                                                 payments
//	-endpoint                                                          payments
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/signal"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nexus-rpc/sdk-go/nexus"
	nexuspb "go.temporal.io/api/nexus/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporalnexus"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/idemguard/idemguard/activity"
	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/nexusguard"
	"github.com/idemguard/idemguard/store/memory"
)

// Defaults: the dev server docker-compose.yml starts.
const (
	DefaultTemporalAddress  = "127.0.0.1:7233"
	DefaultCallerNamespace  = "default"
	DefaultHandlerNamespace = "payments"
	DefaultEndpoint         = "payments"
)

// The Nexus service and its operations, as the caller names them.
const (
	Service   = "payments"
	Charge    = "charge"
	Fulfil    = "fulfil"
	taskQueue = "payments-nexus"
)

// Config is the program's settings.
type Config struct {
	TemporalAddress  string
	CallerNamespace  string
	HandlerNamespace string
	Endpoint         string
	TaskQueue        string // both workers'; one per namespace
	Orders           int
}

func parseConfig(args []string, getenv func(string) string) (Config, error) {
	env := func(def string, names ...string) string {
		for _, n := range names {
			if v := getenv(n); v != "" {
				return v
			}
		}
		return def
	}
	c := Config{TaskQueue: taskQueue}
	fs := flag.NewFlagSet("nexus", flag.ContinueOnError)
	fs.StringVar(&c.TemporalAddress, "temporal-address", env(DefaultTemporalAddress, "IDEMGUARD_TEMPORAL_ADDRESS", "TEMPORAL_ADDRESS"), "Temporal frontend host:port")
	fs.StringVar(&c.CallerNamespace, "caller-namespace", env(DefaultCallerNamespace, "TEMPORAL_NAMESPACE"), "namespace of the checkout workflows")
	fs.StringVar(&c.HandlerNamespace, "handler-namespace", DefaultHandlerNamespace, "namespace of the payments service, registered if missing")
	fs.StringVar(&c.Endpoint, "endpoint", DefaultEndpoint, "Nexus endpoint name, created or repointed to the handler")
	fs.IntVar(&c.Orders, "orders", 3, "orders to check out")
	return c, fs.Parse(args)
}

func main() {
	cfg, err := parseConfig(os.Args[1:], os.Getenv)
	if errors.Is(err, flag.ErrHelp) {
		return
	} else if err != nil {
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if _, err := run(ctx, cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "nexus:", err)
		os.Exit(1)
	}
}

// Order is what the caller checks out.
type Order struct {
	OrderID string `json:"order_id"`
	Amount  int    `json:"amount"`
}

// Receipt is the charge operation's result.
type Receipt struct {
	ChargeID string `json:"charge_id"`
	OrderID  string `json:"order_id"`
}

// Shipment is the fulfil operation's result: the shipping workflow's.
type Shipment struct {
	Tracking string `json:"tracking"`
}

// Checkout is the checkout workflow's result.
type Checkout struct {
	Receipt  Receipt
	Shipment Shipment
}

// checkoutParams tells the checkout workflow where the payments service is.
type checkoutParams struct {
	Endpoint string
	Order    Order
}

// checkoutWorkflow, in the caller's namespace, charges the order and has
// it fulfilled, through the payments team's Nexus endpoint.
func checkoutWorkflow(ctx workflow.Context, p checkoutParams) (Checkout, error) {
	payments := workflow.NewNexusClient(p.Endpoint, Service)
	opts := workflow.NexusOperationOptions{ScheduleToCloseTimeout: time.Minute}
	var c Checkout
	if err := payments.ExecuteOperation(ctx, Charge, p.Order, opts).Get(ctx, &c.Receipt); err != nil {
		return c, err
	}
	err := payments.ExecuteOperation(ctx, Fulfil, p.Order, opts).Get(ctx, &c.Shipment)
	return c, err
}

// shipWorkflow, in the handler's namespace, is the workflow behind the
// fulfil operation.
func shipWorkflow(ctx workflow.Context, o Order) (Shipment, error) {
	return Shipment{Tracking: "trk_" + o.OrderID}, nil
}

// Effects counts what the payments service did, by order ID.
type Effects struct {
	mu           sync.Mutex
	Charges      map[string]int // cards charged
	Reservations map[string]int // stock reserved
	Starts       map[string]int // start requests the handlers got
}

func (e *Effects) add(m *map[string]int, key string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	if *m == nil {
		*m = map[string]int{}
	}
	(*m)[key]++
	return (*m)[key]
}

// Count returns m[key], read under the lock the handlers write it under.
func (e *Effects) Count(m map[string]int, key string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return m[key]
}

// Summary is what a run did.
type Summary struct {
	Effects   *Effects
	Checkouts map[string]Checkout // by order ID
}

// payments returns the payments service, its operations' first start for
// each order failing after the side effect, and the worker interceptor
// that guards fulfil.
func payments(g *guard.Guard, e *Effects) (*nexus.Service, interceptor.WorkerInterceptor) {
	var charge, fulfil atomic.Int64
	// charge: the handler wrapped. The step's record outlives the
	// failure that follows it.
	chargeOp := nexus.NewSyncOperation(Charge, nexusguard.MustWrap(g,
		func(ctx context.Context, o Order, _ nexus.StartOperationOptions) (Receipt, error) {
			n := e.add(&e.Starts, Charge+" "+o.OrderID)
			id, err := guard.Step(ctx, "charge", func(ctx context.Context) (string, error) {
				e.add(&e.Charges, o.OrderID)
				return fmt.Sprintf("ch_%s_%d", o.OrderID, charge.Add(1)), nil
			})
			if err != nil {
				return Receipt{}, err
			}
			if n == 1 {
				return Receipt{}, errors.New("the receipt printer timed out")
			}
			return Receipt{ChargeID: id, OrderID: o.OrderID}, nil
		}))
	// fulfil: a workflow-run operation, guarded by the interceptor. The
	// server deduplicates the workflow's start on the request ID; the
	// reservation before it is the guard's to keep once.
	fulfilOp := temporalnexus.MustNewWorkflowRunOperationWithOptions(temporalnexus.WorkflowRunOperationOptions[Order, Shipment]{
		Name: Fulfil,
		Handler: func(ctx context.Context, o Order, opts nexus.StartOperationOptions) (temporalnexus.WorkflowHandle[Shipment], error) {
			n := e.add(&e.Starts, Fulfil+" "+o.OrderID)
			if _, err := guard.Step(ctx, "reserve", func(ctx context.Context) (int64, error) {
				e.add(&e.Reservations, o.OrderID)
				return fulfil.Add(1), nil
			}); err != nil {
				return nil, err
			}
			if n == 1 {
				return nil, errors.New("the warehouse timed out")
			}
			return temporalnexus.ExecuteUntypedWorkflow[Shipment](ctx, opts, client.StartWorkflowOptions{ID: "ship-" + o.OrderID}, shipWorkflow, o)
		},
	})
	svc := nexus.NewService(Service)
	svc.MustRegister(chargeOp, fulfilOp)
	return svc, activity.Must(activity.Interceptor(g, nexusguard.MustPolicy(g, Service, Fulfil)))
}

// run sets up both namespaces and the endpoint, starts both workers, checks
// out cfg.Orders orders, and reports what the payments service did.
func run(ctx context.Context, cfg Config, out io.Writer) (Summary, error) {
	// The SDK logs every failed start at ERROR: the first ones are
	// deliberate here.
	logger := tlog.NewStructuredLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError + 4})))
	caller, err := client.Dial(client.Options{HostPort: cfg.TemporalAddress, Namespace: cfg.CallerNamespace, Logger: logger})
	if err != nil {
		return Summary{}, err
	}
	defer caller.Close()
	handler, err := client.NewClientFromExisting(caller, client.Options{Namespace: cfg.HandlerNamespace, Logger: logger})
	if err != nil {
		return Summary{}, err
	}
	defer handler.Close()
	if err := ensureNamespace(ctx, caller, cfg.HandlerNamespace); err != nil {
		return Summary{}, err
	}
	if err := ensureEndpoint(ctx, caller, cfg.Endpoint, cfg.HandlerNamespace, cfg.TaskQueue); err != nil {
		return Summary{}, err
	}

	// The payments team's worker, in its own namespace.
	g, err := guard.New(memory.New())
	if err != nil {
		return Summary{}, err
	}
	e := &Effects{}
	svc, guarded := payments(g, e)
	hw := worker.New(handler, cfg.TaskQueue, worker.Options{Interceptors: []interceptor.WorkerInterceptor{guarded}})
	hw.RegisterNexusService(svc)
	hw.RegisterWorkflow(shipWorkflow)
	if err := hw.Start(); err != nil {
		return Summary{}, err
	}
	defer hw.Stop()

	// The caller's worker.
	cw := worker.New(caller, cfg.TaskQueue, worker.Options{})
	cw.RegisterWorkflow(checkoutWorkflow)
	if err := cw.Start(); err != nil {
		return Summary{}, err
	}
	defer cw.Stop()

	sum := Summary{Effects: e, Checkouts: map[string]Checkout{}}
	suffix := fmt.Sprint(time.Now().UnixNano())
	runs := map[string]client.WorkflowRun{}
	for i := range cfg.Orders {
		o := Order{OrderID: fmt.Sprintf("o%d-%s", i+1, suffix), Amount: 10 * (i + 1)}
		r, err := caller.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "checkout-" + o.OrderID, TaskQueue: cfg.TaskQueue}, checkoutWorkflow, checkoutParams{cfg.Endpoint, o})
		if err != nil {
			return sum, err
		}
		runs[o.OrderID] = r
	}
	for order, r := range runs {
		var c Checkout
		if err := r.Get(ctx, &c); err != nil {
			return sum, fmt.Errorf("checkout of %s: %w", order, err)
		}
		sum.Checkouts[order] = c
	}
	charges, reservations := 0, 0
	orders := slices.Sorted(maps.Keys(sum.Checkouts))
	for _, order := range orders {
		c := sum.Checkouts[order]
		ch, res := e.Count(e.Charges, order), e.Count(e.Reservations, order)
		fmt.Fprintf(out, "order %s: charge started %d times, charged %d time(s), %s; fulfil started %d times, stock reserved %d time(s), %s\n",
			order, e.Count(e.Starts, Charge+" "+order), ch, c.Receipt.ChargeID, e.Count(e.Starts, Fulfil+" "+order), res, c.Shipment.Tracking)
		charges += ch
		reservations += res
	}
	fmt.Fprintf(out, "orders: %d, charges: %d, reservations: %d\n", len(sum.Checkouts), charges, reservations)
	return sum, nil
}

// ensureNamespace registers namespace unless it exists, and waits until
// the server serves it.
func ensureNamespace(ctx context.Context, c client.Client, namespace string) error {
	_, err := c.WorkflowService().RegisterNamespace(ctx, &workflowservice.RegisterNamespaceRequest{
		Namespace:                        namespace,
		WorkflowExecutionRetentionPeriod: durationpb.New(24 * time.Hour),
	})
	var exists *serviceerror.NamespaceAlreadyExists
	if err != nil && !errors.As(err, &exists) {
		return fmt.Errorf("registering namespace %s: %w", namespace, err)
	}
	return retry(ctx, func() error {
		_, err := c.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: namespace})
		return err
	})
}

// ensureEndpoint creates the Nexus endpoint name, or repoints it, to the
// task queue of the handler namespace.
func ensureEndpoint(ctx context.Context, c client.Client, name, namespace, taskQueue string) error {
	spec := &nexuspb.EndpointSpec{
		Name: name,
		Target: &nexuspb.EndpointTarget{Variant: &nexuspb.EndpointTarget_Worker_{Worker: &nexuspb.EndpointTarget_Worker{
			Namespace: namespace, TaskQueue: taskQueue,
		}}},
	}
	// A namespace just registered may take the server a few seconds to
	// see everywhere: retry.
	return retry(ctx, func() error {
		list, err := c.OperatorService().ListNexusEndpoints(ctx, &operatorservice.ListNexusEndpointsRequest{Name: name})
		if err != nil {
			return err
		}
		if eps := list.GetEndpoints(); len(eps) > 0 {
			_, err = c.OperatorService().UpdateNexusEndpoint(ctx, &operatorservice.UpdateNexusEndpointRequest{Id: eps[0].GetId(), Version: eps[0].GetVersion(), Spec: spec})
			return err
		}
		_, err = c.OperatorService().CreateNexusEndpoint(ctx, &operatorservice.CreateNexusEndpointRequest{Spec: spec})
		return err
	})
}

// retry calls f every 200 ms until it succeeds, for at most 30 seconds.
func retry(ctx context.Context, f func() error) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		err := f()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(200 * time.Millisecond):
		}
	}
}
