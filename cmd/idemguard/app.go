package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
)

// Exit statuses.
const (
	exitOK       = 0 // found, or done
	exitNotFound = 1 // nothing found, or nothing released
	exitError    = 2 // usage or store error
)

// StoreEnv is the environment variable --store defaults to.
const StoreEnv = "IDEMGUARD_STORE"

// defaultTimeout bounds each store request unless --timeout says otherwise.
const defaultTimeout = 30 * time.Second

// app is one run of the command: its streams, environment and global
// flags.
type app struct {
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	getenv func(string) string
	now    func() time.Time

	storeURL string
	json     bool
	timeout  time.Duration
}

// exitErr ends a command with an exit status; err, if not nil, is printed
// to standard error first.
type exitErr struct {
	code int
	err  error
}

func (e *exitErr) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitErr) Unwrap() error { return e.err }

// notFound ends the command with exit status 1 and a message.
func notFound(format string, args ...any) error {
	return &exitErr{code: exitNotFound, err: fmt.Errorf(format, args...)}
}

// usage ends the command with exit status 2 for a misuse.
func usage(format string, args ...any) error {
	return &exitErr{code: exitError, err: fmt.Errorf(format, args...)}
}

// run runs the command line args and returns the exit status.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	a := &app{stdin: stdin, stdout: stdout, stderr: stderr, getenv: getenv, now: time.Now}
	root := a.rootCmd()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return exitOK
	}
	var ee *exitErr
	if errors.As(err, &ee) {
		if ee.err != nil {
			fmt.Fprintf(stderr, "idemguard: %v\n", ee.err)
		}
		return ee.code
	}
	// Cobra's own errors: an unknown command or flag, a wrong number of
	// arguments.
	fmt.Fprintf(stderr, "idemguard: %v\nRun '%s --help' for usage.\n", err, cmd.CommandPath())
	return exitError
}

func (a *app) rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "idemguard",
		Short: "Inspect and repair idemguard's idempotency records",
		Long: `idemguard inspects and repairs the idempotency records that idemguard's
guard keeps in DynamoDB, Redis or PostgreSQL: the key of an input, what a
record says, which claims are stuck, and how to clear one safely.

Choose the store with --store URL or the ` + StoreEnv + ` environment variable:

  dynamodb://TABLE[?region=R&endpoint=URL&profile=P&key-attr=…&sort-key=…&partition-value=…]
  redis://[USER:PASSWORD@]HOST:PORT[/DB][?prefix=P]   (also rediss://, unix://)
  postgres://USER@HOST:PORT/DB[?sslmode=…&table=T]     (also postgresql://)

Exit status: 0 found (or done), 1 not found (or nothing released), 2 usage
or store error.`,
		Example: `  # The three commands an operator needs first:
  idemguard key --scope charge --key-path order.id order.json
  idemguard list --stuck --store dynamodb://idempotency
  idemguard release 'charge#3f1c…' --store dynamodb://idempotency`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.CompletionOptions.HiddenDefaultCmd = true
	pf := root.PersistentFlags()
	pf.StringVar(&a.storeURL, "store", "", "the store's URL (default $"+StoreEnv+")")
	pf.BoolVar(&a.json, "json", false, "print JSON (one object per line, see docs/cli.md) instead of tables")
	pf.DurationVar(&a.timeout, "timeout", defaultTimeout, "how long each store request may take")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return &exitErr{code: exitError, err: fmt.Errorf("%w\nRun '%s --help' for usage", err, c.CommandPath())}
	})
	root.AddCommand(a.keyCmd(), a.getCmd(), a.listCmd(), a.releaseCmd(), a.purgeCmd(), a.createTableCmd())
	return root
}

// storeURLFlag returns the store URL from --store or the environment.
func (a *app) storeURLFlag() (string, error) {
	u := a.storeURL
	if u == "" {
		u = a.getenv(StoreEnv)
	}
	if u == "" {
		return "", usage("no store given: pass --store URL or set %s (dynamodb://TABLE, redis://HOST:PORT or postgres://…; see idemguard --help)", StoreEnv)
	}
	return u, nil
}

// open opens the store the flags name. The caller closes it.
func (a *app) open(ctx context.Context) (*backend, error) {
	u, err := a.storeURLFlag()
	if err != nil {
		return nil, err
	}
	b, err := openStore(ctx, u, a.stderr)
	if err != nil {
		if h := a.hint(&backend{desc: "the store"}, err); h != "" {
			err = fmt.Errorf("%w\n  %s", err, h)
		}
		return nil, &exitErr{code: exitError, err: err}
	}
	return b, nil
}

// call returns a context for one store request, bounded by --timeout.
func (a *app) call(ctx context.Context) (context.Context, context.CancelFunc) {
	if a.timeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, a.timeout)
}
