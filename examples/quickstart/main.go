// Command quickstart runs a real Temporal worker and workflows whose
// payment activities are guarded by idemguard, on a machine with nothing
// but Go: no Docker, no servers started by hand.
//
//	go run ./examples/quickstart
//
// It tells two stories and prints the OpenTelemetry trace of both as a
// tree.
//
// A crash after the side effect: a Payment workflow calls a Charge
// activity. Its first attempt charges the card, and then the worker
// "crashes" before Temporal hears of the success (an interceptor throws the
// result away and fails the attempt). Temporal retries the activity; the
// guard finds the charge recorded and replays its receipt instead of
// charging again. A second workflow for the same order (a duplicate
// request) replays it too: one charge.
//
// An error after the side effect: a Purchase workflow calls a Checkout
// activity that charges the card and then e-mails the receipt, and the mail
// server is down for the first attempt. The activity returns the error,
// which releases its key (nothing was recorded), so Temporal's retry runs
// the whole activity again, charge included. Once plainly (Checkout): the
// provider gets a second charge request and deduplicates it only because it
// carries the same idempotency key, guard.KeyFromContext. Once with each
// side effect a guard.Step (CheckoutInSteps): the retry replays the
// recorded charge step and runs only the e-mail, and the provider gets one
// request.
//
// # Which Temporal
//
// The quickstart must work offline, in seconds, with only Go installed, so
// it picks the first of these that is available and says which it used:
//
//  1. A server you name: -temporal HOST:PORT, or IDEMGUARD_TEMPORAL_ADDRESS
//     (set by scripts/harness.sh), namespace "default".
//  2. A Temporal dev server it starts itself (`temporal server start-dev`,
//     in memory, on a free loopback port) and stops at exit, from a Temporal
//     CLI already on this machine: the one `make test` caches in
//     ${XDG_CACHE_HOME:-$HOME/.cache}/idemguard/temporal-cli-v1.5.1/, or
//     `temporal` on PATH.
//  3. The Temporal Go SDK's in-process test environment
//     (go.temporal.io/sdk/testsuite): the same workflow, activity,
//     interceptors and guard code, with Temporal's scheduling and retries
//     simulated in this process instead of a server.
//
// What it does not do, and why: downloading the CLI (what
// testsuite.StartDevServer does without ExistingPath) needs the network
// beyond the Go module proxy; building it with `go install` takes 5–10
// minutes on two cores; and embedding the server
// (go.temporal.io/server/temporaltest) adds about 180 modules and a
// five-minute first compile, with dependency conflicts against the AWS SDK.
// So a fresh machine gets the in-process environment; a machine that has
// run `make test` once (or has the CLI installed) gets a real server.
//
// # Which store
//
// The memory store by default. Redis when IDEMGUARD_REDIS_ADDR names a
// server (host:port, for example 127.0.0.1:6379), with the records under
// the store's default prefix "idemguard:". Otherwise DynamoDB when
// IDEMGUARD_DYNAMODB_ENDPOINT is
// set (for example to DynamoDB Local, http://127.0.0.1:8000), when the AWS
// SDK's own endpoint variables AWS_ENDPOINT_URL_DYNAMODB or AWS_ENDPOINT_URL
// are set, or when IDEMGUARD_DYNAMODB_TABLE names a table (then with the
// usual AWS configuration: region, credentials, profile). The table
// (default "idemguard-quickstart") is created if it does not exist.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/idemguard/idemguard/examples/internal/payment"
)

func main() {
	cfg := config{Temporal: "auto", Getenv: os.Getenv}
	flag.StringVar(&cfg.Temporal, "temporal", cfg.Temporal,
		`which Temporal to run on: "auto", a server's HOST:PORT, "cli" (start a dev server from the Temporal CLI) or "testsuite" (the SDK's in-process test environment)`)
	flag.Parse()

	// Interrupted or terminated, it still stops the dev server it started.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := run(ctx, os.Stdout, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

// config is what the command line chooses.
type config struct {
	// Temporal is "auto", "cli", "testsuite" or a server's host:port.
	Temporal string
	// Getenv reads the environment (os.Getenv; tests give their own).
	Getenv func(string) string
}

// result is what one run established, for the test.
type result struct {
	Temporal string            // which Temporal ran the workflows
	Store    string            // which store kept the records
	Requests int               // charge requests for the first story's order
	Charges  int               // charges made for the first story's order
	Receipts []payment.Receipt // the first story's workflows' results, in order
	Plain    checkoutResult    // the second story without guard.Step
	Steps    checkoutResult    // the second story with guard.Step
	Tree     string            // the printed trace
}

// checkoutResult is what one checkout of the second story established.
type checkoutResult struct {
	Receipt  payment.Receipt
	Requests int // charge requests that reached the provider
	Charges  int // charges the provider made
	Emails   int // receipts e-mailed
}

func run(ctx context.Context, out io.Writer, cfg config) error {
	_, err := quickstart(ctx, out, cfg)
	return err
}

func quickstart(ctx context.Context, out io.Writer, cfg config) (*result, error) {
	tp, spans := newTracerProvider()
	defer tp.Shutdown(context.Background())

	st, err := openStore(ctx, cfg.Getenv)
	if err != nil {
		return nil, err
	}
	defer st.close()

	provider, mailer := &payment.Provider{}, &Mailer{}
	w, err := newWorker(st.store, tp, provider, mailer)
	if err != nil {
		return nil, err
	}
	tc, err := startTemporal(ctx, cfg, w)
	if err != nil {
		return nil, err
	}
	defer tc.close()

	res := &result{Temporal: tc.desc, Store: st.desc}
	fmt.Fprintf(out, "Temporal: %s\n", tc.desc)
	fmt.Fprintf(out, "store:    %s\n\n", st.desc)

	// A crash after the side effect.
	fmt.Fprintln(out, "A crash after the side effect: Charge charges, then its worker dies before")
	fmt.Fprintln(out, "reporting; Temporal retries, and a duplicate workflow asks again.")
	order := payment.NewOrder("order-", 4200)
	for _, id := range []string{"pay-" + order.OrderID, "pay-" + order.OrderID + "-again"} {
		var r payment.Receipt
		if err := tc.execute(ctx, id, payment.Payment, order, &r); err != nil {
			return nil, fmt.Errorf("workflow %s: %w", id, err)
		}
		res.Receipts = append(res.Receipts, r)
		fmt.Fprintf(out, "workflow %-28s receipt %s\n", id, r)
	}
	res.Requests, res.Charges = provider.Requests(order.OrderID), provider.Charges(order.OrderID)
	fmt.Fprintf(out, "charge requests: %d, charges made: %d\n\n", res.Requests, res.Charges)

	// An error after the side effect.
	fmt.Fprintln(out, "An error after the side effect: Checkout charges, then e-mailing the receipt")
	fmt.Fprintln(out, "fails; the error releases the key, and Temporal's retry runs Checkout again.")
	for _, steps := range []bool{false, true} {
		o := payment.NewOrder("order-", 1900)
		id, how, cr := "checkout-"+o.OrderID, "without guard.Step", &res.Plain
		if steps {
			id, how, cr = id+"-steps", "with guard.Step", &res.Steps
		}
		if err := tc.execute(ctx, id, Purchase, PurchaseRequest{Order: o, Steps: steps}, &cr.Receipt); err != nil {
			return nil, fmt.Errorf("workflow %s: %w", id, err)
		}
		cr.Requests, cr.Charges, cr.Emails = provider.Requests(o.OrderID), provider.Charges(o.OrderID), mailer.Sent(o.OrderID)
		fmt.Fprintf(out, "workflow %-28s %-18s  charge requests: %d, charges made: %d, receipts e-mailed: %d\n",
			id, how, cr.Requests, cr.Charges, cr.Emails)
	}
	fmt.Fprintf(out, "without guard.Step the retry charged again, and only the idempotency key kept\n"+
		"the provider from charging twice; with guard.Step it replayed the charge step.\n\n")

	tc.close() // stop the worker, so that every span has ended
	if err := tp.ForceFlush(ctx); err != nil {
		return nil, err
	}
	res.Tree = renderTree(spans.GetSpans())
	fmt.Fprintf(out, "trace of the guarded calls:\n%s", res.Tree)
	return res, res.check()
}

// check reports what a run must not show: a second charge, different
// receipts for one order, or a checkout that did not go as its story says.
func (res *result) check() error {
	if res.Requests != 1 || res.Charges != 1 {
		return fmt.Errorf("%d charge requests and %d charges, want 1 of each: the guard replays", res.Requests, res.Charges)
	}
	for _, r := range res.Receipts[1:] {
		if r != res.Receipts[0] {
			return errors.New("the workflows returned different receipts for one order")
		}
	}
	for _, c := range []struct {
		name     string
		got      checkoutResult
		requests int
	}{{"Checkout", res.Plain, 2}, {"CheckoutInSteps", res.Steps, 1}} {
		if c.got.Requests != c.requests || c.got.Charges != 1 || c.got.Emails != 1 {
			return fmt.Errorf("%s: %d charge requests, %d charges, %d e-mails; want %d, 1, 1",
				c.name, c.got.Requests, c.got.Charges, c.got.Emails, c.requests)
		}
	}
	return nil
}
