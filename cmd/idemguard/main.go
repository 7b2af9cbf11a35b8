// Command idemguard is the operator's tool for idemguard's idempotency
// records: it derives the key the guard derives for an input, shows a
// record, lists records (and the stuck claims among them), releases a stuck
// claim safely, purges expired records, and creates the table.
//
//	idemguard key --scope charge --key-path order.id order.json
//	idemguard get 'charge#3f1c…' --store dynamodb://idempotency
//	idemguard list --stuck --store redis://127.0.0.1:6379
//	idemguard release 'charge#3f1c…'
//
// The store is chosen with --store URL or the IDEMGUARD_STORE environment
// variable: dynamodb://TABLE, redis://HOST:PORT or postgres://…; see
// docs/cli.md in the repository for every command, flag and URL
// parameter, and the --json output's schema.
//
// Exit status: 0 when the record (or key, or listing) was found and the
// command did what it was asked, 1 when there was nothing to find or
// nothing was released, 2 for a usage or store error.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}
