// Command payments is the production shape of a guarded Temporal activity:
// a worker whose Charge activity is guarded by idemguard, with records in
// DynamoDB and traces exported over OTLP to Jaeger.
//
//	docker compose up -d            # DynamoDB Local, a Temporal dev server, Jaeger
//	go run ./examples/payments      # then open http://localhost:16686
//
// It starts the worker, creates the DynamoDB table on its first run, and
// submits -orders orders, each twice (a client that retried its request).
// With -crash (the default), every activity's first attempt loses its
// result after charging, so Temporal retries it. Each order is charged
// once, and the program prints the charges per order. With -serve it keeps
// the worker running until interrupted.
//
// Every setting is a flag, with its default taken from the environment
// when set there, else matching docker-compose.yml:
//
//	-temporal-address   IDEMGUARD_TEMPORAL_ADDRESS, TEMPORAL_ADDRESS   127.0.0.1:7233
//	-namespace          TEMPORAL_NAMESPACE                             default
//	-task-queue                                                        payments
//	-dynamodb-endpoint  IDEMGUARD_DYNAMODB_ENDPOINT, AWS_ENDPOINT_URL_DYNAMODB
//	                                                                   http://127.0.0.1:8000
//	-table              IDEMGUARD_DYNAMODB_TABLE                       idempotency
//	-region             AWS_REGION                                     us-east-1
//	-otlp-endpoint      OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, OTEL_EXPORTER_OTLP_ENDPOINT
//	                                                                   http://127.0.0.1:4317
//
// An empty -dynamodb-endpoint means AWS itself, with the usual AWS
// configuration (credentials, profile); a non-empty one is taken to be
// DynamoDB Local, which accepts any credentials. The OTLP endpoint is
// gRPC; an http:// URL sends without TLS.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.temporal.io/sdk/client"
	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"
	"go.temporal.io/sdk/interceptor"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"

	"github.com/idemguard/idemguard/activity"
	"github.com/idemguard/idemguard/examples/internal/payment"
	"github.com/idemguard/idemguard/guard"
	idemddb "github.com/idemguard/idemguard/store/dynamodb"
)

// Defaults: the ports docker-compose.yml publishes.
const (
	DefaultTemporalAddress  = "127.0.0.1:7233"
	DefaultNamespace        = "default"
	DefaultTaskQueue        = "payments"
	DefaultDynamoDBEndpoint = "http://127.0.0.1:8000"
	DefaultTable            = "idempotency"
	DefaultRegion           = "us-east-1"
	DefaultOTLPEndpoint     = "http://127.0.0.1:4317"
	DefaultJaegerUI         = "http://127.0.0.1:16686"
)

// ServiceName is the service the traces are filed under in Jaeger.
const ServiceName = "idemguard-payments"

// Config is what the command line and environment choose.
type Config struct {
	TemporalAddress  string
	Namespace        string
	TaskQueue        string
	DynamoDBEndpoint string // "" = AWS
	Table            string
	Region           string
	OTLPEndpoint     string
	Orders           int  // orders to submit, each twice
	Crash            bool // fail every activity's first attempt after it ran
	Serve            bool // keep the worker running after the orders
}

// parseConfig reads the flags in args, with defaults from getenv.
func parseConfig(args []string, getenv func(string) string) (Config, error) {
	env := func(def string, names ...string) string {
		for _, n := range names {
			if v := getenv(n); v != "" {
				return v
			}
		}
		return def
	}
	var c Config
	fs := flag.NewFlagSet("payments", flag.ContinueOnError)
	fs.StringVar(&c.TemporalAddress, "temporal-address", env(DefaultTemporalAddress, "IDEMGUARD_TEMPORAL_ADDRESS", "TEMPORAL_ADDRESS"), "Temporal frontend host:port")
	fs.StringVar(&c.Namespace, "namespace", env(DefaultNamespace, "TEMPORAL_NAMESPACE"), "Temporal namespace")
	fs.StringVar(&c.TaskQueue, "task-queue", DefaultTaskQueue, "Temporal task queue of the worker")
	fs.StringVar(&c.DynamoDBEndpoint, "dynamodb-endpoint", env(DefaultDynamoDBEndpoint, "IDEMGUARD_DYNAMODB_ENDPOINT", "AWS_ENDPOINT_URL_DYNAMODB"), `DynamoDB endpoint URL; "" for AWS with the usual AWS configuration`)
	fs.StringVar(&c.Table, "table", env(DefaultTable, "IDEMGUARD_DYNAMODB_TABLE"), "DynamoDB table of the idempotency records, created if missing")
	fs.StringVar(&c.Region, "region", env(DefaultRegion, "AWS_REGION"), "AWS region")
	fs.StringVar(&c.OTLPEndpoint, "otlp-endpoint", env(DefaultOTLPEndpoint, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"), "OTLP/gRPC endpoint URL the traces go to (Jaeger)")
	fs.IntVar(&c.Orders, "orders", 3, "orders to submit, each twice; 0 submits none")
	fs.BoolVar(&c.Crash, "crash", true, "fail every activity's first attempt after it ran (fault injection)")
	fs.BoolVar(&c.Serve, "serve", false, "keep the worker running until interrupted")
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

	exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpointURL(cfg.OTLPEndpoint))
	if err != nil {
		fmt.Fprintln(os.Stderr, "payments:", err)
		os.Exit(1)
	}
	if _, err := run(ctx, cfg, exp, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "payments:", err)
		os.Exit(1)
	}
	fmt.Printf("traces: service %s in Jaeger (%s with docker compose)\n", ServiceName, DefaultJaegerUI)
}

// Summary is what a run did: the charges per order it submitted.
type Summary struct {
	Requests map[string]int               // order ID -> charge requests that reached the provider
	Charges  map[string]int               // order ID -> charges the provider made
	Receipts map[string][]payment.Receipt // order ID -> the results of its workflows
}

// run starts the worker, submits cfg.Orders orders (each twice) and waits
// for them, and with cfg.Serve keeps the worker running until ctx is done.
// Spans go to exp, which run shuts down.
func run(ctx context.Context, cfg Config, exp sdktrace.SpanExporter, out io.Writer) (*Summary, error) {
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", ServiceName))),
	)
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		tp.Shutdown(ctx) // flushes the spans
	}()

	s, err := openStore(ctx, cfg)
	if err != nil {
		return nil, err
	}
	g, err := guard.New(s, guard.WithTracerProvider(tp))
	if err != nil {
		return nil, err
	}

	tracing, err := temporalotel.NewTracingInterceptor(temporalotel.TracerOptions{Tracer: tp.Tracer("temporal-sdk-go")})
	if err != nil {
		return nil, err
	}
	c, err := client.DialContext(ctx, client.Options{
		HostPort:     cfg.TemporalAddress,
		Namespace:    cfg.Namespace,
		Logger:       tlog.NewStructuredLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError + 1}))),
		Interceptors: []interceptor.ClientInterceptor{tracing}, // traces the client and, before idemguard, the worker
	})
	if err != nil {
		return nil, fmt.Errorf("connecting to Temporal at %s: %w", cfg.TemporalAddress, err)
	}
	defer c.Close()

	var opts worker.Options
	if cfg.Crash {
		// Every first attempt of Charge loses its result after charging.
		opts.Interceptors = append(opts.Interceptors, &payment.CrashAfterCharge{})
	}
	w := worker.New(c, cfg.TaskQueue, opts)
	provider := &payment.Provider{}
	a := &payment.Activities{Provider: provider}
	w.RegisterWorkflow(payment.Payment)
	activity.Register(w, a.Charge, activity.Must(activity.Wrap(g, a.Charge, activity.WithGuardOptions(
		guard.WithKeyPath("order_id"), // the business key: one charge per order
		// A duplicate that finds the charge in progress waits for its receipt
		// (for up to 10 s) rather than failing and being retried by Temporal
		// at the end of the holder's lease.
		guard.WithWait(10*time.Second)))))
	if err := w.Start(); err != nil {
		return nil, fmt.Errorf("starting the worker: %w", err)
	}
	defer w.Stop()
	fmt.Fprintf(out, "worker on %s (namespace %s, task queue %s); records in DynamoDB table %s at %s; traces to %s\n",
		cfg.TemporalAddress, cfg.Namespace, cfg.TaskQueue, cfg.Table, endpointName(cfg.DynamoDBEndpoint), cfg.OTLPEndpoint)

	sum, err := submit(ctx, c, cfg, provider, out)
	if err != nil {
		return sum, err
	}
	if cfg.Serve {
		fmt.Fprintln(out, "serving; interrupt to stop")
		<-ctx.Done()
	}
	return sum, nil
}

func endpointName(ep string) string {
	if ep == "" {
		return "AWS"
	}
	return ep
}

// openStore connects to DynamoDB and creates the table if it is missing.
func openStore(ctx context.Context, cfg Config) (*idemddb.Store, error) {
	var client *dynamodb.Client
	if cfg.DynamoDBEndpoint == "" {
		awsCfg, err := awsconfig.LoadDefaultConfig(ctx, awsconfig.WithRegion(cfg.Region))
		if err != nil {
			return nil, fmt.Errorf("loading the AWS configuration: %w", err)
		}
		client = dynamodb.NewFromConfig(awsCfg)
	} else {
		client = dynamodb.New(dynamodb.Options{
			Region:       cfg.Region,
			BaseEndpoint: aws.String(cfg.DynamoDBEndpoint),
			Credentials:  aws.NewCredentialsCache(localCredentials{}),
			// DynamoDB Local's error responses (every replay) lack the CRC32
			// header the SDK checks: see docs/dynamodb.md.
			DisableValidateResponseChecksum: true,
		})
	}
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := idemddb.CreateTable(cctx, client, cfg.Table); err != nil && !errors.Is(err, idemddb.ErrTTLNotEnabled) {
		return nil, fmt.Errorf("creating table %s at %s: %w", cfg.Table, endpointName(cfg.DynamoDBEndpoint), err)
	}
	return idemddb.New(client, cfg.Table)
}

// localCredentials are what DynamoDB Local is given: it accepts any.
type localCredentials struct{}

func (localCredentials) Retrieve(context.Context) (aws.Credentials, error) {
	return aws.Credentials{AccessKeyID: "local", SecretAccessKey: "local", Source: "payments"}, nil
}

// submit runs cfg.Orders orders, each as two workflows at once (the second
// one a client retrying its request under another workflow ID), and
// reports the charges per order.
func submit(ctx context.Context, c client.Client, cfg Config, p *payment.Provider, out io.Writer) (*Summary, error) {
	var b [3]byte
	rand.Read(b[:])
	batch := hex.EncodeToString(b[:]) // order IDs unique to this run

	sum := &Summary{Requests: map[string]int{}, Charges: map[string]int{}, Receipts: map[string][]payment.Receipt{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, 2*cfg.Orders)
	orders := make([]payment.Order, cfg.Orders)
	for i := range orders {
		orders[i] = payment.Order{OrderID: fmt.Sprintf("order-%s-%d", batch, i+1), Amount: 1000 * (i + 1), Currency: "EUR"}
		for _, id := range []string{"payment-" + orders[i].OrderID, "payment-" + orders[i].OrderID + "-resubmitted"} {
			wg.Go(func() {
				run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: cfg.TaskQueue}, payment.Payment, orders[i])
				var r payment.Receipt
				if err == nil {
					err = run.Get(ctx, &r)
				}
				if err != nil {
					errs <- fmt.Errorf("workflow %s: %w", id, err)
					return
				}
				mu.Lock()
				sum.Receipts[orders[i].OrderID] = append(sum.Receipts[orders[i].OrderID], r)
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	for _, o := range orders {
		sum.Requests[o.OrderID] = p.Requests(o.OrderID)
		sum.Charges[o.OrderID] = p.Charges(o.OrderID)
		rs := sum.Receipts[o.OrderID]
		id := ""
		if len(rs) > 0 {
			id = rs[0].ChargeID
		}
		fmt.Fprintf(out, "%s: %d workflows, charge requests: %d, charges: %d, receipt %s\n",
			o.OrderID, len(rs), sum.Requests[o.OrderID], sum.Charges[o.OrderID], id)
	}
	return sum, errors.Join(all...)
}
